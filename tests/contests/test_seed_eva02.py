"""``seed_eva02``: the flagship with the rules' numbers, and its GPU hardware class."""

from __future__ import annotations

import datetime as dt
from io import StringIO
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command

from podium_policy import dockerfile_policy
from portal.contests.models import Benchmark, Cohort, CohortItem, HardwareClass
from portal.environments.services import allowed_prefixes

SLUG = "eva02-imagenet1k-v3"
SEOUL = ZoneInfo("Asia/Seoul")
GIB = 1024**3


def seed(*options: str) -> str:
    out = StringIO()
    call_command("seed_eva02", *options, stdout=out)
    return out.getvalue()


PINS = (
    "--gpu-driver=570.124.06",
    "--cuda=12.8",
    "--kernel=6.8.0-1021-nvidia-64k",
    "--engine-version=28.2.2",
    f"--supervisor-sha256={'b' * 64}",
)


def assert_the_rules(flagship: Benchmark) -> None:
    """The numbers of docs/rules.md, "The flagship benchmark", one by one."""
    assert flagship.opens_at == dt.datetime(2026, 8, 10, 0, 0, tzinfo=SEOUL)
    assert flagship.closes_at == dt.datetime(2026, 8, 31, 18, 0, tzinfo=SEOUL)
    assert flagship.opens_at == dt.datetime(2026, 8, 9, 15, 0, tzinfo=dt.UTC)
    assert (flagship.cohort_size, flagship.pass_min_matches) == (10_000, 9_900)
    assert (flagship.attempts_per_day, flagship.attempt_timezone) == (2, "Asia/Seoul")
    assert flagship.practice_per_day == 10
    assert flagship.max_environments == 2
    assert flagship.max_image_bytes == 16 * GIB
    assert flagship.build_timeout_s == 30 * 60
    assert flagship.max_concurrent_builds == 2
    assert flagship.score_timeout_s == 16 * 60
    assert flagship.runtime_tail_bytes == 16 * 1024
    assert (flagship.verify_top, flagship.verify_tolerance_pct) == (20, 10)
    assert flagship.hardware_class_id == "gpu-h200"
    assert "9,900" in flagship.description
    assert flagship.review_top == 3
    assert "The one allowed use is evaluation." in flagship.validation_boundary


def test_it_creates_the_flagship_with_the_rules_numbers(db) -> None:
    out = seed()

    assert_the_rules(Benchmark.objects.get(slug=SLUG))
    assert "Created benchmark eva02-imagenet1k-v3" in out
    assert "manage.py import_cohort --benchmark eva02-imagenet1k-v3 --imagenet-val" in out


def test_it_describes_the_gpu_hardware_class(db) -> None:
    seed()

    row = HardwareClass.objects.get(name="gpu-h200")
    assert (row.platform, row.gpus, row.gpu_model) == ("linux/arm64", 1, "NVIDIA H200")
    assert row.missing_pins() == ["GPU driver", "CUDA", "kernel", "engine", "supervisor"]


def test_it_asks_for_the_five_pins_and_sets_those_given(db) -> None:
    out = seed("--cuda=12.8", "--kernel=6.8.0-1021-nvidia-64k")

    row = HardwareClass.objects.get(name="gpu-h200")
    assert (row.pin_cuda, row.pin_kernel, row.pin_gpu_driver) == (
        "12.8",
        "6.8.0-1021-nvidia-64k",
        "",
    )
    assert "Pin the class's GPU driver, engine, supervisor" in out
    assert "manage.py seed_eva02 --gpu-driver V --engine-version V --supervisor-sha256 V" in out

    out = seed(*PINS)

    row.refresh_from_db()
    assert row.missing_pins() == []
    assert (row.pin_gpu_driver, row.pin_supervisor_sha256) == ("570.124.06", "b" * 64)
    assert "Updated hardware class gpu-h200: pin_gpu_driver, pin_cuda" not in out  # cuda kept
    assert "pin_gpu_driver, pin_engine_version, pin_supervisor_sha256" in out
    assert "Hardware class gpu-h200 is pinned." in out and "Pin the class" not in out
    assert "Hardware class gpu-h200 is in place" in seed()  # no option: pins left alone
    row.refresh_from_db()
    assert row.missing_pins() == []


def test_running_it_again_changes_nothing(db) -> None:
    seed()
    before = Benchmark.objects.values().get(slug=SLUG)
    classes = list(HardwareClass.objects.values())

    out = seed()

    assert Benchmark.objects.values().get(slug=SLUG) == before
    assert list(HardwareClass.objects.values()) == classes
    assert Benchmark.objects.count() == 1
    assert "has the rules' settings" in out
    assert "Hardware class gpu-h200 is in place" in out


def test_it_brings_the_demo_seeded_flagship_to_the_rules(db) -> None:
    call_command(
        "seed_demo",
        "--official-count=3",
        "--practice-count=2",
        "--campaign-count=6",
        stdout=StringIO(),
    )
    Benchmark.objects.filter(slug=SLUG).update(attempts_per_day=5)
    HardwareClass.objects.create(
        name="gpu-h200", platform=HardwareClass.AMD64, gpus=2, pin_cuda="12.4"
    )

    out = seed()

    assert_the_rules(Benchmark.objects.get(slug=SLUG))
    assert "attempts_per_day 5 -> 2" in out
    assert "hardware_class cpu-" in out
    row = HardwareClass.objects.get(name="gpu-h200")
    assert (row.gpus, row.gpu_model, row.pin_cuda) == (1, "NVIDIA H200", "12.4")
    assert row.platform == "linux/arm64"
    # The flagship's CPU gate is strict: half a CPU at most, and within its noise band.
    assert (row.cpu_gate_busy_max, row.cpu_gate_noise_band) == (0.5, True)
    assert (
        "Updated hardware class gpu-h200: platform, gpus, gpu_model, cpu_gate_busy_max, "
        "cpu_gate_noise_band." in out
    )
    assert Benchmark.objects.get(slug="demo").hardware_class_id != "gpu-h200"


def test_the_starter_base_image_is_allowed(db) -> None:
    seed()
    flagship = Benchmark.objects.get(slug=SLUG)

    for image in (
        "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        "nvcr.io/nvidia/pytorch:24.10-py3",
        "docker.io/library/python:3.11",
    ):
        assert (
            dockerfile_policy.check_dockerfile(f"FROM {image}\n", allowed_prefixes(flagship)) == []
        )
    assert dockerfile_policy.check_dockerfile(
        "FROM ghcr.io/someone/pytorch:1\n", allowed_prefixes(flagship)
    )


@pytest.mark.parametrize("imported", [False, True])
def test_it_says_what_staff_must_still_do(db, imported: bool) -> None:
    seed()
    if imported:
        flagship = Benchmark.objects.get(slug=SLUG)
        for kind, count in ((Cohort.OFFICIAL, 3), (Cohort.PRACTICE, 2), (Cohort.FINAL, 4)):
            cohort = Cohort.objects.create(benchmark=flagship, kind=kind)
            CohortItem.objects.bulk_create(
                CohortItem(
                    cohort=cohort,
                    position=n,
                    canonical_name=f"{n}.JPEG",
                    sha256="0" * 64,
                    reference_class=n,
                )
                for n in range(count)
            )

    out = seed()

    assert ("--imagenet-val" in out) is not imported
    assert ("Cohorts in place: official 3 images, practice 2" in out) is imported
    assert ("Final cohort in place: 4 images" in out) is imported
    assert "Start a scoring host of class gpu-h200" in out
    # No canary pool: it says how to import one, and why.
    wanted = "2" if imported else "5,000"  # half the official cohort (3, else 10,000)
    assert f"Import a canary pool of at least {wanted} images" in out
    assert "import_cohort --benchmark eva02-imagenet1k-v3 --kind canary" in out
    assert "verification cannot stop a lookup table" in out


def test_without_a_final_cohort_it_says_how_to_import_one(db) -> None:
    seed()
    flagship = Benchmark.objects.get(slug=SLUG)
    for kind in (Cohort.OFFICIAL, Cohort.PRACTICE):
        Cohort.objects.create(benchmark=flagship, kind=kind)

    out = seed()

    assert "--imagenet-val" not in out
    assert (
        f"manage.py import_cohort --benchmark {SLUG} --kind final --images DIR --answers FILE"
        in out
    )
    assert "not fresh" in out


def test_it_says_nothing_of_canaries_once_the_pool_is_imported(db) -> None:
    seed()
    flagship = Benchmark.objects.get(slug=SLUG)
    cohort = Cohort.objects.create(benchmark=flagship, kind=Cohort.CANARY)
    CohortItem.objects.bulk_create(
        CohortItem(
            cohort=cohort,
            position=n,
            canonical_name=f"{n}.JPEG",
            sha256="0" * 64,
            reference_class=n % 1000,
        )
        for n in range(5_000)
    )

    out = seed()

    assert "--kind canary" not in out
