"""Never two verdicts for one run: conditional updates, backed by database constraints."""

from __future__ import annotations

import threading

import pytest
from django.db import IntegrityError, connection, transaction

from portal.contests.models import LeaderboardEntry
from portal.submissions.models import AttemptLedger, Run, Submission
from portal.submissions.runs import run_claim, run_record_infra_failure, run_record_verdict
from tests.scoring.test_staging import make_cohort, make_submission


@pytest.fixture
def claimed(alice, benchmark, sent) -> Run:
    """Alice's submission, claimed for scoring: its run is staging."""
    make_cohort(benchmark, [7] * 4)
    submission = make_submission(alice, benchmark)
    run = run_claim(submission.pk, lease_s=60)
    assert run is not None
    return run


def passed(run: Run, wall_time_ns: int) -> bool:
    return run_record_verdict(
        run_id=run.pk,
        status=Submission.PASSED,
        reason="",
        wall_time_ns=wall_time_ns,
        matches=4,
        total=4,
    )


def final_events(submission_id: int) -> list[str]:
    submission = Submission.objects.get(pk=submission_id)
    return [e.status for e in submission.events.all() if e.status in Submission.FINAL]


def test_a_second_verdict_for_the_same_run_is_refused(claimed):
    assert passed(claimed, wall_time_ns=1_000)
    assert not passed(claimed, wall_time_ns=1)  # a redelivered task with a faster time
    assert not run_record_verdict(run_id=claimed.pk, status=Submission.ERRORED, reason="late")

    claimed.refresh_from_db()
    assert (claimed.verdict, claimed.wall_time_ns) == ("passed", 1_000)
    assert final_events(claimed.submission_id) == ["passed"]
    assert LeaderboardEntry.objects.get(run=claimed).wall_time_ns == 1_000


def test_no_verdict_after_a_platform_failure_and_no_platform_failure_after_a_verdict(
    claimed, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        assert run_record_infra_failure(run_id=claimed.pk, reason="the worker stopped answering")
        assert not passed(claimed, wall_time_ns=1_000)  # the dead worker's run, finishing late
        assert not run_record_infra_failure(run_id=claimed.pk, reason="reaped twice")

    claimed.refresh_from_db()
    assert claimed.status == Run.INFRA_FAILED and claimed.verdict == ""
    assert Submission.objects.get(pk=claimed.submission_id).status == Submission.QUEUED
    assert not LeaderboardEntry.objects.exists()
    assert len(sent) == 1  # requeued once, not twice

    second = run_claim(claimed.submission_id, lease_s=60)
    assert second is not None and second.try_number == 2
    assert passed(second, wall_time_ns=2_000)
    assert not run_record_infra_failure(run_id=second.pk, reason="the reaper, too late")
    assert not AttemptLedger.objects.filter(delta=AttemptLedger.REFUND).exists()
    assert final_events(claimed.submission_id) == ["passed"]


def test_the_database_refuses_a_second_active_run(claimed):
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(
            submission=claimed.submission, cohort=claimed.cohort, try_number=2, status=Run.RUNNING
        )
    assert passed(claimed, wall_time_ns=1_000)
    assert not passed(claimed, wall_time_ns=500)  # the run's verdict is written once
    assert Run.objects.get(pk=claimed.pk).wall_time_ns == 1_000


@pytest.mark.django_db(transaction=True)
def test_racing_verdicts_record_exactly_one(alice, benchmark, sent):
    make_cohort(benchmark, [7] * 4)
    submission = make_submission(alice, benchmark)
    run = run_claim(submission.pk, lease_s=60)
    assert run is not None
    results: list[bool] = []
    barrier = threading.Barrier(4)

    def record(wall_time_ns: int) -> None:
        try:
            barrier.wait()
            results.append(passed(run, wall_time_ns))
        finally:
            connection.close()

    threads = [threading.Thread(target=record, args=(n,)) for n in (1, 2, 3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert sorted(results) == [False, False, False, True]
    assert final_events(submission.pk) == ["passed"]
    assert LeaderboardEntry.objects.filter(entrant=alice).count() == 1
