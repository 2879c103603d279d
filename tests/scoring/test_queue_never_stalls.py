"""No one submission, and no lost message, stalls a hardware class's queue.

A waiting submission that no host can run for a reason that is not the host's (its
benchmark's cohort was deleted after it was accepted) ends ``infra_failed`` with the reason and
its attempt refunded, and the same wake-up scores the next one (the real ``score_next``
on a fake engine, as tests/scoring/test_runner.py). Celery beat's minute sweep wakes a
class again whose runs wait with no wake-up in flight.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.utils import timezone

from portal.contests.models import Cohort
from portal.core import jobs
from portal.submissions import waiting
from portal.submissions.models import AttemptLedger, Run, Submission
from portal.submissions.runs import submission_unrunnable
from portal.submissions.wakeups import score_enqueue, score_wake
from scoring import tasks, worker
from tests import factories
from tests.scoring.test_runner import FakeEngine, the_run
from tests.scoring.test_staging import make_cohort, make_submission

Sent = list[tuple[str, tuple[Any, ...], str | None]]


@pytest.fixture
def wakes(monkeypatch: pytest.MonkeyPatch) -> Sent:
    """Every message sent, as (task, args, queue), instead of a broker."""
    calls: Sent = []

    def send_task(name: str, args: Any = (), queue: str | None = None, **options: Any) -> None:
        calls.append((name, tuple(args or ()), queue))

    monkeypatch.setattr(jobs.app, "send_task", send_task)
    return calls


@pytest.fixture
def committed(django_capture_on_commit_callbacks: Any) -> Any:
    """Call a function and run what it left for after the commit (its messages)."""

    def call(function: Any, *args: Any, **kwargs: Any) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            function(*args, **kwargs)

    return call


def waited(submission: Submission, minutes: float) -> Submission:
    """The submission has waited ``minutes`` already."""
    since = timezone.now() - dt.timedelta(minutes=minutes)
    Submission.objects.filter(pk=submission.pk).update(queued_at=since, submitted_at=since)
    return submission


def refunded(submission: Submission) -> bool:
    return AttemptLedger.objects.filter(submission=submission, delta=AttemptLedger.REFUND).exists()


# A submission no host can run ----------------------------------------------------------


def test_a_submission_whose_cohort_was_deleted_ends_refunded_and_the_next_one_is_scored(
    alice, bob, benchmark, monkeypatch, wakes, committed
):
    FakeEngine().install(monkeypatch)
    benchmark.cohort_size = benchmark.pass_min_matches = 10
    benchmark.save()
    make_cohort(benchmark, [7] * 10)
    # Another benchmark of the same class: accepted while it had its cohort, which staff
    # then deleted (no run had used it yet). It waited longest, so it is first in line.
    orphan_benchmark = factories.BenchmarkFactory(hardware_class=benchmark.hardware_class_id)
    orphan_cohort = Cohort.objects.create(benchmark=orphan_benchmark, kind=Cohort.OFFICIAL)
    orphan = waited(make_submission(alice, orphan_benchmark), minutes=10)
    orphan_cohort.delete()
    good = waited(make_submission(bob, benchmark), minutes=5)
    assert waiting.next_waiting_id(hardware_class=benchmark.hardware_class_id) == orphan.pk

    committed(worker.score_next, benchmark.hardware_class_id)  # one wake-up

    orphan.refresh_from_db()
    assert orphan.status == Submission.INFRA_FAILED
    assert orphan.failure_reason == (
        "The platform cannot score this submission: this benchmark has no official cohort "
        "to score it on; the attempt was refunded."
    )
    assert refunded(orphan) and not orphan.runs.exists()
    assert orphan.events.latest("at").status == Submission.INFRA_FAILED
    good.refresh_from_db()
    assert good.status == Submission.PASSED and the_run(good).status == Run.FINISHED
    # The class is free: nothing waits, and a further wake-up finds nothing.
    assert waiting.next_waiting_id(hardware_class=benchmark.hardware_class_id) is None


def test_a_rescore_that_cannot_run_keeps_its_earlier_verdict_and_is_not_refunded(alice, benchmark):
    cohort = Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    submission = make_submission(alice, benchmark)  # queued again by a staff rescore
    Run.objects.create(
        submission=submission, cohort=cohort, try_number=1, status=Run.FINISHED, passed=True
    )

    assert submission_unrunnable(int(submission.pk), reason="Its cohort is gone.")

    submission.refresh_from_db()
    assert submission.status == Submission.INFRA_FAILED and not refunded(submission)
    assert submission.failure_reason == (
        "The platform cannot score this submission: its cohort is gone; the earlier verdict stands."
    )
    assert not submission_unrunnable(int(submission.pk), reason="Again.")  # once


def test_a_fault_of_the_host_while_claiming_is_not_swallowed(alice, benchmark, monkeypatch, wakes):
    FakeEngine().install(monkeypatch)
    make_cohort(benchmark, [7] * 10)
    queued = make_submission(alice, benchmark)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("database went away")

    monkeypatch.setattr("portal.submissions.runs.run_claim", broken)
    with pytest.raises(RuntimeError):
        worker.score_next(benchmark.hardware_class_id)

    queued.refresh_from_db()
    assert queued.status == Submission.QUEUED and not refunded(queued)


# The minute sweep ----------------------------------------------------------------------


def wake_ups(sent: Sent) -> list[tuple[str, tuple[Any, ...], str | None]]:
    return [call for call in sent if call[0] == jobs.SCORE_NEXT]


def test_the_sweep_wakes_a_class_whose_wake_up_was_lost(alice, benchmark, wakes, committed):
    queued = make_submission(alice, benchmark)
    committed(score_enqueue, queued.pk, kind=queued.kind)  # sent, then lost by the broker
    assert len(wake_ups(wakes)) == 1
    wakes.clear()

    committed(tasks.score_sweep)  # a moment later: its wake-up may still be on its way
    assert wake_ups(wakes) == []

    with time_machine.travel(timezone.now() + dt.timedelta(seconds=61)):
        committed(tasks.score_sweep)
    assert wake_ups(wakes) == [
        (
            jobs.SCORE_NEXT,
            (benchmark.hardware_class_id, 0),
            jobs.scoring_queue(benchmark.hardware_class_id),
        )
    ]


def test_the_sweep_wakes_a_class_whose_wake_up_came_to_nothing(
    alice, benchmark, monkeypatch, wakes, committed
):
    queued = waited(make_submission(alice, benchmark), minutes=5)
    committed(score_wake, hardware_class=benchmark.hardware_class_id)
    committed(tasks.score_sweep)
    assert len(wake_ups(wakes)) == 1  # the one in flight: the sweep adds nothing

    # A host takes it and fails before claiming anything (its message is spent).
    monkeypatch.setattr(worker.hosts, "accepts_work", lambda host: False)
    monkeypatch.setattr(worker, "score_wake", lambda **kwargs: None)
    committed(worker.score_next, benchmark.hardware_class_id)
    assert queued.runs.count() == 0

    committed(tasks.score_sweep)
    assert wake_ups(wakes)[1:] == [
        (
            jobs.SCORE_NEXT,
            (benchmark.hardware_class_id, 0),
            jobs.scoring_queue(benchmark.hardware_class_id),
        )
    ]


def test_the_sweep_adds_nothing_while_a_machine_backoff_is_pending(
    alice, benchmark, wakes, committed
):
    waited(make_submission(alice, benchmark), minutes=5)
    # The machine was not ready: the wake-up comes back in five minutes.
    committed(score_wake, hardware_class=benchmark.hardware_class_id, waits=1, countdown=300)

    with time_machine.travel(timezone.now() + dt.timedelta(seconds=240)):
        committed(tasks.score_sweep)
    assert len(wake_ups(wakes)) == 1
    with time_machine.travel(timezone.now() + dt.timedelta(seconds=361)):
        committed(tasks.score_sweep)  # that one is overdue by more than a minute: lost
    assert len(wake_ups(wakes)) == 2


def test_a_verification_waiting_counts_and_nothing_waiting_wakes_nothing(
    alice, benchmark, wakes, committed
):
    cohort = Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    verifying = waited(make_submission(alice, benchmark, status=Submission.VERIFYING), 5)
    Run.objects.create(submission=verifying, cohort=cohort, try_number=1, status=Run.FINISHED)
    verification = Run.objects.create(
        submission=verifying, cohort=cohort, try_number=2, purpose=Run.VERIFY
    )
    other = factories.BenchmarkFactory(hardware_class="gpu-h100")
    waited(make_submission(alice, other, status=Submission.PASSED), minutes=5)

    committed(tasks.score_sweep)
    assert wake_ups(wakes) == [
        (
            jobs.SCORE_NEXT,
            (benchmark.hardware_class_id, 0),
            jobs.scoring_queue(benchmark.hardware_class_id),
        )
    ]

    Run.objects.filter(pk=verification.pk).update(status=Run.STAGING)  # a host has it
    wakes.clear()
    waiting.wake_taken(benchmark.hardware_class_id)
    committed(tasks.score_sweep)
    assert wakes == []


def test_the_sweep_runs_every_minute_on_the_builds_queue():
    beat = [
        entry
        for entry in settings.CELERY_BEAT_SCHEDULE.values()
        if entry["task"] == "scoring.score_sweep"
    ]
    assert beat == [{"task": "scoring.score_sweep", "schedule": 60.0}]
    assert settings.CELERY_TASK_ROUTES["scoring.score_sweep"] == {"queue": "builds"}


# Where a host's time goes -------------------------------------------------------------


def test_a_scored_run_keeps_how_long_each_phase_of_its_host_took(
    alice, benchmark, monkeypatch, wakes, committed
):
    """Staff (and bench/fleet.py) read from the run where its host spent the time, from
    taking the machine to giving it back."""
    FakeEngine().install(monkeypatch)
    benchmark.cohort_size = benchmark.pass_min_matches = 10
    benchmark.save()
    make_cohort(benchmark, [7] * 10)
    queued = make_submission(alice, benchmark)

    committed(worker.score_next, benchmark.hardware_class_id)

    run = the_run(queued)
    assert run.status == Run.FINISHED
    before_claim = ("lock", "freeze", "gates", "calibration", "claim")
    in_run = ("staging", "create", "collect", "compare")
    assert set(before_claim + in_run + ("release",)) <= set(run.overhead_ms)
    assert all(run.overhead_ms[key] >= 0 for key in run.overhead_ms)
    # Everything before the claim happened before the run's record was made, and the
    # phases of the run fit between its claim and its verdict.
    assert run.finished_at is not None
    span_ms = (run.finished_at - run.created_at).total_seconds() * 1e3
    assert sum(run.overhead_ms[key] for key in in_run) <= span_ms
