"""Verification before a run ranks: the decisions, the state machine, staff, priorities.

A passing official run that would become its entrant's best in the top ``verify_top``
is re-run off the board before it ranks: a correctness failure rejects at once, a timing
miss is measured again (up to ``PODIUM_VERIFY_MAX_RUNS``) and judged on the fastest run.
These tests drive the services as the scoring worker does (claim, mark running, record);
the real runner and containers verify a real image in tests/e2e/test_pipeline.py.
"""

from __future__ import annotations

import datetime as dt
import html
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.core.cache import cache
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.contests import rules
from portal.contests.hardware import hardware_class_row
from portal.contests.models import Cohort, LeaderboardEntry
from portal.contests.selectors import leaderboard_rows
from portal.core import errors, jobs
from portal.hosts.models import HostCalibration, ScoringHost
from portal.hosts.selectors import noise_band_cache_key
from portal.submissions import staff, waiting
from portal.submissions.builds import submission_build_finished
from portal.submissions.intake import submission_accept
from portal.submissions.models import AttemptLedger, Run, Submission
from portal.submissions.runs import (
    run_claim,
    run_mark_running,
    run_record_infra_failure,
    run_record_verdict,
)
from portal.submissions.services import submission_transition
from portal.submissions.verification import run_record_verification
from scoring.cohort import staging, verifysets
from tests import factories, smtp
from tests.hosts.conftest import FACTS
from tests.scoring.test_staging import CLASSES, make_cohort
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


def decide(
    walls_s: list[float | None],
    *,
    status: str = "passed",
    tolerance_pct: float = 10,
    band: float | None = None,
    factor: float = 3,
    max_runs: int = 3,
) -> rules.VerificationVerdict:
    return rules.verification_decision(
        official_ns=SECOND,
        status=status,
        reason="12 of 100 matched.",
        walls_ns=[None if wall is None else round(wall * SECOND) for wall in walls_s],
        tolerance_pct=tolerance_pct,
        noise_band_pct=band,
        noise_factor=factor,
        max_runs=max_runs,
    )


@pytest.mark.parametrize(
    ("walls_s", "action", "reason"),
    [
        ([1.0], rules.CONFIRM, ""),
        ([1.099], rules.CONFIRM, ""),
        ([1.1], rules.CONFIRM, ""),  # exactly the tolerance
        ([0.5], rules.CONFIRM, ""),  # faster: the official time, which ranks, was the cold one
        (
            [1.101],
            rules.REMEASURE,
            "the verification run took 1.101 s against the official 1.000 s, more than 10% slower.",
        ),
        ([3.0, 1.05], rules.CONFIRM, ""),  # a re-measure within the tolerance: the fastest
        ([1.3, 1.2], rules.REMEASURE, "the fastest of 2 verification runs took 1.200 s"),
        (
            [1.3, 1.2, 1.25],
            rules.REJECT,
            "the fastest of 3 verification runs took 1.200 s against the official 1.000 s, "
            "more than 10% slower.",
        ),
        ([1.3, 1.2, 1.08], rules.CONFIRM, ""),
    ],
)
def test_timing_is_judged_on_the_fastest_of_up_to_three_runs(walls_s, action, reason):
    verdict = decide(walls_s)
    assert (verdict.action, verdict.run, verdict.of) == (action, len(walls_s), 3)
    assert verdict.reason.startswith(reason) if reason else verdict.reason == ""
    assert verdict.fastest_ns == round(min(walls_s) * SECOND)
    assert verdict.tolerance_pct == 10


@pytest.mark.parametrize(
    ("status", "walls_s", "problem"),
    [
        ("failed", [1.0], "did not pass (failed: 12 of 100 matched)"),
        ("errored", [None], "did not pass (errored: 12 of 100 matched)"),
        ("failed", [1.3, 1.0], "did not pass (failed: 12 of 100 matched)"),  # on a re-measure
        ("passed", [None], "has no wall time"),
    ],
)
def test_a_correctness_failure_rejects_at_once(status, walls_s, problem):
    verdict = decide(walls_s, status=status)
    assert verdict.action == rules.REJECT and problem in verdict.reason
    assert verdict.fastest_ns is None


@pytest.mark.parametrize(
    ("tolerance_pct", "band", "factor", "expected"),
    [
        (10, None, 3, 10.0),  # no band published yet
        (10, 2.0, 3, 10.0),  # 3 x 2 % is narrower
        (10, 5.0, 3, 15.0),
        (10, 4.123, 3, 12.37),  # rounded as shown
        (25, 5.0, 3, 25.0),
        (10, 5.0, 4, 20.0),
    ],
)
def test_the_tolerance_is_the_larger_of_the_benchmarks_and_the_noise_band_times_the_factor(
    tolerance_pct, band, factor, expected
):
    assert (
        rules.verification_tolerance_pct(
            tolerance_pct=tolerance_pct, noise_band_pct=band, noise_factor=factor
        )
        == expected
    )


def test_a_noisy_class_widens_the_tolerance_and_says_so():
    assert decide([1.14], band=5.0).action == rules.CONFIRM
    verdict = decide([1.3, 1.2, 1.16], band=5.0)
    assert verdict.action == rules.REJECT
    assert verdict.reason == (
        "the fastest of 3 verification runs took 1.160 s against the official 1.000 s, "
        "more than 15% slower (the tolerance: 3 x the class's noise band of 5%)."
    )


@pytest.mark.parametrize(
    ("official_s", "wall_s", "action"),
    [
        (0.42, 0.472, rules.CONFIRM),  # 12% slower, but only 52 ms: start-up jitter
        (0.42, 0.52, rules.CONFIRM),  # exactly the slack
        (0.42, 0.521, rules.REMEASURE),  # past both
        (2.0, 2.15, rules.CONFIRM),  # 150 ms, but within 10%
        (2.0, 2.3, rules.REMEASURE),  # 300 ms and 15%: past both
    ],
)
def test_a_short_run_may_be_slower_by_the_slack_whatever_the_percentage(official_s, wall_s, action):
    verdict = rules.verification_decision(
        official_ns=round(official_s * SECOND),
        status="passed",
        reason="",
        walls_ns=[round(wall_s * SECOND)],
        tolerance_pct=10,
        noise_band_pct=None,
        noise_factor=3,
        max_runs=3,
        slack_ns=100_000_000,
    )
    assert verdict.action == action
    assert verdict.within == "10% (at least 100 ms)"
    if action == rules.REMEASURE:
        assert verdict.reason.endswith("more than 10% slower and more than 100 ms.")


def test_the_slack_is_a_setting(contest, alice, tmp_path, priorities, settings):
    settings.PODIUM_VERIFY_SLACK_MS = 400
    submission = queued(contest, alice, tmp_path)
    passes(submission, 1.0)
    verifies(submission, 1.35)  # 35% slower, but within 400 ms

    assert status(submission) == Submission.PASSED


def test_one_verification_run_at_most_rejects_its_first_miss():
    verdict = decide([1.2], max_runs=1)
    assert (verdict.action, verdict.run, verdict.of) == (rules.REJECT, 1, 1)


walls = st.lists(st.integers(1, 10 * SECOND), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(
    official=st.integers(1, 10 * SECOND),
    walls_ns=walls,
    tolerance=st.integers(0, 100),
    band=st.none() | st.floats(0, 50),
    max_runs=st.integers(1, 5),
)
def test_the_decision_never_rejects_on_a_noisy_sample_alone(
    official, walls_ns, tolerance, band, max_runs
):
    walls_ns = walls_ns[:max_runs]
    verdict = rules.verification_decision(
        official_ns=official,
        status="passed",
        reason="",
        walls_ns=walls_ns,
        tolerance_pct=tolerance,
        noise_band_pct=band,
        noise_factor=3,
        max_runs=max_runs,
    )
    limit = max(tolerance, 3 * band if band is not None else 0)
    within = (min(walls_ns) - official) * 100 <= verdict.tolerance_pct * official
    assert verdict.tolerance_pct == pytest.approx(limit, abs=0.005 + 1e-9)  # to hundredths
    # Within the tolerance (faster included) confirms, whichever run it was.
    assert (verdict.action == rules.CONFIRM) is within
    # A timing miss rejects only once every run was used, and names the fastest time.
    if verdict.action == rules.REJECT:
        assert len(walls_ns) == max_runs
        assert f"took {min(walls_ns) / 1e9:.3f} s" in verdict.reason
    if verdict.action == rules.REMEASURE:
        assert len(walls_ns) < max_runs
    # More (or faster) measurements never turn a confirmation into a miss.
    if within:
        again = rules.verification_decision(
            official_ns=official,
            status="passed",
            reason="",
            walls_ns=[*walls_ns, 10 * SECOND],
            tolerance_pct=tolerance,
            noise_band_pct=band,
            noise_factor=3,
            max_runs=max_runs + 1,
        )
        assert again.action == rules.CONFIRM


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


def claimed(submission: Submission, *, prepared: bool = False) -> Run:
    """The submission's next run, claimed and running. A verification run's claim takes
    a ready set of its cohort: one is put in the pool first (rows only, or ``prepared``:
    a real set, files and all, for a test that stages it)."""
    submission.refresh_from_db()
    if submission.status == Submission.VERIFYING:
        cohort = Cohort.objects.get(benchmark=submission.benchmark, kind=Cohort.OFFICIAL)
        if prepared:
            assert verifysets.prepare(cohort.pk) is not None
        else:
            factories.ready_sets(cohort)
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
    assert priorities[-1] == (jobs.SCORE_NEXT, (contest.hardware_class_id, 0), jobs.VERIFY_PRIORITY)

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
    # Correctness is no matter of noise: rejected on the first verification run.
    assert list(submission.runs.filter(purpose=Run.VERIFY).values_list("pk", flat=True)) == [
        verify.pk
    ]
    assert Run.objects.get(pk=verify.pk).verification_note.startswith("rejected (1 of 3): ")
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


def verifies(submission: Submission, wall_s: float | None, status_: str = Submission.PASSED) -> Run:
    """The next verification run of ``submission``, claimed and recorded."""
    run = claimed(submission)
    assert run.purpose == Run.VERIFY
    assert run_record_verification(
        run_id=run.pk,
        status=status_,
        reason="100 of 100 matched." if status_ == Submission.PASSED else "9 of 100 matched.",
        wall_time_ns=None if wall_s is None else round(wall_s * SECOND),
        matches=100,
        total=100,
    )
    run.refresh_from_db()
    return run


def test_a_timing_miss_is_measured_again_and_a_re_measure_within_the_tolerance_ranks(
    contest, alice, tmp_path, priorities, django_capture_on_commit_callbacks
):
    submission = queued(contest, alice, tmp_path)
    official = passes(submission, 1.0)
    with django_capture_on_commit_callbacks(execute=True):
        first = verifies(submission, 1.3)

    # Not rejected on one sample: a second verification run waits, at its priority.
    assert status(submission) == Submission.VERIFYING
    assert board(contest) == [] and mail.outbox == []
    pending = submission.runs.get(purpose=Run.VERIFY, status=Run.QUEUED)
    assert pending.try_number == first.try_number + 1
    assert priorities[-1] == (jobs.SCORE_NEXT, (contest.hardware_class_id, 0), jobs.VERIFY_PRIORITY)
    assert submission.events.last().note == (
        "re-measuring (2 of 3): the verification run took 1.300 s against the official "
        "1.000 s, more than 10% slower and more than 100 ms."
    )
    assert first.verification_note.startswith("timing miss (1 of 3), re-measuring: ")

    second = verifies(submission, 1.05)

    assert status(submission) == Submission.PASSED
    entry = LeaderboardEntry.objects.get(benchmark=contest)
    assert (entry.run_id, entry.wall_time_ns) == (official.pk, SECOND)  # the official time
    assert submission.events.last().note == (
        "verified: verification run 2 of 3 passed; the fastest took 1.050 s"
    )
    assert second.verification_note == (
        "confirmed (2 of 3): fastest 1.050 s, within 10% (at least 100 ms) of the official run"
    )
    # Verification charged nothing, however many runs it took.
    assert list(AttemptLedger.objects.filter(submission=submission).values_list("delta")) == [(1,)]


def test_three_timing_misses_reject_on_the_fastest_and_staff_see_every_run(
    contest, alice, reviewer, tmp_path, priorities, django_capture_on_commit_callbacks
):
    submission = queued(contest, alice, tmp_path)
    official = passes(submission, 1.0)
    with django_capture_on_commit_callbacks(execute=True):
        runs = [verifies(submission, wall) for wall in (1.3, 1.2, 1.25)]

    assert status(submission) == Submission.REJECTED_VERIFICATION
    assert submission.failure_reason == (
        "Verification failed: the fastest of 3 verification runs took 1.200 s against the "
        "official 1.000 s, more than 10% slower and more than 100 ms. The run stays off the "
        "leaderboard; the "
        "attempt counts."
    )
    assert board(contest) == []
    assert list(AttemptLedger.objects.filter(submission=submission).values_list("delta")) == [(1,)]
    assert not submission.runs.filter(status=Run.QUEUED).exists()
    assert [run.verification_note.split(":")[0] for run in runs] == [
        "timing miss (1 of 3), re-measuring",
        "timing miss (2 of 3), re-measuring",
        "rejected (3 of 3)",
    ]
    (message,) = [m for m in mail.outbox if m.to == ["reviewer@example.org"]]
    assert "the fastest of 3 verification runs took 1.200 s" in message.body
    for run in (official, *runs):
        assert f"/admin/submissions/run/{run.pk}/evidence/" in message.body
    for number, run in enumerate(runs, start=1):
        assert f"Verification run {number}: run {run.pk} (try {run.try_number})" in message.body


def test_a_correctness_failure_on_a_re_measure_rejects_at_once(
    contest, alice, tmp_path, priorities
):
    submission = queued(contest, alice, tmp_path)
    passes(submission, 1.0)
    verifies(submission, 1.3)
    verifies(submission, 1.0, Submission.FAILED)

    assert status(submission) == Submission.REJECTED_VERIFICATION
    assert "the verification run did not pass (failed: 9 of 100 matched)" in (
        submission.failure_reason
    )
    assert submission.runs.filter(purpose=Run.VERIFY).count() == 2


def noisy_class(hardware_class: str, percent: float) -> None:
    """An active host of ``hardware_class`` whose one good calibration spreads ± ``percent``."""
    host = ScoringHost.objects.create(
        name=f"host-{uuid.uuid4().hex[:6]}",
        hardware_class=hardware_class_row(hardware_class),
        status=ScoringHost.ACTIVE,
        registered_at=timezone.now(),
        last_heartbeat_at=timezone.now(),
        **FACTS,
    )
    spread = round(SECOND * percent / 100)
    HostCalibration.objects.create(
        host=host,
        hardware_class=hardware_class,
        trigger=HostCalibration.RUNS,
        started_at=timezone.now(),
        finished_at=timezone.now(),
        wall_ns=[SECOND - spread, SECOND, SECOND + spread],
        ok=True,
    )
    cache.delete(noise_band_cache_key(hardware_class))  # as a recorded calibration does


def test_a_noisy_class_widens_the_tolerance(contest, alice, bob, tmp_path, priorities):
    slow = queued(contest, bob, tmp_path)
    passes(slow, 1.0)
    verifies(slow, 1.14)
    assert status(slow) == Submission.VERIFYING  # 14% slower than 10%: measured again

    noisy_class(contest.hardware_class_id, 5.0)  # 3 x 5% = 15%
    submission = queued(contest, alice, tmp_path)
    passes(submission, 1.0)
    run = verifies(submission, 1.14)

    assert status(submission) == Submission.PASSED
    assert run.verification_note == (
        "confirmed (1 of 3): fastest 1.140 s, within 15% (at least 100 ms) of the official run"
    )


def test_a_re_measure_is_staged_as_a_fresh_permutation(alice, tmp_path, priorities):
    benchmark = factories.BenchmarkFactory(verify_top=20, verify_tolerance_pct=10)
    make_cohort(benchmark, CLASSES, jpeg=True)
    submission = queued(benchmark, alice, tmp_path)
    passes(submission, 1.0)
    first = claimed(submission, prepared=True)
    staged_first = staging.stage(first, verification=True)
    run_record_verification(
        run_id=first.pk, status=Submission.PASSED, reason="ok", wall_time_ns=2 * SECOND
    )
    second = claimed(submission, prepared=True)
    staged_second = staging.stage(second, verification=True)

    assert second.pk != first.pk and second.purpose == Run.VERIFY
    # 20 members: two equal shuffles have probability 1/20!, about 4e-19.
    assert staged_first.positions != staged_second.positions
    assert not set(staged_first.staged_names) & set(staged_second.staged_names)
    assert not set(staged_first.request_ids) & set(staged_second.request_ids)


def test_entrants_see_re_measuring_2_of_3_in_the_api_and_on_the_page(
    contest, alice, tmp_path, priorities, client
):
    submission = queued(contest, alice, tmp_path)
    passes(submission, 1.0)
    verifies(submission, 1.3)
    token = ApiToken.objects.create(user=alice, label="tests")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")

    block = api.get(f"/api/v1/submissions/{submission.pk}/").json()["verification"]
    client.force_login(alice)
    page = client.get(f"/submissions/{submission.pk}/").content.decode()

    assert block == {
        "status": "queued",
        "passed": None,
        "wall_time_ns": None,
        "matches": None,
        "total": None,
        "run": 2,
        "of": 3,
    }
    assert "re-measuring (2 of 3): queued" in page

    verifies(submission, 1.05)
    block = api.get(f"/api/v1/submissions/{submission.pk}/").json()["verification"]
    assert (block["status"], block["passed"], block["run"], block["of"]) == ("finished", True, 2, 3)
    assert block["wall_time_ns"] == round(1.05 * SECOND)


def run_rows(page: str) -> list[dict[str, str]]:
    """The cells of the admin's inline of runs, one dict per row (by column name)."""
    rows: list[dict[str, str]] = []
    for name, value in re.findall(r'<td class="field-(\w+)">\s*<p>(.*?)</p>', page, re.S):
        if name == "try_number":
            rows.append({})
        if rows:
            rows[-1][name] = html.unescape(value)
    return rows


def test_the_submission_admin_lists_every_verification_run(
    contest, alice, reviewer, tmp_path, priorities, client
):
    submission = queued(contest, alice, tmp_path)
    passes(submission, 1.0)
    for wall in (1.3, 1.2, 1.25):
        verifies(submission, wall)
    client.force_login(reviewer)

    page = client.get(f"/admin/submissions/submission/{submission.pk}/change/").content.decode()

    rows = [
        (
            row["try_number"],
            row["purpose"],
            row["verdict"],
            row["wall_time_ns"],
            row["verification_note"].split(":")[0],
        )
        for row in run_rows(page)
    ]
    assert rows == [
        ("1", "score", "passed", "1000000000", "-"),
        ("2", "verification", "passed", "1300000000", "timing miss (1 of 3), re-measuring"),
        ("3", "verification", "passed", "1200000000", "timing miss (2 of 3), re-measuring"),
        ("4", "verification", "passed", "1250000000", "rejected (3 of 3)"),
    ]


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
    assert priorities[-1] == (jobs.SCORE_NEXT, (contest.hardware_class_id, 0), jobs.VERIFY_PRIORITY)
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
    assert priorities[-1] == (
        jobs.SCORE_NEXT,
        (contest.hardware_class_id, 0),
        jobs.OFFICIAL_PRIORITY,
    )


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


def test_the_settings_set_the_runs_and_the_noise_factor(
    contest, alice, tmp_path, priorities, settings, client
):
    settings.PODIUM_VERIFY_MAX_RUNS = 1
    settings.PODIUM_VERIFY_NOISE_FACTOR = 4.0
    noisy_class(contest.hardware_class_id, 5.0)  # 4 x 5% = 20%
    submission = queued(contest, alice, tmp_path)
    passes(submission, 1.0)
    verifies(submission, 1.25)

    assert status(submission) == Submission.REJECTED_VERIFICATION
    assert submission.failure_reason.startswith(
        "Verification failed: the verification run took 1.250 s against the official 1.000 s, "
        "more than 20% slower and more than 100 ms (the tolerance: 4 x the class's noise band "
        "of 5%)."
    )
    page = " ".join(client.get(f"/b/{contest.slug}/").content.decode().split())
    assert "judged on the fastest of up to 1 verification runs" in page
    assert (
        "not measured yet: until it is, 4 times the hardware class's published noise band "
        "applies instead, when that is wider."
    ) in page


def test_cancelling_a_submission_that_waits_for_verification_withdraws_its_queued_run(
    contest, alice, reviewer, tmp_path, priorities
):
    """Nothing of a cancelled submission is left for a host to claim, and the reaper no
    longer counts its image as needed by a live run."""
    submission = queued(contest, alice, tmp_path)
    passes(submission, 1.0)
    assert status(submission) == Submission.VERIFYING
    assert submission.runs.filter(purpose=Run.VERIFY, status=Run.QUEUED).count() == 1

    staff.submission_cancel(submission=submission, actor=reviewer, reason="withdrawn")

    assert status(submission) == Submission.CANCELLED
    assert not submission.runs.filter(status=Run.QUEUED).exists()
    assert submission.runs.filter(purpose=Run.SCORE, status=Run.FINISHED).count() == 1
    assert waiting.next_waiting_id(hardware_class=contest.hardware_class_id) is None
