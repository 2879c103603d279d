"""Verification before a run ranks: the decisions, the state machine, staff, priorities.

A passing official run that would become its entrant's best in the top ``verify_top``
is re-run once off the board before it ranks. These tests drive the services as the
scoring worker does (claim, mark running, record); the real runner and containers
verify a real image in tests/e2e/test_pipeline.py.
"""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.core import mail

from portal import errors, jobs
from portal.contests import rules
from portal.contests.models import Cohort, LeaderboardEntry
from portal.contests.selectors import leaderboard_rows
from portal.submissions import staff
from portal.submissions.models import AttemptLedger, Run, Submission
from portal.submissions.services import (
    run_claim,
    run_mark_running,
    run_record_infra_failure,
    run_record_verdict,
    run_record_verification,
    submission_accept,
    submission_build_finished,
    submission_transition,
)
from tests import factories, smtp
from tests.submissions.test_concurrent_charging import source_archive

LEASE_S = 600
SECOND = 1_000_000_000
T0 = dt.datetime(2026, 8, 1, tzinfo=dt.UTC)

# The decisions (pure) -----------------------------------------------------------------


def candidate(entrant: int, wall_s: float, run: int, minute: int = 0) -> rules.Candidate:
    return rules.Candidate(
        entrant_id=entrant,
        run_id=run,
        submission_id=run,
        wall_time_ns=int(wall_s * SECOND),
        submitted_at=T0 + dt.timedelta(minutes=minute),
    )


BOARD = [candidate(entrant, float(entrant), run=100 + entrant) for entrant in range(1, 6)]


@pytest.mark.parametrize(
    ("wall_s", "verify_top", "expected"),
    [
        (0.5, 1, True),  # would be first
        (2.5, 3, True),  # third: inside the top 3
        (3.5, 3, False),  # fourth: outside
        (9.0, 20, True),  # last of six, but the top 20 covers it
        (0.5, 0, False),  # 0 verifies none
    ],
)
def test_a_new_best_in_the_top_rows_needs_verification(wall_s, verify_top, expected):
    new = candidate(99, wall_s, run=1, minute=5)
    assert rules.needs_verification(new, BOARD, verify_top=verify_top) is expected


def test_a_run_that_is_not_the_entrants_new_best_is_not_verified():
    mine = candidate(7, 2.0, run=1)
    slower = candidate(7, 3.0, run=2, minute=5)
    same_later = candidate(7, 2.0, run=3, minute=5)
    faster = candidate(7, 1.5, run=4, minute=5)
    board = [*BOARD, mine]
    assert not rules.needs_verification(slower, board, verify_top=20)
    assert not rules.needs_verification(same_later, board, verify_top=20)  # ties go earlier
    assert rules.needs_verification(faster, board, verify_top=20)
    # The run itself on the board (a recomputation) does not count against it.
    assert rules.needs_verification(faster, [*BOARD, faster], verify_top=20)


@pytest.mark.parametrize(
    ("status", "wall_s", "problem"),
    [
        ("passed", 1.0, ""),
        ("passed", 1.099, ""),
        ("passed", 0.5, ""),  # faster: the official time, which ranks, was the cold one
        ("passed", 1.101, "took 1.101 s against the official 1.000 s, more than 10% slower"),
        ("passed", 3.0, "took 3.000 s against the official 1.000 s, more than 10% slower"),
        ("failed", 1.0, "did not pass (failed: 12 of 100 matched)"),
        ("errored", None, "did not pass (errored: 12 of 100 matched)"),
    ],
)
def test_the_verification_must_pass_within_the_tolerance(status, wall_s, problem):
    found = rules.verification_problem(
        official_ns=SECOND,
        status=status,
        reason="12 of 100 matched.",
        wall_ns=None if wall_s is None else int(wall_s * SECOND),
        tolerance_pct=10,
    )
    assert (problem in found) if problem else found == ""
    assert bool(found) is bool(problem)


def test_message_priorities_put_official_before_verification_before_practice():
    official = jobs.score_priority(practice=False)
    verify = jobs.score_priority(practice=False, verification=True)
    practice = jobs.score_priority(practice=True)
    assert official < verify < practice


# The state machine --------------------------------------------------------------------


@pytest.fixture
def contest(db: Any) -> Any:
    benchmark = factories.BenchmarkFactory(verify_top=20, verify_tolerance_pct=10)
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.PRACTICE)
    return benchmark


@pytest.fixture
def reviewer(db: Any) -> Any:
    return factories.UserFactory(
        username="reviewer", email="reviewer@example.org", is_staff=True, is_superuser=True
    )


@pytest.fixture
def priorities(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...], Any]]:
    """Every task sent, with its priority."""
    calls: list[tuple[str, tuple[Any, ...], Any]] = []

    def send_task(name: str, args: Any = (), **options: Any) -> None:
        calls.append((name, tuple(args or ()), options.get("priority")))

    monkeypatch.setattr(jobs.app, "send_task", send_task)
    return calls


def queued(benchmark: Any, entrant: Any, tmp_path: Path, kind: str = Submission.OFFICIAL) -> Any:
    environment = factories.EnvironmentFactory(owner=entrant, benchmark=benchmark)
    archive = tmp_path / f"{uuid.uuid4().hex}.tar.gz"
    archive.write_bytes(source_archive())
    submission = submission_accept(
        entrant=entrant,
        benchmark=benchmark,
        environment=environment,
        source_file=archive,
        source_name="source.tar.gz",
        kind=kind,
    )
    assert submission_transition(submission.pk, frm=[Submission.ACCEPTED], to=Submission.BUILDING)
    assert submission_build_finished(submission_id=submission.pk, ok=True, image_tag="x:1")
    return submission


def claimed(submission: Submission) -> Run:
    run = run_claim(submission.pk, lease_s=LEASE_S)
    assert run is not None
    assert run_mark_running(run_id=run.pk, lease_s=LEASE_S)
    return run


def passes(submission: Submission, wall_s: float) -> Run:
    run = claimed(submission)
    assert run_record_verdict(
        run_id=run.pk,
        status=Submission.PASSED,
        reason="100 of 100 matched.",
        wall_time_ns=int(wall_s * SECOND),
        matches=100,
        total=100,
    )
    return run


def status(submission: Submission) -> str:
    submission.refresh_from_db()
    return submission.status


def board(benchmark: Any) -> list[tuple[str, int]]:
    return [(row.entrant, row.wall_time_ns) for row in leaderboard_rows(benchmark)]


def test_a_passing_top_run_is_verified_before_it_ranks(
    contest, alice, tmp_path, priorities, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        submission = queued(contest, alice, tmp_path)
        official = passes(submission, 1.0)

    assert status(submission) == Submission.VERIFYING
    assert board(contest) == []  # not ranked while verifying
    pending = submission.runs.get(purpose=Run.VERIFY)
    assert (pending.status, pending.cohort_id, pending.try_number) == (
        Run.QUEUED,
        official.cohort_id,
        2,
    )
    # Sent again to the scoring queue, at the verification priority.
    assert priorities[-1] == (jobs.SCORE_NEXT, (contest.hardware_class, 0), jobs.VERIFY_PRIORITY)

    verify = claimed(submission)
    assert verify.pk == pending.pk and status(submission) == Submission.VERIFYING
    assert run_record_verification(
        run_id=verify.pk,
        status=Submission.PASSED,
        reason="100 of 100 matched.",
        wall_time_ns=int(1.05 * SECOND),
    )

    assert status(submission) == Submission.PASSED
    entry = LeaderboardEntry.objects.get(benchmark=contest)
    assert (entry.run_id, entry.wall_time_ns) == (official.pk, SECOND)  # the official time
    notes = list(submission.events.values_list("status", "note"))
    assert notes[-2][0] == Submission.VERIFYING
    assert notes[-1] == (Submission.PASSED, "verified: the verification run passed in 1.050 s")
    # Verification charged nothing.
    assert list(AttemptLedger.objects.filter(submission=submission).values_list("delta")) == [(1,)]


def replay_rejected(benchmark: Any, entrant: Any, tmp_path: Path) -> tuple[Submission, Run, Run]:
    """A replay: its official run passes fast, its verification run matches 9 of 100."""
    submission = queued(benchmark, entrant, tmp_path)
    official = passes(submission, 0.067)
    verify = claimed(submission)
    assert run_record_verification(
        run_id=verify.pk,
        status=Submission.FAILED,
        reason="Only 9 of 100 predictions matched; 99 are needed.",
        wall_time_ns=int(0.07 * SECOND),
        output_sha256="ab" * 32,
    )
    return submission, official, verify


def test_a_replay_that_fails_verification_is_rejected_and_staff_are_told(
    contest, alice, reviewer, tmp_path, priorities, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        submission, official, verify = replay_rejected(contest, alice, tmp_path)

    assert status(submission) == Submission.REJECTED_VERIFICATION
    assert "Verification failed: the verification run did not pass" in submission.failure_reason
    assert "the attempt counts" in submission.failure_reason
    assert board(contest) == []
    assert list(AttemptLedger.objects.filter(submission=submission).values_list("delta")) == [(1,)]
    (message,) = [m for m in mail.outbox if m.to == ["reviewer@example.org"]]
    assert f"submission {submission.pk} failed its verification" in message.subject
    for run in (official, verify):
        assert f"/admin/submissions/run/{run.pk}/evidence/" in message.body
    assert "Only 9 of 100 predictions matched" in message.body


def test_a_staff_mail_that_cannot_go_does_not_touch_the_rejection(
    contest, alice, reviewer, tmp_path, priorities, settings, caplog,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", smtp.closed_port()
    with django_capture_on_commit_callbacks(execute=True):
        submission, _official, _verify = replay_rejected(contest, alice, tmp_path)

    assert status(submission) == Submission.REJECTED_VERIFICATION
    assert "Error calling" in caplog.text and "verification_rejected" in caplog.text


def test_a_verification_outside_the_tolerance_is_rejected(contest, alice, tmp_path, priorities):
    submission = queued(contest, alice, tmp_path)
    passes(submission, 1.0)
    verify = claimed(submission)
    run_record_verification(
        run_id=verify.pk, status=Submission.PASSED, reason="ok", wall_time_ns=int(1.3 * SECOND)
    )
    assert status(submission) == Submission.REJECTED_VERIFICATION
    assert "more than 10% slower" in submission.failure_reason


def test_runs_that_change_no_top_standing_rank_at_once(contest, alice, bob, tmp_path, priorities):
    contest.verify_top = 1
    contest.save()
    LeaderboardEntry.objects.all().delete()
    first = queued(contest, bob, tmp_path)
    passes(first, 1.0)
    verify = claimed(first)
    run_record_verification(
        run_id=verify.pk, status=Submission.PASSED, reason="ok", wall_time_ns=SECOND
    )
    assert status(first) == Submission.PASSED

    # Second place when only the top 1 is verified: ranks at once.
    second = queued(contest, alice, tmp_path)
    passes(second, 2.0)
    assert status(second) == Submission.PASSED
    # Slower than her own best: ranks (the board keeps her best) with no verification.
    third = queued(contest, alice, tmp_path)
    passes(third, 3.0)
    assert status(third) == Submission.PASSED
    assert board(contest) == [("bob", SECOND), ("alice", 2 * SECOND)]
    # Practice runs never are.
    practice = queued(contest, alice, tmp_path, kind=Submission.PRACTICE)
    passes(practice, 0.1)
    assert status(practice) == Submission.PASSED
    assert not Run.objects.filter(purpose=Run.VERIFY).exclude(submission=first).exists()


def test_a_platform_fault_requeues_the_verification_alone_then_waits_for_staff(
    contest, alice, reviewer, tmp_path, priorities, django_capture_on_commit_callbacks
):
    submission = queued(contest, alice, tmp_path)
    passes(submission, 1.0)
    with django_capture_on_commit_callbacks(execute=True):
        first = claimed(submission)
        assert run_record_infra_failure(run_id=first.pk, reason="engine fell over")
    assert status(submission) == Submission.VERIFYING
    assert submission.runs.filter(purpose=Run.VERIFY, status=Run.QUEUED).count() == 1
    assert priorities[-1] == (jobs.SCORE_NEXT, (contest.hardware_class, 0), jobs.VERIFY_PRIORITY)
    assert mail.outbox == []

    with django_capture_on_commit_callbacks(execute=True):
        second = claimed(submission)
        assert run_record_infra_failure(run_id=second.pk, reason="engine fell over again")
    assert status(submission) == Submission.VERIFYING  # neither refunded nor failed
    assert not submission.runs.filter(status=Run.QUEUED).exists()
    assert "could not be verified" in mail.outbox[0].subject
    assert list(AttemptLedger.objects.filter(submission=submission).values_list("delta")) == [(1,)]

    # Staff requeue it: a new verification run, sent at its priority, audited.
    staff.submission_requeue(submission=submission, actor=reviewer, reason="host fixed")
    assert submission.runs.filter(purpose=Run.VERIFY, status=Run.QUEUED).count() == 1
    third = claimed(submission)
    run_record_verification(
        run_id=third.pk, status=Submission.PASSED, reason="ok", wall_time_ns=SECOND
    )
    assert status(submission) == Submission.PASSED
    assert board(contest) == [("alice", SECOND)]


def test_staff_can_rescore_a_rejected_submission_for_free(
    contest, alice, reviewer, tmp_path, priorities, django_capture_on_commit_callbacks
):
    submission = queued(contest, alice, tmp_path)
    passes(submission, 1.0)
    verify = claimed(submission)
    run_record_verification(
        run_id=verify.pk, status=Submission.ERRORED, reason="crashed", wall_time_ns=None
    )
    assert status(submission) == Submission.REJECTED_VERIFICATION
    with django_capture_on_commit_callbacks(execute=True):
        staff.submission_rescore(submission=submission, actor=reviewer, reason="host noise")
    assert status(submission) == Submission.QUEUED
    assert priorities[-1] == (jobs.SCORE_NEXT, (contest.hardware_class, 0), jobs.OFFICIAL_PRIORITY)


def test_a_verification_under_way_cannot_be_requeued(
    contest, alice, reviewer, tmp_path, priorities
):
    submission = queued(contest, alice, tmp_path)
    passes(submission, 1.0)
    claimed(submission)
    with pytest.raises(errors.InvalidParameter, match="under way"):
        staff.submission_requeue(submission=submission, actor=reviewer, reason="again")


def test_a_verdict_for_a_run_that_is_not_a_verification_is_refused(
    contest, alice, tmp_path, priorities
):
    submission = queued(contest, alice, tmp_path)
    run = claimed(submission)
    assert not run_record_verification(
        run_id=run.pk, status=Submission.PASSED, reason="ok", wall_time_ns=SECOND
    )
    assert status(submission) == Submission.RUNNING
    assert Run.objects.get(pk=run.pk).status == Run.RUNNING  # open for its own verdict
