"""The stored leaderboard always equals a from-scratch computation over every run.

The board is each entrant's best passing official run (fastest wall time; an exact tie
goes to the earlier upload, then the lower submission id), without disqualified or
cancelled submissions. It is written in the same transaction as each verdict,
disqualification and cancellation, so it never disagrees with the runs, whatever the
order of events.
"""

from __future__ import annotations

import datetime as dt
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from portal.contests.models import Benchmark, Cohort, LeaderboardEntry
from portal.contests.selectors import leaderboard_rows
from portal.core import errors
from portal.submissions import leaderboard as contest_services
from portal.submissions import staff
from portal.submissions.builds import submission_build_finished
from portal.submissions.intake import submission_accept
from portal.submissions.models import Run, Submission
from portal.submissions.runs import (
    run_claim,
    run_mark_running,
    run_record_infra_failure,
    run_record_verdict,
)
from portal.submissions.services import submission_transition
from tests import factories
from tests.submissions.test_concurrent_charging import source_archive

ENTRANTS = ("alice", "bob", "carol")
BASE = dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC)
LEASE_S = 600

# A few values only, so that exact ties of wall time and of acceptance time are common.
WALL_TIMES = st.sampled_from([1_000, 1_000, 1_000, 2_000, 1_000_000_000])
ACCEPTED_AT = st.sampled_from([2, 1, 0, 0]).map(
    lambda minutes: BASE + dt.timedelta(minutes=minutes)
)
OUTCOMES = st.sampled_from(
    ["passed", "passed", "passed", "passed_without_time", "failed", "errored", "infra"]
)
INDEX = st.integers(min_value=0, max_value=50)

SUBMIT = st.tuples(
    st.just("submit"),
    st.sampled_from(ENTRANTS),
    st.sampled_from([Submission.OFFICIAL, Submission.OFFICIAL, Submission.PRACTICE]),
    ACCEPTED_AT,
)
PASSING_UPLOAD = st.tuples(st.just("pass"), st.sampled_from(ENTRANTS), ACCEPTED_AT, WALL_TIMES)
VERDICT = st.tuples(st.just("verdict"), INDEX, OUTCOMES, WALL_TIMES)
STEP = st.one_of(
    SUBMIT,
    SUBMIT,
    VERDICT,
    VERDICT,
    VERDICT,
    st.tuples(st.just("start"), INDEX),
    st.tuples(st.just("disqualify"), INDEX),
    st.tuples(st.just("cancel"), INDEX),
)


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# The reference: written from the rules, sharing no code with portal.contests ---------


def board_from_scratch(benchmark: Benchmark) -> list[tuple[Any, ...]]:
    """Every entrant's best passing official run, fastest first, from all the runs."""
    best: dict[int, tuple[Any, ...]] = {}
    for run in Run.objects.filter(submission__benchmark=benchmark).select_related("submission"):
        submission = run.submission
        eligible = (
            submission.kind == Submission.OFFICIAL
            and submission.disqualified_at is None
            and submission.status != Submission.CANCELLED
            and run.status == Run.FINISHED
            and run.verdict == Submission.PASSED
            and run.passed is True
            and run.wall_time_ns is not None
        )
        if not eligible:
            continue
        key = (run.wall_time_ns, submission.submitted_at, submission.pk, run.pk)
        row = (*key, submission.entrant_id, run.matches, run.total)
        held = best.get(submission.entrant_id)
        if held is None or key < held[:4]:
            best[submission.entrant_id] = row
    return [
        (entrant_id, submission_id, run_id, wall_time_ns, submitted_at, matches, total)
        for wall_time_ns, submitted_at, submission_id, run_id, entrant_id, matches, total in sorted(
            best.values()
        )
    ]


def stored_board(benchmark: Benchmark) -> list[tuple[Any, ...]]:
    """The stored rows in the order the public board shows them (ranks 1, 2, ...)."""
    entries = {
        entry.submission_id: entry for entry in LeaderboardEntry.objects.filter(benchmark=benchmark)
    }
    rows = leaderboard_rows(benchmark)
    assert [row.rank for row in rows] == list(range(1, len(rows) + 1))
    assert len(rows) == len(entries)
    board = []
    for row in rows:
        entry = entries[row.submission_id]
        assert row.entrant == entry.entrant.get_username()
        board.append(
            (
                entry.entrant_id,
                entry.submission_id,
                entry.run_id,
                entry.wall_time_ns,
                entry.submitted_at,
                entry.matches,
                entry.total,
            )
        )
    return board


def assert_board_is_right(benchmark: Benchmark) -> None:
    assert stored_board(benchmark) == board_from_scratch(benchmark)


# Driving the real services ------------------------------------------------------------


class Contest:
    """One benchmark, three entrants, and the real services driving their submissions."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.benchmark = factories.BenchmarkFactory(
            opens_at=BASE - dt.timedelta(days=1),
            closes_at=BASE + dt.timedelta(days=20),
            attempts_per_day=1000,
            practice_per_day=1000,
        )
        Cohort.objects.create(benchmark=self.benchmark, kind=Cohort.OFFICIAL)
        Cohort.objects.create(benchmark=self.benchmark, kind=Cohort.PRACTICE)
        self.staff = factories.UserFactory(username="staff", is_staff=True)
        self.users = {name: factories.UserFactory(username=name) for name in ENTRANTS}
        self.environments = {
            name: factories.EnvironmentFactory(owner=user, benchmark=self.benchmark)
            for name, user in self.users.items()
        }
        self.archive = tmp_path / "source.tar.gz"
        self.archive.write_bytes(source_archive())
        self.submissions: list[int] = []

    def submit(self, who: str, kind: str, at: dt.datetime) -> Submission:
        """Accepted (charged), built, queued for its score."""
        submission = submission_accept(
            entrant=self.users[who],
            benchmark=self.benchmark,
            environment=self.environments[who],
            source_file=self.archive,
            source_name="source.tar.gz",
            kind=kind,
            now=at,
        )
        submission_transition(submission.pk, frm=[Submission.ACCEPTED], to=Submission.BUILDING)
        assert submission_build_finished(
            submission_id=submission.pk, ok=True, image_tag=f"podium-entrant/sub-{submission.pk}:t"
        )
        self.submissions.append(submission.pk)
        return submission

    def pick(self, index: int) -> Submission | None:
        if not self.submissions:
            return None
        return Submission.objects.get(pk=self.submissions[index % len(self.submissions)])

    def start(self, submission: Submission) -> Run | None:
        """queued -> staging -> running (a new run); None when it is not queued."""
        run = run_claim(submission.pk, lease_s=LEASE_S)
        if run is None:
            return None
        assert run_mark_running(run_id=run.pk, lease_s=LEASE_S)
        return run

    def settle(self, submission: Submission, outcome: str, wall_time_ns: int) -> None:
        """Record ``outcome`` for the submission's running run (starting one if queued)."""
        run = submission.runs.filter(status=Run.RUNNING).first() or self.start(submission)
        if run is None:
            return
        if outcome == "infra":
            run_record_infra_failure(run_id=run.pk, reason="platform error: test")
            return
        status, fields = {
            "passed": (Submission.PASSED, {"wall_time_ns": wall_time_ns, "matches": 9_950}),
            "passed_without_time": (Submission.PASSED, {"matches": 10_000}),
            "failed": (Submission.FAILED, {"wall_time_ns": wall_time_ns, "matches": 12}),
            "errored": (Submission.ERRORED, {"wall_time_ns": wall_time_ns}),
        }[outcome]
        run_record_verdict(run_id=run.pk, status=status, reason=outcome, total=10_000, **fields)

    def apply(self, step: tuple[Any, ...]) -> None:
        action = step[0]
        if action == "submit":
            _action, who, kind, at = step
            self.submit(who, kind, at)
            return
        if action == "pass":
            _action, who, at, wall_time_ns = step
            self.settle(self.submit(who, Submission.OFFICIAL, at), "passed", wall_time_ns)
            return
        submission = self.pick(step[1])
        if submission is None:
            return
        try:
            if action == "start":
                self.start(submission)
            elif action == "verdict":
                self.settle(submission, step[2], step[3])
            elif action == "disqualify":
                staff.submission_disqualify(
                    submission=submission, actor=self.staff, reason="hard-coded answers"
                )
            elif action == "cancel":
                staff.submission_cancel(submission=submission, actor=self.staff, reason="r")
        except errors.InvalidParameter:
            pass  # refused (already disqualified, already final, ...): changes nothing


@contextmanager
def rolled_back(tmp_path: Path) -> Iterator[Path]:
    """One hypothesis example: its own folder, and every row it wrote undone afterwards
    (ids may then repeat in the next example, so each gets a fresh data folder)."""
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    with override_settings(PODIUM_DATA_DIR=folder / "data"), transaction.atomic():
        yield folder
        transaction.set_rollback(True)


@hypothesis_settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    first=st.lists(st.one_of(PASSING_UPLOAD, PASSING_UPLOAD, SUBMIT), min_size=2, max_size=8),
    steps=st.lists(STEP, min_size=5, max_size=40),
)
def test_the_stored_board_equals_a_from_scratch_computation_after_every_step(
    db: Any, tmp_path: Path, first: list[tuple[Any, ...]], steps: list[tuple[Any, ...]]
) -> None:
    with rolled_back(tmp_path) as folder:
        contest = Contest(folder)
        most_rows = 0
        for step in [*first, *steps]:
            contest.apply(step)
            assert_board_is_right(contest.benchmark)
            most_rows = max(most_rows, LeaderboardEntry.objects.count())
        event(f"most rows on the board: {most_rows}")  # --hypothesis-show-statistics


# The same properties, as examples a reader recognises ---------------------------------


@pytest.fixture
def contest(db: Any, tmp_path: Path) -> Contest:
    return Contest(tmp_path)


def board(contest: Contest) -> list[tuple[str, int, int]]:
    assert_board_is_right(contest.benchmark)
    return [
        (row.entrant, row.submission_id, row.wall_time_ns)
        for row in leaderboard_rows(contest.benchmark)
    ]


def passed(contest: Contest, who: str, wall_time_ns: int, at: dt.datetime = BASE) -> Submission:
    submission = contest.submit(who, Submission.OFFICIAL, at)
    contest.settle(submission, "passed", wall_time_ns)
    return submission


def test_a_disqualified_entrants_next_best_run_takes_its_place(contest: Contest) -> None:
    best = passed(contest, "alice", 1_000)
    second = passed(contest, "alice", 2_000)
    third = passed(contest, "alice", 3_000)
    rival = passed(contest, "bob", 1_500)
    assert board(contest) == [("alice", best.pk, 1_000), ("bob", rival.pk, 1_500)]

    staff.submission_disqualify(submission=best, actor=contest.staff, reason="copied model")

    assert board(contest) == [("bob", rival.pk, 1_500), ("alice", second.pk, 2_000)]
    best.refresh_from_db()
    assert best.disqualified_by == contest.staff
    assert best.disqualification_reason == "copied model"
    assert best.disqualified_at is not None

    staff.submission_disqualify(submission=second, actor=contest.staff, reason="same model")

    assert board(contest) == [("bob", rival.pk, 1_500), ("alice", third.pk, 3_000)]


def test_a_run_without_a_score_never_ranks(contest: Contest) -> None:
    scored = passed(contest, "bob", 5_000_000)
    no_time = contest.submit("alice", Submission.OFFICIAL, BASE)
    contest.settle(no_time, "passed_without_time", 0)
    crashed = contest.submit("carol", Submission.OFFICIAL, BASE)
    contest.settle(crashed, "errored", 1)
    below_gate = contest.submit("carol", Submission.OFFICIAL, BASE)
    contest.settle(below_gate, "failed", 1)
    still_running = contest.submit("carol", Submission.OFFICIAL, BASE)
    contest.start(still_running)
    platform_fault = contest.submit("alice", Submission.OFFICIAL, BASE)
    contest.settle(platform_fault, "infra", 1)

    assert board(contest) == [("bob", scored.pk, 5_000_000)]


def test_the_board_keeps_the_best_run_when_later_ones_are_slower_or_fail(
    contest: Contest,
) -> None:
    best = passed(contest, "alice", 1_000)
    passed(contest, "alice", 9_000)
    failing = contest.submit("alice", Submission.OFFICIAL, BASE)
    contest.settle(failing, "failed", 1)
    crashing = contest.submit("alice", Submission.OFFICIAL, BASE)
    contest.settle(crashing, "errored", 1)

    assert board(contest) == [("alice", best.pk, 1_000)]


def test_a_rescore_keeps_the_best_run_whatever_the_new_run_measures(contest: Contest) -> None:
    best = passed(contest, "alice", 1_000)
    staff.submission_rescore(submission=best, actor=contest.staff)
    contest.settle(Submission.objects.get(pk=best.pk), "errored", 1)

    assert board(contest) == [("alice", best.pk, 1_000)]
    assert Submission.objects.get(pk=best.pk).runs.count() == 2


def test_an_exact_tie_goes_to_the_earlier_upload_then_the_lower_id(contest: Contest) -> None:
    later = passed(contest, "alice", 7_000, at=BASE + dt.timedelta(microseconds=1))
    earlier = passed(contest, "bob", 7_000, at=BASE)
    same_time_low_id = passed(contest, "carol", 9_000, at=BASE)
    same_time_high_id = passed(contest, "carol", 9_000, at=BASE)

    rows = board(contest)

    assert rows == [
        ("bob", earlier.pk, 7_000),
        ("alice", later.pk, 7_000),
        ("carol", same_time_low_id.pk, 9_000),
    ]
    assert same_time_high_id.pk > same_time_low_id.pk


def test_an_entrants_own_exact_tie_keeps_the_earlier_upload(contest: Contest) -> None:
    """Ids follow creation, not acceptance time: the earlier upload wins, not the lower id."""
    accepted_later = passed(contest, "alice", 5_000, at=BASE + dt.timedelta(minutes=1))
    accepted_earlier = passed(contest, "alice", 5_000, at=BASE)

    assert accepted_earlier.pk > accepted_later.pk
    assert board(contest) == [("alice", accepted_earlier.pk, 5_000)]


def test_practice_runs_never_reach_the_board(contest: Contest) -> None:
    practice = contest.submit("alice", Submission.PRACTICE, BASE)
    contest.settle(practice, "passed", 1)

    assert Submission.objects.get(pk=practice.pk).status == Submission.PASSED
    assert board(contest) == []


def test_cancelling_a_rescore_takes_the_refunded_submission_off_the_board(
    contest: Contest,
) -> None:
    """A cancelled submission is refunded; its earlier passing run leaves the board with it."""
    first = passed(contest, "alice", 1_000)
    second = passed(contest, "alice", 2_000)
    staff.submission_rescore(submission=first, actor=contest.staff)

    staff.submission_cancel(submission=first, actor=contest.staff, reason="bad host")

    assert board(contest) == [("alice", second.pk, 2_000)]


# Concurrency: a verdict and a disqualification of the same entrant at once -------------


@pytest.mark.django_db(transaction=True)
def test_a_verdict_and_a_disqualification_at_the_same_time_leave_the_right_board(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdict computes alice's best (her old run) and is held there while staff
    disqualify that old run in another transaction; the board must end with her new run."""
    contest = Contest(tmp_path)
    old = passed(contest, "alice", 1_000)
    new = contest.submit("alice", Submission.OFFICIAL, BASE)
    new_run = contest.start(new)
    assert new_run is not None

    computed, go_on = threading.Event(), threading.Event()
    real_candidates = contest_services.leaderboard_candidates

    def held_candidates(*args: Any, **kwargs: Any) -> Any:
        found = real_candidates(*args, **kwargs)
        if threading.current_thread().name == "verdict":
            computed.set()
            go_on.wait(timeout=10)
        return found

    monkeypatch.setattr(contest_services, "leaderboard_candidates", held_candidates)
    failures: list[BaseException] = []

    def in_thread(work: Any) -> Any:
        def target() -> None:
            try:
                work()
            except BaseException as exc:  # reported by the main thread
                failures.append(exc)
            finally:
                connection.close()

        return target

    verdict = threading.Thread(
        name="verdict",
        target=in_thread(
            lambda: run_record_verdict(
                run_id=new_run.pk,
                status=Submission.PASSED,
                reason="ok",
                wall_time_ns=2_000,
                matches=9_950,
                total=10_000,
            )
        ),
    )
    disqualify = threading.Thread(
        name="disqualify",
        target=in_thread(
            lambda: staff.submission_disqualify(
                submission=old, actor=contest.staff, reason="copied model"
            )
        ),
    )
    verdict.start()
    assert computed.wait(timeout=10)
    disqualify.start()
    disqualify.join(timeout=1.5)  # it must wait for the verdict's transaction, not overtake it
    go_on.set()
    verdict.join(timeout=30)
    disqualify.join(timeout=30)

    assert not failures, failures
    assert board(contest) == [("alice", new.pk, 2_000)]
