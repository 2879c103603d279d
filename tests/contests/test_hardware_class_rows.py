"""A class named before anyone described it: its row answers as "no row" did."""

from __future__ import annotations

import pytest

from portal.audit.models import AuditEvent
from portal.contests import review
from portal.contests.hardware import (
    class_hardware,
    class_missing_pins,
    class_platform,
    hardware_class_row,
)
from portal.contests.models import Benchmark, HardwareClass
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("engine_default", ["", HardwareClass.ARM64])
def test_a_class_created_for_its_name_reads_as_a_class_with_no_row(settings, engine_default):
    settings.PODIUM_DOCKER_PLATFORM = engine_default
    nobody = {**class_hardware("cpu-riscv"), "name": None}

    row = hardware_class_row("cpu-riscv")

    assert (row.platform, row.gpus) == ("", 0)
    assert class_platform("cpu-riscv") == engine_default
    assert class_missing_pins("cpu-riscv") == []
    assert {**class_hardware("cpu-riscv"), "name": None} == nobody


def test_a_described_class_is_left_as_it_is():
    HardwareClass.objects.create(name="gpu-h200", platform=HardwareClass.ARM64, gpus=8)

    row = hardware_class_row("gpu-h200")

    assert (row.platform, row.gpus) == (HardwareClass.ARM64, 8)
    assert HardwareClass.objects.count() == 1


def test_a_benchmark_names_its_class_by_its_row_and_reads_the_name_without_it(
    django_assert_num_queries,
):
    benchmark = factories.BenchmarkFactory(hardware_class="cpu-riscv")
    fresh = Benchmark.objects.get(pk=benchmark.pk)

    with django_assert_num_queries(0):
        assert fresh.hardware_class_id == "cpu-riscv"
    assert Benchmark.objects.filter(hardware_class="cpu-riscv").get() == benchmark
    assert benchmark.hardware_class.platform == ""


def test_moving_a_benchmark_to_another_class_is_audited_by_the_classes_names():
    made = factories.BenchmarkFactory(hardware_class="cpu-x86_64")
    benchmark = Benchmark.objects.get(pk=made.pk)
    staff = factories.UserFactory(is_staff=True)
    benchmark.hardware_class = hardware_class_row("gpu-h200")

    review.benchmark_save(benchmark=benchmark, before={"hardware_class": "cpu-x86_64"}, actor=staff)

    event = AuditEvent.objects.get(action="benchmark.rules.change")
    assert event.details == {"changes": {"hardware_class": ["cpu-x86_64", "gpu-h200"]}}
