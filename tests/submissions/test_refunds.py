"""The attempt ledger: every charge and refund with its reason and attempt day.

An attempt is charged when an upload is accepted and refunded only when the platform
fails (a fault is retried once; the second one refunds) or staff cancel. Whatever the
entrant's own code does (build failure, build timeout, crash, timeout, invalid output,
agreement below the gate) the attempt counts.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import time_machine

from portal.contests import rules
from portal.contests.models import Cohort
from portal.core import errors, jobs
from portal.submissions import staff
from portal.submissions.attempts import attempt_refund, quota_for
from portal.submissions.builds import submission_build_finished, submission_build_platform_failure
from portal.submissions.intake import submission_accept
from portal.submissions.models import AttemptLedger, Run, Submission
from portal.submissions.runs import (
    run_claim,
    run_mark_running,
    run_record_infra_failure,
    run_record_verdict,
)
from portal.submissions.services import submission_transition
from scoring import engine
from scoring.build import builds
from tests import factories
from tests.submissions.test_concurrent_charging import source_archive

OFFICIAL, PRACTICE = Submission.OFFICIAL, Submission.PRACTICE
LEASE_S = 600
# 2026-08-12 23:59 KST and 2026-08-13 00:01 KST: either side of a Seoul midnight.
BEFORE_SEOUL_MIDNIGHT = dt.datetime(2026, 8, 12, 14, 59, tzinfo=dt.UTC)
AFTER_SEOUL_MIDNIGHT = dt.datetime(2026, 8, 12, 15, 1, tzinfo=dt.UTC)
AUG_12, AUG_13 = dt.date(2026, 8, 12), dt.date(2026, 8, 13)


@pytest.fixture(autouse=True)
def sent(sent: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[str, tuple[Any, ...]]]:
    """Tasks handed to the broker once their transaction committed, for every test here."""
    return sent


@pytest.fixture
def contest(db: Any) -> Any:
    """The flagship's window (2026-08-10 00:00 KST to 2026-08-31 18:00 KST), default rules."""
    kst = dt.timezone(dt.timedelta(hours=9))
    benchmark = factories.BenchmarkFactory(
        opens_at=dt.datetime(2026, 8, 10, tzinfo=kst),
        closes_at=dt.datetime(2026, 8, 31, 18, tzinfo=kst),
    )
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.PRACTICE)
    return benchmark


@pytest.fixture
def environment(contest: Any, alice: Any) -> Any:
    return factories.EnvironmentFactory(owner=alice, benchmark=contest)


@pytest.fixture
def upload(tmp_path: Path, alice: Any, environment: Any) -> Any:
    """Accept one upload of alice's (charged) at ``now`` (the frozen clock by default)."""
    archive = tmp_path / "source.tar.gz"
    archive.write_bytes(source_archive())

    def accept(kind: str = OFFICIAL, now: dt.datetime | None = None) -> Submission:
        return submission_accept(
            entrant=alice,
            benchmark=environment.benchmark,
            environment=environment,
            source_file=archive,
            source_name="source.tar.gz",
            kind=kind,
            now=now,
        )

    return accept


def built(submission: Submission) -> Submission:
    """accepted -> building -> queued, as the build worker moves it."""
    assert submission_transition(submission.pk, frm=[Submission.ACCEPTED], to=Submission.BUILDING)
    assert submission_build_finished(submission_id=submission.pk, ok=True, image_tag="podium/x:1")
    return submission


def running(submission: Submission) -> Run:
    run = run_claim(submission.pk, lease_s=LEASE_S)
    assert run is not None
    assert run_mark_running(run_id=run.pk, lease_s=LEASE_S)
    return run


def ledger(submission: Submission) -> list[tuple[int, str, dt.date, str]]:
    return [
        (row.delta, row.kind, row.attempt_day, row.reason)
        for row in AttemptLedger.objects.filter(submission=submission).order_by("id")
    ]


def status(submission: Submission) -> str:
    submission.refresh_from_db(fields=["status"])
    return submission.status


def used(alice: Any, benchmark: Any, now: dt.datetime, kind: str = OFFICIAL) -> tuple[int, int]:
    quota = quota_for(alice, benchmark, kind, now)
    return quota.used_today, quota.remaining_today


# The ledger ---------------------------------------------------------------------------


@time_machine.travel(dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC), tick=False)
def test_an_accepted_upload_writes_one_charge_with_its_reason_and_day(contest, alice, upload):
    official, practice = upload(), upload(PRACTICE)

    assert ledger(official) == [(1, OFFICIAL, AUG_12, "upload accepted")]
    assert ledger(practice) == [(1, PRACTICE, AUG_12, "upload accepted")]
    row = AttemptLedger.objects.get(submission=official)
    assert (row.entrant, row.benchmark, row.at) == (alice, contest, official.submitted_at)


@time_machine.travel(dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC), tick=False)
def test_a_platform_failure_is_requeued_once_then_refunded(
    contest, alice, upload, sent, django_capture_on_commit_callbacks
):
    submission = built(upload())
    first = running(submission)

    with django_capture_on_commit_callbacks(execute=True):
        run_record_infra_failure(run_id=first.pk, reason="the engine went away")

    assert status(submission) == Submission.QUEUED
    assert sent[-1] == (jobs.SCORE_NEXT, (submission.benchmark.hardware_class_id, 0))
    assert [delta for delta, *_ in ledger(submission)] == [1]
    assert used(alice, contest, dt.datetime.now(dt.UTC)) == (1, 1)

    second = running(submission)
    assert second.try_number == 2
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        run_record_infra_failure(run_id=second.pk, reason="the engine went away again")

    assert status(submission) == Submission.INFRA_FAILED
    # Not requeued a second time: only the entrant's mail about the refund is queued.
    assert sent == [(jobs.SEND_VERDICT_MAIL, (submission.pk, Submission.INFRA_FAILED))]
    assert ledger(submission) == [
        (1, OFFICIAL, AUG_12, "upload accepted"),
        (-1, OFFICIAL, AUG_12, "platform failure: the engine went away again"),
    ]
    submission.refresh_from_db()
    assert "refunded" in submission.failure_reason
    assert used(alice, contest, dt.datetime.now(dt.UTC)) == (0, 2)
    assert [run.status for run in submission.runs.order_by("try_number")] == [
        Run.INFRA_FAILED,
        Run.INFRA_FAILED,
    ]


@time_machine.travel(dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC), tick=False)
def test_a_platform_failure_then_a_verdict_keeps_the_charge(contest, alice, upload):
    submission = built(upload())
    run_record_infra_failure(run_id=running(submission).pk, reason="lease expired")

    retry = running(submission)
    run_record_verdict(
        run_id=retry.pk, status=Submission.FAILED, reason="below the gate", matches=3, total=10
    )

    assert status(submission) == Submission.FAILED
    assert [delta for delta, *_ in ledger(submission)] == [1]
    assert used(alice, contest, dt.datetime.now(dt.UTC)) == (1, 1)


@time_machine.travel(dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC), tick=False)
def test_a_platform_failure_while_building_is_retried_once_then_refunded(
    contest, alice, upload, sent, django_capture_on_commit_callbacks
):
    submission = upload()
    submission_transition(submission.pk, frm=[Submission.ACCEPTED], to=Submission.BUILDING)

    with django_capture_on_commit_callbacks(execute=True):
        submission_build_platform_failure(submission.pk, reason="Docker Engine: gone")

    assert status(submission) == Submission.ACCEPTED
    assert sent[-1] == (jobs.BUILD_SUBMISSION, (submission.pk,))
    assert [delta for delta, *_ in ledger(submission)] == [1]

    submission_transition(submission.pk, frm=[Submission.ACCEPTED], to=Submission.BUILDING)
    submission_build_platform_failure(submission.pk, reason="Docker Engine: gone again")

    assert status(submission) == Submission.INFRA_FAILED
    assert ledger(submission)[-1] == (
        -1,
        OFFICIAL,
        AUG_12,
        "platform failure during the build: Docker Engine: gone again",
    )
    assert used(alice, contest, dt.datetime.now(dt.UTC)) == (0, 2)


@time_machine.travel(dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC), tick=False)
@pytest.mark.parametrize("stage", ["accepted", "building", "queued", "running"])
def test_a_staff_cancellation_refunds_with_the_reason(contest, alice, staff_user, upload, stage):
    submission = upload()
    if stage == "building":
        submission_transition(submission.pk, frm=[Submission.ACCEPTED], to=Submission.BUILDING)
    elif stage in ("queued", "running"):
        built(submission)
    if stage == "running":
        running(submission)

    staff.submission_cancel(submission=submission, actor=staff_user, reason="host on fire")

    assert status(submission) == Submission.CANCELLED
    assert ledger(submission) == [
        (1, OFFICIAL, AUG_12, "upload accepted"),
        (-1, OFFICIAL, AUG_12, "cancelled by staff: host on fire"),
    ]
    assert used(alice, contest, dt.datetime.now(dt.UTC)) == (0, 2)


@pytest.fixture
def staff_user(db: Any) -> Any:
    return factories.UserFactory(username="staff", is_staff=True)


ENTRANT_FAILURES = {
    "build_failed": "build.sh exited with status 1; see the build log.",
    "build_timeout": "build.sh ran past the 1800-second cap.",
    "below_the_gate": "9,899 of 10,000 match; 9,900 are needed to pass.",
    "crash": "the program exited with status 139",
    "timeout": "stopped at the 960-second limit",
    "invalid_output": "the output has 12 bytes; 40,000 were expected",
}


@time_machine.travel(dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC), tick=False)
@pytest.mark.parametrize("failure", sorted(ENTRANT_FAILURES))
def test_the_entrants_own_failures_never_refund(contest, alice, staff_user, upload, failure):
    reason = ENTRANT_FAILURES[failure]
    submission = upload()
    if failure.startswith("build"):
        submission_transition(submission.pk, frm=[Submission.ACCEPTED], to=Submission.BUILDING)
        submission_build_finished(submission_id=submission.pk, ok=False, reason=reason)
        expected = Submission.BUILD_FAILED
    else:
        run = running(built(submission))
        expected = Submission.FAILED if failure == "below_the_gate" else Submission.ERRORED
        run_record_verdict(run_id=run.pk, status=expected, reason=reason, wall_time_ns=5)

    assert status(submission) == expected
    assert ledger(submission) == [(1, OFFICIAL, AUG_12, "upload accepted")]
    assert used(alice, contest, dt.datetime.now(dt.UTC)) == (1, 1)
    with pytest.raises(errors.InvalidParameter):  # nor can staff cancel a finished one
        staff.submission_cancel(submission=submission, actor=staff_user, reason="please")


@time_machine.travel(dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC), tick=False)
def test_a_refund_is_written_once_however_often_it_is_asked_for(contest, upload):
    submission = upload()

    results = [attempt_refund(submission=submission, reason=f"try {n}") for n in range(3)]

    assert results == [True, False, False]
    assert [reason for delta, *_, reason in ledger(submission) if delta < 0] == ["try 0"]


# The day a refund belongs to ----------------------------------------------------------


def test_a_refund_after_seoul_midnight_gives_the_attempt_back_on_the_day_of_the_refund(
    contest, alice, upload, staff_user
):
    with time_machine.travel(BEFORE_SEOUL_MIDNIGHT, tick=False):
        kept, cancelled = upload(), upload()
        assert used(alice, contest, BEFORE_SEOUL_MIDNIGHT) == (2, 0)

    with time_machine.travel(AFTER_SEOUL_MIDNIGHT, tick=False):
        staff.submission_cancel(submission=cancelled, actor=staff_user, reason="late refund")
        today = used(alice, contest, AFTER_SEOUL_MIDNIGHT)

    assert ledger(cancelled) == [
        (1, OFFICIAL, AUG_12, "upload accepted"),
        (-1, OFFICIAL, AUG_13, "cancelled by staff: late refund"),
    ]
    assert AttemptLedger.objects.get(submission=cancelled, delta=-1).at == AFTER_SEOUL_MIDNIGHT
    # 12 August is over and stays as it was: both of its attempts were charged ...
    last_moment_of_aug_12 = dt.datetime(2026, 8, 12, 14, 59, 59, 999999, tzinfo=dt.UTC)
    assert used(alice, contest, last_moment_of_aug_12) == (2, 0)
    # ... and 13 August has its own two plus the one given back.
    assert today == (0, 3)
    assert ledger(kept) == [(1, OFFICIAL, AUG_12, "upload accepted")]


def test_the_attempt_a_late_refund_gives_back_can_be_spent_that_day_and_only_that_day(
    contest, alice, upload, staff_user
):
    contest.max_concurrent_builds = 5  # the uploads wait for no build here
    contest.save(update_fields=["max_concurrent_builds"])
    with time_machine.travel(BEFORE_SEOUL_MIDNIGHT, tick=False):
        cancelled = upload()
        upload()

    with time_machine.travel(AFTER_SEOUL_MIDNIGHT, tick=False):
        staff.submission_cancel(submission=cancelled, actor=staff_user, reason="late refund")
        for _ in range(3):
            upload()
        assert used(alice, contest, AFTER_SEOUL_MIDNIGHT) == (2, 0)
        with pytest.raises(errors.QuotaExhausted):
            upload()

    next_day = AFTER_SEOUL_MIDNIGHT + dt.timedelta(days=1)
    with time_machine.travel(next_day, tick=False):
        assert used(alice, contest, next_day) == (0, 2)


def test_a_platform_refund_after_seoul_midnight_also_lands_on_the_day_of_the_refund(
    contest, alice, upload
):
    with time_machine.travel(BEFORE_SEOUL_MIDNIGHT, tick=False):
        submission = built(upload())
        run_record_infra_failure(run_id=running(submission).pk, reason="first fault")
        second = running(submission)

    with time_machine.travel(AFTER_SEOUL_MIDNIGHT, tick=False):
        run_record_infra_failure(run_id=second.pk, reason="second fault")

    assert ledger(submission)[-1] == (-1, OFFICIAL, AUG_13, "platform failure: second fault")
    assert rules.attempt_day(AFTER_SEOUL_MIDNIGHT, "Asia/Seoul") == AUG_13
    assert used(alice, contest, AFTER_SEOUL_MIDNIGHT) == (0, 3)


@time_machine.travel(dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC), tick=False)
def test_a_day_with_many_refunds_never_gives_more_than_the_allowance(
    contest, alice, upload, staff_user
):
    now = dt.datetime.now(dt.UTC)
    for _ in range(6):  # each cancelled attempt frees its place again
        staff.submission_cancel(submission=upload(), actor=staff_user, reason="requeue storm")
        assert used(alice, contest, now) == (0, 2)

    upload()
    assert used(alice, contest, now) == (1, 1)
    upload()
    assert used(alice, contest, now) == (2, 0)
    with pytest.raises(errors.QuotaExhausted):
        upload()

    deltas = list(AttemptLedger.objects.filter(entrant=alice).values_list("delta", flat=True))
    assert (deltas.count(1), deltas.count(-1)) == (8, 6)
    assert set(AttemptLedger.objects.values_list("attempt_day", flat=True)) == {AUG_12}


@time_machine.travel(dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC), tick=False)
def test_practice_refunds_go_back_to_the_practice_allowance(contest, alice, upload, staff_user):
    now = dt.datetime.now(dt.UTC)
    upload()
    practice = upload(PRACTICE)

    staff.submission_cancel(submission=practice, actor=staff_user, reason="r")

    assert ledger(practice)[-1][:2] == (-1, PRACTICE)
    assert used(alice, contest, now, PRACTICE) == (0, 10)
    assert used(alice, contest, now, OFFICIAL) == (1, 1)


# Rescores -----------------------------------------------------------------------------


@time_machine.travel(dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC), tick=False)
def test_a_rescore_hit_by_a_platform_fault_is_requeued_once_and_refunds_nothing(
    contest, alice, upload, staff_user
):
    """A rescore charges nothing, so its platform faults give nothing back either: the
    attempt was used by the verdict that stands. Its first fault is still requeued."""
    submission = built(upload())
    run_record_verdict(
        run_id=running(submission).pk,
        status=Submission.PASSED,
        reason="ok",
        wall_time_ns=1_000,
        matches=9_950,
        total=10_000,
    )
    staff.submission_rescore(submission=submission, actor=staff_user)

    run_record_infra_failure(run_id=running(submission).pk, reason="first fault")

    assert status(submission) == Submission.QUEUED

    run_record_infra_failure(run_id=running(submission).pk, reason="second fault")

    assert status(submission) == Submission.INFRA_FAILED
    assert [delta for delta, *_ in ledger(submission)] == [1]
    submission.refresh_from_db()
    assert "refunded" not in submission.failure_reason
    assert used(alice, contest, dt.datetime.now(dt.UTC)) == (1, 1)


# A submission image over the cap (real Docker) ------------------------------------------


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_a_submission_image_over_the_cap_fails_its_build_and_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs.app, "send_task", lambda *args, **kwargs: None)
    committed: list[str] = []  # other test runs share the engine: look for our image only
    real_commit = engine.commit

    def commit_spy(container_id: str, *, repository: str, tag: str, **kw: Any) -> Any:
        committed.append(f"{repository}:{tag}")
        return real_commit(container_id, repository=repository, tag=tag, **kw)

    monkeypatch.setattr(engine, "commit", commit_spy)
    alice = factories.UserFactory(username="alice")
    benchmark = factories.BenchmarkFactory(max_image_bytes=1)
    factories.cohorts(benchmark)
    environment = factories.EnvironmentFactory(owner=alice, benchmark=benchmark)
    archive = tmp_path / "source.tar.gz"
    archive.write_bytes(source_archive())
    submission = submission_accept(
        entrant=alice,
        benchmark=benchmark,
        environment=environment,
        source_file=archive,
        source_name="source.tar.gz",
    )

    builds.build_submission(submission.pk)

    submission.refresh_from_db()
    assert submission.status == Submission.BUILD_FAILED
    assert submission.failure_reason.startswith("The submission image is ")
    assert submission.failure_reason.endswith("bytes; the cap is 1 bytes.")
    assert submission.image_tag == ""
    assert len(committed) == 1
    assert not engine.image_exists(committed[0])  # removed, nothing left behind
    assert list(AttemptLedger.objects.values_list("delta", flat=True)) == [1]
