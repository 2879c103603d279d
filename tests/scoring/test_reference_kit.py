"""The reference kit measured on this host (scoring/run/reference.py): real containers, the
supervisor's trusted wall times, the benchmark's gate; and when a host measures it again."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from portal.core import storage
from portal.hosts.models import ReferenceSpread
from portal.hosts.reference import reference_spread_record
from portal.hosts.selectors import reference_spread
from scoring import engine
from scoring.host import machine
from scoring.run import calibration, reference
from tests import factories
from tests.scoring import images as images_module
from tests.scoring.test_runner import RIGHT
from tests.scoring.test_staging import make_cohort, make_submission

KITS = {"right": RIGHT, "wrong": RIGHT.replace(r"\007", r"\010")}


@pytest.fixture(scope="module")
def kits() -> Iterator[dict[str, str]]:
    with images_module.script_images("reference", KITS) as built:
        yield built


@pytest.fixture
def contest(benchmark: Any, settings: Any) -> Any:
    """A 10-image official cohort of class 7, every image needed to pass."""
    settings.PODIUM_SUPERVISOR = images_module.supervisor()
    # No lease renewal inside the test's transaction (the heartbeat has its own connection).
    settings.PODIUM_LEASE_S = 600
    benchmark.cohort_size = 10
    benchmark.pass_min_matches = 10
    benchmark.score_timeout_s = 600  # another suite holding this engine pauses every container
    benchmark.run_memory_bytes = 256 << 20
    benchmark.run_pids_limit = 64
    benchmark.run_tmpfs_bytes = 16 << 20
    benchmark.run_output_tmpfs_bytes = 1 << 20
    benchmark.save()
    make_cohort(benchmark, [7] * 10)
    return benchmark


def leftovers() -> list[Any]:
    host = machine.scoring_host()
    return engine.list_containers([calibration.LABEL, f"{machine.HOST_LABEL}={host}"])


@pytest.mark.docker
def test_staff_measure_the_kit_and_its_spread_is_the_tolerance_from_then_on(contest, kits):
    call_command("reference_spread", contest.slug, "--image", kits["right"], "--runs", "3")

    row = ReferenceSpread.objects.get()
    assert row.ok, row.reason
    assert (row.hardware_class, row.cohort_size, row.image) == (
        contest.hardware_class_id,
        10,
        kits["right"],
    )
    assert len(row.wall_ns) == 3 and all(wall > 0 for wall in row.wall_ns)  # the warm-up not
    assert row.spread_pct == round((max(row.wall_ns) / min(row.wall_ns) - 1) * 100, 2)
    assert reference_spread(contest.hardware_class_id, 10) == row
    assert leftovers() == []
    assert not any((Path(storage.data_dir()) / "reference").glob("*"))


@pytest.mark.docker
def test_a_kit_that_does_not_pass_measures_nothing_and_changes_no_tolerance(contest, kits):
    now = timezone.now()
    good = reference_spread_record(
        benchmark=contest,
        host="earlier",
        image=kits["right"],
        cohort_size=10,
        started_at=now - dt.timedelta(days=2),
        finished_at=now - dt.timedelta(days=2),
        wall_ns=[400_000, 440_000],
    )
    with pytest.raises(CommandError, match="the kit did not pass: 0 of 10 matched"):
        call_command("reference_spread", contest.slug, "--image", kits["wrong"], "--runs", "2")

    failed = ReferenceSpread.objects.exclude(pk=good.pk).get()
    assert (failed.ok, failed.wall_ns, failed.spread_pct) == (False, [], None)
    assert reference_spread(contest.hardware_class_id, 10) == good
    assert leftovers() == []


def test_without_a_known_kit_staff_are_told_to_name_one(contest):
    with pytest.raises(CommandError, match="name its image with --image"):
        call_command("reference_spread", contest.slug)


def test_a_host_measures_nothing_before_a_claim_when_none_is_due(contest, alice, settings):
    settings.PODIUM_REFERENCE_EVERY_S = 3600
    submission = make_submission(alice, contest)
    session: Any = None  # never used: nothing is measured
    assert reference.keep_measured(session, submission.pk) is None  # no kit known yet
    reference_spread_record(
        benchmark=contest,
        host="earlier",
        image="kit:1",
        cohort_size=10,
        started_at=timezone.now(),
        finished_at=timezone.now(),
        wall_ns=[400_000, 440_000],
    )
    assert reference.keep_measured(session, submission.pk) is None  # measured just now


@pytest.mark.docker
def test_a_host_measures_the_kit_again_before_a_claim_once_the_last_is_old(
    contest, alice, kits, settings
):
    settings.PODIUM_REFERENCE_EVERY_S = 3600
    settings.PODIUM_REFERENCE_RUNS = 2
    old = timezone.now() - dt.timedelta(hours=2)
    reference_spread_record(
        benchmark=contest,
        host="earlier",
        image=kits["right"],
        cohort_size=10,
        started_at=old,
        finished_at=old,
        wall_ns=[400_000, 440_000],
    )
    submission = make_submission(alice, contest)
    with machine.hold(reschedule=lambda _reason: None) as session:
        row = reference.keep_measured(session, submission.pk)

    assert row is not None and row.ok, row and row.reason
    assert (row.image, len(row.wall_ns), row.host) == (kits["right"], 2, machine.scoring_host())
    assert reference_spread(contest.hardware_class_id, 10) == row


def test_a_benchmark_without_an_official_cohort_is_not_measured(alice, settings):
    settings.PODIUM_REFERENCE_EVERY_S = 3600
    bare = factories.BenchmarkFactory()
    session: Any = None
    assert reference.keep_measured(session, make_submission(alice, bare).pk) is None
