"""Fair dispatch: the rule (pure, against a brute force), the claim query that must pick
what the rule picks, skipping what another host holds, and when a submission started
waiting (``queued_at``)."""

from __future__ import annotations

import ast
import contextlib
import datetime as dt
import functools
import importlib
import importlib.util
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import time_machine
from django.apps import apps as django_apps
from django.db import connection, transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.contests.hardware import hardware_class_row
from portal.contests.models import Benchmark, Cohort
from portal.submissions import dispatch, waiting
from portal.submissions import staff as staff_actions
from portal.submissions.builds import submission_build_finished
from portal.submissions.dispatch import Tier, Waiting
from portal.submissions.models import Run, Submission, SubmissionEvent
from portal.submissions.runs import (
    run_claim,
    run_mark_running,
    run_record_infra_failure,
    submission_wait_for_machine,
)
from portal.submissions.services import submission_transition
from tests import factories

T0 = dt.datetime(2026, 8, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
MICROSECOND = dt.timedelta(microseconds=1)
LEASE_S = 600

# The rule, pure ------------------------------------------------------------------------


def precedes(first: Waiting, second: Waiting, counts: dict[int, int]) -> bool:
    """The rule as written, one step at a time: whether ``first`` is claimed before
    ``second``."""
    if first.tier != second.tier:
        return first.tier < second.tier  # official, then verification, then practice
    first_started = counts.get(first.entrant_id, 0)
    second_started = counts.get(second.entrant_id, 0)
    if first_started != second_started:
        return first_started < second_started  # fewer runs started in the last 24 h
    if first.since != second.since:
        return first.since < second.since  # waiting longer
    return first.submission_id < second.submission_id


def brute_next(waiting: list[Waiting], counts: dict[int, int]) -> Waiting | None:
    """The one waiting submission that precedes every other."""
    firsts = [
        one
        for one in waiting
        if all(precedes(one, other, counts) for other in waiting if other is not one)
    ]
    assert len(firsts) <= 1
    return firsts[0] if firsts else None


def brute_order(waiting: list[Waiting], counts: dict[int, int]) -> list[Waiting]:
    """Take the first, then the first of the rest, and so on (what hosts do, one claim
    after another)."""
    rest = list(waiting)
    order = []
    while rest:
        first = brute_next(rest, counts)
        assert first is not None
        order.append(first)
        rest.remove(first)
    return order


def waiting_lists(*, entrants: int, most: int) -> st.SearchStrategy[list[Waiting]]:
    # A few distinct times, so that ties on "waiting since" are common.
    since = st.sampled_from([T0 + k * HOUR for k in range(4)]) | st.builds(
        lambda seconds: T0 + dt.timedelta(seconds=seconds), st.integers(-30 * 86400, 30 * 86400)
    )
    one = st.builds(
        Waiting,
        submission_id=st.integers(1, 10_000),
        entrant_id=st.integers(1, entrants),
        tier=st.sampled_from(list(Tier)),
        since=since,
    )
    return st.lists(one, max_size=most, unique_by=lambda item: item.submission_id)


def counts_for(*, entrants: int) -> st.SearchStrategy[dict[int, int]]:
    return st.dictionaries(st.integers(1, entrants), st.integers(0, 4))


@given(waiting=waiting_lists(entrants=4, most=30), counts=counts_for(entrants=4))
def test_the_claim_is_the_one_that_precedes_every_other(waiting, counts):
    found = dispatch.next_waiting(waiting, counts)
    assert found == brute_next(waiting, counts)


@settings(max_examples=50)
@given(waiting=waiting_lists(entrants=500, most=120), counts=counts_for(entrants=500))
def test_the_fair_order_is_claim_after_claim_with_many_entrants(waiting, counts):
    assert dispatch.fair_order(waiting, counts) == brute_order(waiting, counts)
    by_rule = sorted(
        waiting, key=functools.cmp_to_key(lambda a, b: -1 if precedes(a, b, counts) else 1)
    )
    assert dispatch.fair_order(waiting, counts) == by_rule


@given(
    starts=st.lists(
        st.tuples(
            st.integers(1, 5),
            st.none()
            | st.sampled_from([T0 - 24 * HOUR, T0 - 24 * HOUR - MICROSECOND, T0, T0 + HOUR])
            | st.builds(
                lambda microseconds: T0 - dt.timedelta(microseconds=microseconds),
                st.integers(-2 * 86400 * 10**6, 2 * 86400 * 10**6),
            ),
        )
    )
)
def test_runs_started_count_from_exactly_24_hours_before(starts):
    counts = dispatch.started_counts(starts, now=T0)
    for entrant in range(1, 6):
        expected = sum(
            1
            for who, started_at in starts
            if who == entrant and started_at is not None and T0 - started_at <= dt.timedelta(days=1)
        )
        assert counts.get(entrant, 0) == expected


def test_one_entrants_queue_never_starves_anothers_first():
    alice, bob = 1, 2
    alices = [Waiting(n, alice, Tier.OFFICIAL, T0 + n * MICROSECOND) for n in range(1, 11)]
    bobs_first = Waiting(99, bob, Tier.OFFICIAL, T0 + HOUR)  # queued last
    counts = dispatch.started_counts([(alice, T0 - HOUR)], now=T0 + HOUR)

    assert dispatch.next_waiting([*alices, bobs_first], counts) == bobs_first
    # A practice run never goes ahead of an official one, however fresh its entrant.
    charlies_practice = Waiting(100, 3, Tier.PRACTICE, T0 - HOUR)
    verification = Waiting(101, alice, Tier.VERIFICATION, T0 - HOUR)
    order = dispatch.fair_order([charlies_practice, verification, *alices, bobs_first], counts)
    assert order[0] == bobs_first
    assert order[-2:] == [verification, charlies_practice]


def test_the_rule_needs_no_django():
    """Module level imports only the standard library (Django is imported by the query
    functions, inside them; the models only for type checking)."""
    source = importlib.util.find_spec("portal.submissions.dispatch").origin
    tree = ast.parse(Path(source).read_text(encoding="utf-8"))
    imported = [
        alias.name if isinstance(node, ast.Import) else node.module
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else node.names[:1])
    ]
    assert "datetime" in imported
    assert not [name for name in imported if name and name.split(".")[0] in ("django", "portal")]


# The claim query ------------------------------------------------------------------------


@pytest.fixture
def contest(benchmark) -> Benchmark:
    """An open benchmark with its official and practice cohorts (claims need them)."""
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.PRACTICE)
    return benchmark


class Population:
    """Rows made straight in the states the claim reads, for one benchmark."""

    def __init__(self, benchmark: Benchmark) -> None:
        self.benchmark = benchmark
        self.cohorts = {c.kind: c for c in Cohort.objects.filter(benchmark=benchmark)}
        self.environments: dict[int, Any] = {}

    def submission(
        self,
        entrant,
        *,
        status: str = Submission.QUEUED,
        kind: str = Submission.OFFICIAL,
        queued_at: dt.datetime | None = T0,
        submitted_at: dt.datetime = T0 - 2 * HOUR,
    ) -> Submission:
        if entrant.pk not in self.environments:
            self.environments[entrant.pk] = factories.EnvironmentFactory(
                owner=entrant, benchmark=self.benchmark
            )
        return Submission.objects.create(
            entrant=entrant,
            benchmark=self.benchmark,
            environment=self.environments[entrant.pk],
            kind=kind,
            status=status,
            submitted_at=submitted_at,
            queued_at=queued_at,
            source_name="source.tar",
            source_format="tar",
            source_sha256="0" * 64,
            source_bytes=1,
            image_digest="sha256:" + "1" * 64,
        )

    def run(
        self,
        submission: Submission,
        *,
        started_at: dt.datetime | None,
        status: str = Run.FINISHED,
        purpose: str = Run.SCORE,
    ) -> Run:
        kind = Cohort.PRACTICE if submission.kind == Submission.PRACTICE else Cohort.OFFICIAL
        return Run.objects.create(
            submission=submission,
            cohort=self.cohorts[kind],
            try_number=submission.runs.count() + 1,
            purpose=purpose,
            status=status,
            started_at=started_at,
        )

    def history(self, entrant, *started: dt.datetime) -> None:
        """Finished runs of ``entrant`` started at these times."""
        for started_at in started:
            done = self.submission(entrant, status=Submission.PASSED, queued_at=None)
            self.run(done, started_at=started_at)

    def verifying(
        self, entrant, *, queued_at: dt.datetime | None, run_status: str = Run.QUEUED
    ) -> Submission:
        """A passed official run with its verification run (queued: it waits)."""
        verifying = self.submission(entrant, status=Submission.VERIFYING, queued_at=queued_at)
        self.run(verifying, started_at=T0 - 3 * HOUR)
        started = T0 - 10 * dt.timedelta(minutes=1) if run_status != Run.QUEUED else None
        self.run(verifying, started_at=started, status=run_status, purpose=Run.VERIFY)
        if run_status == Run.QUEUED:  # its prepared verification set, ready to be taken
            factories.ready_sets(self.cohorts[Cohort.OFFICIAL])
        return verifying


def rule_order(now: dt.datetime, benchmark: Benchmark | None = None) -> list[int]:
    """The waiting submissions' ids in the order the pure rule gives, read from plain rows."""
    counts = dispatch.started_counts(
        Run.objects.values_list("submission__entrant_id", "started_at"), now=now
    )
    rows = []
    submissions = Submission.objects.all()
    if benchmark is not None:
        submissions = submissions.filter(benchmark=benchmark)
    for submission in submissions:
        verification_queued = submission.runs.filter(purpose=Run.VERIFY, status=Run.QUEUED).exists()
        if submission.status == Submission.QUEUED:
            tier = dispatch.tier_of(
                practice=submission.kind == Submission.PRACTICE, verification=False
            )
        elif submission.status == Submission.VERIFYING and verification_queued:
            tier = Tier.VERIFICATION
        else:
            continue
        since = submission.queued_at or submission.submitted_at
        rows.append(Waiting(submission.pk, submission.entrant_id, tier, since))
    return [item.submission_id for item in dispatch.fair_order(rows, counts)]


def claim(now: dt.datetime, **kwargs: Any) -> Submission | None:
    """One host's claim, as a scoring host makes it: lock the next, claim it, commit."""
    with transaction.atomic():
        submission = waiting.lock_next_waiting(now=now, **kwargs)
        if submission is not None:
            assert run_claim(submission.pk, lease_s=LEASE_S) is not None
        return submission


def seed(population: Population, rng: random.Random, entrants: list[Any], now: dt.datetime) -> None:
    """A random mix: every tier, ties on time and count, runs on both sides of 24 h."""
    times = [now - HOUR, now - HOUR, now - 2 * HOUR, now - 30 * HOUR]
    edges = [
        now - 24 * HOUR,  # counts: exactly 24 h
        now - 24 * HOUR + MICROSECOND,
        now - 24 * HOUR - MICROSECOND,  # does not count
        now - 3 * HOUR,
        now - 47 * HOUR,
        now + dt.timedelta(seconds=1),  # a host whose clock runs ahead: counts
    ]
    for _ in range(60):
        entrant = rng.choice(entrants)
        since = rng.choice([*times, None])
        shape = rng.choice(
            [
                "official",
                "official",
                "practice",
                "verifying",
                "busy",
                "history",
                "history",
                "staging",
            ]
        )
        if shape == "official" or shape == "practice":
            kind = Submission.PRACTICE if shape == "practice" else Submission.OFFICIAL
            population.submission(
                entrant, kind=kind, queued_at=since, submitted_at=rng.choice(times)
            )
        elif shape == "verifying":
            population.verifying(entrant, queued_at=since)
        elif shape == "busy":  # its verification is under way: not waiting, but it counts
            population.verifying(entrant, queued_at=since, run_status=Run.RUNNING)
        elif shape == "history":
            population.history(entrant, *rng.sample(edges, rng.randint(1, 3)))
        else:  # being scored right now: it counts
            staging = population.submission(entrant, status=Submission.STAGING, queued_at=None)
            population.run(staging, started_at=now - dt.timedelta(minutes=2), status=Run.STAGING)


@pytest.mark.parametrize("seed_value", [1, 2, 3])
def test_the_query_claims_in_the_order_of_the_rule(contest, seed_value):
    rng = random.Random(seed_value)
    entrants = [factories.UserFactory() for _ in range(7)]
    population = Population(contest)
    now = T0
    seed(population, rng, entrants, now)
    expected = rule_order(now)
    assert len(expected) > 10

    assert waiting.waiting_in_fair_order(now=now) == expected
    assert waiting.waiting_in_fair_order(now=now, limit=5) == expected[:5]

    # Claim after claim: each claim starts a run, so its entrant drops back.
    claimed = []
    while expected_next := rule_order(now):
        assert waiting.next_waiting_id(now=now) == expected_next[0]
        submission = claim(now)
        assert submission is not None and submission.pk == expected_next[0]
        claimed.append(submission.pk)
    assert waiting.next_waiting_id(now=now) is None
    assert claim(now) is None
    assert len(claimed) == len(expected)
    assert set(claimed) == set(expected)


def test_a_fresh_entrant_goes_first_and_24_hours_is_the_edge(contest, alice, bob):
    population = Population(contest)
    now = T0
    population.history(alice, now - 24 * HOUR)  # exactly 24 h ago: counts
    population.history(bob, now - 24 * HOUR - MICROSECOND)  # just before: does not
    alices = population.submission(alice, queued_at=now - 2 * HOUR)
    bobs = population.submission(bob, queued_at=now - HOUR)

    assert waiting.next_waiting_id(now=now) == bobs.pk
    # A microsecond later, alice's run has left the window too: the older one goes first.
    assert waiting.next_waiting_id(now=now + MICROSECOND) == alices.pk


def test_official_before_verification_before_practice_whatever_the_counts(contest, alice, bob):
    population = Population(contest)
    population.history(alice, *[T0 - HOUR] * 5)
    practice = population.submission(bob, kind=Submission.PRACTICE, queued_at=T0 - 5 * HOUR)
    verifying = population.verifying(bob, queued_at=T0 - 4 * HOUR)
    official = population.submission(alice, queued_at=T0)

    assert waiting.waiting_in_fair_order(now=T0) == [
        official.pk,
        verifying.pk,
        practice.pk,
    ]


def test_a_waiting_row_without_queued_at_counts_from_its_submission(contest, alice, bob):
    population = Population(contest)
    older = population.submission(alice, queued_at=None, submitted_at=T0 - 3 * HOUR)
    newer = population.submission(bob, queued_at=T0 - 2 * HOUR, submitted_at=T0 - 9 * HOUR)
    assert waiting.waiting_in_fair_order(now=T0) == [older.pk, newer.pk]


def test_nothing_waiting_claims_nothing(contest, alice):
    population = Population(contest)
    population.verifying(alice, queued_at=T0, run_status=Run.RUNNING)
    population.submission(alice, status=Submission.PASSED)
    assert waiting.next_waiting_id(now=T0) is None
    with transaction.atomic():
        assert waiting.lock_next_waiting(now=T0) is None


def has_hardware_class() -> bool:
    return any(field.name == "hardware_class" for field in Benchmark._meta.get_fields())


def test_a_host_claims_only_its_hardware_class(contest, alice, bob):
    if not has_hardware_class():
        pytest.skip("Benchmark.hardware_class is not there yet")
    gpu = factories.BenchmarkFactory(slug="gpu-bench", hardware_class="gpu-h200")
    Benchmark.objects.filter(pk=contest.pk).update(hardware_class=hardware_class_row("cpu-x86_64"))
    Cohort.objects.create(benchmark=gpu, kind=Cohort.OFFICIAL)
    cpu_first = Population(contest).submission(alice, queued_at=T0 - HOUR)
    gpu_later = Population(gpu).submission(bob, queued_at=T0)

    assert waiting.next_waiting_id(now=T0) == cpu_first.pk
    assert waiting.next_waiting_id(hardware_class="gpu-h200", now=T0) == gpu_later.pk
    assert waiting.next_waiting_id(hardware_class="cpu-x86_64", now=T0) == cpu_first.pk
    assert waiting.next_waiting_id(hardware_class="cpu-aarch64", now=T0) is None
    assert claim(T0, hardware_class="gpu-h200") == gpu_later


def needs_postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip(
            "SKIP LOCKED needs PostgreSQL: on SQLite select_for_update is a no-op and "
            "IMMEDIATE transactions let one claim run at a time"
        )


@contextlib.contextmanager
def another_host(lock: Callable[[], list[int]]) -> Iterator[list[int]]:
    """Another host's transaction, on its own connection, holding what ``lock`` locked
    (ids) until the block ends."""
    holding, release = threading.Event(), threading.Event()
    held: list[int] = []
    failed: list[BaseException] = []

    def hold() -> None:
        try:
            with transaction.atomic():
                held.extend(lock())
                holding.set()
                release.wait(timeout=30)
        except BaseException as exc:  # reported by the main thread
            failed.append(exc)
            holding.set()
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(timeout=30)
        assert not failed, failed
        yield held
    finally:
        release.set()
        thread.join(timeout=30)
    assert not failed, failed


@pytest.mark.django_db(transaction=True)
def test_a_submission_locked_by_another_host_is_skipped(alice, bob, benchmark):
    needs_postgresql()
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    population = Population(benchmark)
    first = population.submission(alice, queued_at=T0 - HOUR)
    second = population.submission(bob, queued_at=T0)

    def lock_next() -> list[int]:
        locked = waiting.lock_next_waiting(now=T0)
        return [locked.pk] if locked else []

    with another_host(lock_next) as held:
        assert held == [first.pk]
        with transaction.atomic():
            mine = waiting.lock_next_waiting(now=T0)
            assert mine is not None and mine.pk == second.pk
            # A read that locks nothing still names the first: the lock hides nothing else.
            assert waiting.next_waiting_id(now=T0) == first.pk
    # The other host let go without claiming: the first is next again.
    with transaction.atomic():
        again = waiting.lock_next_waiting(now=T0)
        assert again is not None and again.pk == first.pk


@pytest.mark.django_db(transaction=True)
def test_a_host_looks_further_when_the_first_candidates_are_all_held(
    alice, bob, benchmark, monkeypatch
):
    needs_postgresql()
    monkeypatch.setattr(waiting, "_CANDIDATES", 2)
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    population = Population(benchmark)
    queued = [population.submission(alice, queued_at=T0 + k * MICROSECOND) for k in range(5)]
    ids = [submission.pk for submission in queued]

    def lock(some: list[int]) -> Callable[[], list[int]]:
        def run() -> list[int]:
            return [row.pk for row in Submission.objects.select_for_update().filter(pk__in=some)]

        return run

    with another_host(lock(ids[:3])), transaction.atomic():
        mine = waiting.lock_next_waiting(now=T0)
        assert mine is not None and mine.pk == ids[3]
    with another_host(lock(ids)), transaction.atomic():
        assert waiting.lock_next_waiting(now=T0) is None


# When it started queued -----------------------------------------------------------------


def test_queued_at_is_stamped_on_entering_a_wait_and_kept_across_machine_waits(
    contest, alice, staff, sent
):
    population = Population(contest)
    submission = population.submission(alice, status=Submission.BUILDING, queued_at=None)

    def queued_at() -> dt.datetime | None:
        submission.refresh_from_db()
        return submission.queued_at

    def state() -> tuple[str, dt.datetime | None]:
        submission.refresh_from_db()
        return submission.status, submission.queued_at

    with time_machine.travel(T0, tick=False):
        assert submission_build_finished(submission_id=submission.pk, ok=True, image_tag="t")
    assert queued_at() == T0
    with time_machine.travel(T0 + HOUR, tick=False):
        assert submission_wait_for_machine(
            submission_id=submission.pk, reason="CPU busy", retry_in_s=30, waits=1
        )
    assert queued_at() == T0
    assert submission.events.last().note.startswith("waiting for the scoring machine")
    with time_machine.travel(T0 + 2 * HOUR, tick=False):  # its message lost: same place
        staff_actions.submission_requeue(submission=submission, actor=staff, reason="lost")
    assert state() == (Submission.QUEUED, T0)

    with time_machine.travel(T0 + 3 * HOUR, tick=False):
        run = run_claim(submission.pk, lease_s=LEASE_S)
        assert run is not None and run_mark_running(run_id=run.pk, lease_s=LEASE_S)
    assert queued_at() == T0  # kept as history while it runs
    with time_machine.travel(T0 + 4 * HOUR, tick=False):  # a platform fault: back in line
        assert run_record_infra_failure(run_id=run.pk, reason="engine gone")
    assert state() == (Submission.QUEUED, T0 + 4 * HOUR)

    with time_machine.travel(T0 + 5 * HOUR, tick=False):
        run = run_claim(submission.pk, lease_s=LEASE_S)
        assert run is not None
        assert submission_transition(
            submission.pk, frm=[Submission.STAGING], to=Submission.VERIFYING
        )
    assert state() == (Submission.VERIFYING, T0 + 5 * HOUR)
    with time_machine.travel(T0 + 6 * HOUR, tick=False):
        assert submission_wait_for_machine(
            submission_id=submission.pk, reason="busy", retry_in_s=30, waits=1
        )
    assert queued_at() == T0 + 5 * HOUR


def test_the_migration_stamps_waiting_rows_from_when_they_entered_their_status(contest, alice):
    population = Population(contest)

    def with_events(status: str, *events: tuple[str, dt.datetime, str]) -> Submission:
        submission = population.submission(alice, status=status, queued_at=None)
        for event_status, at, note in events:
            SubmissionEvent.objects.create(
                submission=submission, status=event_status, at=at, note=note
            )
        return submission

    queued = with_events(
        Submission.QUEUED,
        (Submission.ACCEPTED, T0, ""),
        (Submission.QUEUED, T0 + HOUR, ""),
        (Submission.STAGING, T0 + 2 * HOUR, ""),
        (Submission.QUEUED, T0 + 3 * HOUR, "platform failure, requeued"),
        (Submission.QUEUED, T0 + 4 * HOUR, "waiting for the scoring machine: busy"),
    )
    verifying = with_events(
        Submission.VERIFYING,
        (Submission.RUNNING, T0, ""),
        (Submission.VERIFYING, T0 + HOUR, "passed; verifying"),
        (Submission.VERIFYING, T0 + 2 * HOUR, "platform failure during verification, requeued"),
    )
    silent = with_events(Submission.QUEUED)
    finished = with_events(Submission.PASSED, (Submission.QUEUED, T0, ""))

    migration = importlib.import_module("portal.submissions.migrations.0007_submission_queued_at")
    migration.stamp_waiting(django_apps, SimpleNamespace(connection=connection))

    stamped = dict(Submission.objects.values_list("id", "queued_at"))
    assert stamped[queued.pk] == T0 + 3 * HOUR
    assert stamped[verifying.pk] == T0 + HOUR
    assert stamped[silent.pk] is None
    assert stamped[finished.pk] is None
