"""The contest rules, checked at every boundary (pure: no database)."""

from __future__ import annotations

import datetime as dt
import math
import random
from fractions import Fraction
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.contests import rules
from portal.contests.rules import (
    Candidate,
    attempt_day,
    best_per_entrant,
    day_bounds,
    next_attempt_at,
    next_reset,
    pass_threshold,
    passes,
    purge_allowed_from,
    rank_key,
    remaining_attempts,
    window_state,
)

UTC = dt.UTC
SEOUL = "Asia/Seoul"
NEW_YORK = "America/New_York"
KST = dt.timezone(dt.timedelta(hours=9))
US = dt.timedelta(microseconds=1)

OPENS_AT = dt.datetime(2026, 8, 10, 0, 0, tzinfo=KST)
CLOSES_AT = dt.datetime(2026, 8, 31, 18, 0, tzinfo=KST)

ZONES = st.sampled_from(["Asia/Seoul", "America/New_York", "UTC", "Europe/London"])
AWARE_INSTANTS = st.datetimes(
    min_value=dt.datetime(2020, 1, 1),  # noqa: DTZ001 - hypothesis bounds are naive
    max_value=dt.datetime(2035, 12, 31),  # noqa: DTZ001
    timezones=st.just(UTC),
)


# The upload window ------------------------------------------------------------------


def test_window_opens_inclusive_and_closes_exclusive() -> None:
    assert window_state(OPENS_AT - US, OPENS_AT, CLOSES_AT) == "upcoming"
    assert window_state(OPENS_AT, OPENS_AT, CLOSES_AT) == "open"
    assert window_state(OPENS_AT + US, OPENS_AT, CLOSES_AT) == "open"
    assert window_state(CLOSES_AT - US, OPENS_AT, CLOSES_AT) == "open"
    assert window_state(CLOSES_AT, OPENS_AT, CLOSES_AT) == "closed"
    assert window_state(CLOSES_AT + US, OPENS_AT, CLOSES_AT) == "closed"


def test_window_compares_instants_across_zones() -> None:
    # 2026-08-09 15:00 UTC is the opening instant written in another zone.
    assert window_state(dt.datetime(2026, 8, 9, 15, 0, tzinfo=UTC), OPENS_AT, CLOSES_AT) == "open"
    just_before = dt.datetime(2026, 8, 9, 14, 59, 59, 999999, tzinfo=UTC)
    assert window_state(just_before, OPENS_AT, CLOSES_AT) == "upcoming"


@pytest.mark.parametrize("naive", ["now", "opens_at", "closes_at"])
def test_window_refuses_naive_datetimes(naive: str) -> None:
    values = {"now": OPENS_AT, "opens_at": OPENS_AT, "closes_at": CLOSES_AT}
    values[naive] = values[naive].replace(tzinfo=None)
    with pytest.raises(ValueError, match=naive):
        window_state(values["now"], values["opens_at"], values["closes_at"])


@settings(max_examples=200)
@given(
    opens_at=AWARE_INSTANTS,
    length=st.timedeltas(min_value=US, max_value=dt.timedelta(days=60)),
    offset=st.timedeltas(min_value=-dt.timedelta(days=90), max_value=dt.timedelta(days=90)),
)
def test_window_state_matches_the_interval(
    opens_at: dt.datetime, length: dt.timedelta, offset: dt.timedelta
) -> None:
    closes_at = opens_at + length
    for now in (
        opens_at - US,
        opens_at,
        opens_at + US,
        closes_at - US,
        closes_at,
        opens_at + offset,
    ):
        expected = "upcoming" if now < opens_at else "open" if now < closes_at else "closed"
        assert window_state(now, opens_at, closes_at) == expected


# The attempt day ----------------------------------------------------------------------


def test_seoul_day_turns_at_fifteen_utc() -> None:
    last_moment = dt.datetime(2026, 8, 10, 14, 59, 59, 999999, tzinfo=UTC)
    assert attempt_day(last_moment, SEOUL) == dt.date(2026, 8, 10)
    assert attempt_day(last_moment + US, SEOUL) == dt.date(2026, 8, 11)


def test_seoul_day_bounds_are_fifteen_to_fifteen_utc() -> None:
    start, end = day_bounds(dt.date(2026, 8, 11), SEOUL)
    assert start == dt.datetime(2026, 8, 10, 15, 0, tzinfo=UTC)
    assert end == dt.datetime(2026, 8, 11, 15, 0, tzinfo=UTC)
    assert start.tzinfo is UTC and end.tzinfo is UTC


def test_attempt_day_refuses_naive() -> None:
    with pytest.raises(ValueError):
        attempt_day(dt.datetime(2026, 8, 10, 12, 0), SEOUL)  # noqa: DTZ001 - naive on purpose


@pytest.mark.parametrize(
    ("day", "hours"),
    [
        (dt.date(2026, 3, 7), 24),
        (dt.date(2026, 3, 8), 23),  # clocks spring forward
        (dt.date(2026, 3, 9), 24),
        (dt.date(2026, 10, 31), 24),
        (dt.date(2026, 11, 1), 25),  # clocks fall back
        (dt.date(2026, 11, 2), 24),
    ],
)
def test_new_york_days_last_23_or_25_hours_across_dst(day: dt.date, hours: int) -> None:
    start, end = day_bounds(day, NEW_YORK)
    assert end - start == dt.timedelta(hours=hours)
    zone = ZoneInfo(NEW_YORK)
    assert start.astimezone(zone).replace(tzinfo=None) == dt.datetime.combine(day, dt.time())
    assert attempt_day(start, NEW_YORK) == day
    assert attempt_day(end - US, NEW_YORK) == day
    assert attempt_day(end, NEW_YORK) == day + dt.timedelta(days=1)


@settings(max_examples=150)
@given(now=AWARE_INSTANTS, tz_name=ZONES)
def test_now_lies_within_the_bounds_of_its_day(now: dt.datetime, tz_name: str) -> None:
    day = attempt_day(now, tz_name)
    start, end = day_bounds(day, tz_name)
    assert start <= now < end
    assert attempt_day(start, tz_name) == day
    assert attempt_day(start - US, tz_name) == day - dt.timedelta(days=1)
    assert attempt_day(end - US, tz_name) == day
    assert dt.timedelta(hours=23) <= end - start <= dt.timedelta(hours=25)


@settings(max_examples=150)
@given(day=st.dates(min_value=dt.date(2020, 1, 1), max_value=dt.date(2035, 12, 31)), tz_name=ZONES)
def test_consecutive_days_tile_the_timeline(day: dt.date, tz_name: str) -> None:
    _, end = day_bounds(day, tz_name)
    next_start, _ = day_bounds(day + dt.timedelta(days=1), tz_name)
    assert end == next_start


# The quota --------------------------------------------------------------------------


@settings(max_examples=150)
@given(now=AWARE_INSTANTS, tz_name=ZONES)
def test_next_reset_is_the_next_local_midnight(now: dt.datetime, tz_name: str) -> None:
    reset = next_reset(now, tz_name)
    assert reset > now
    assert reset.tzinfo is UTC
    local = reset.astimezone(ZoneInfo(tz_name))
    assert local.time() == dt.time(0, 0)
    assert local.date() == attempt_day(now, tz_name) + dt.timedelta(days=1)
    assert reset - now <= dt.timedelta(hours=25)


def test_next_reset_in_seoul_at_the_turn_of_the_day() -> None:
    last_moment = dt.datetime(2026, 8, 10, 14, 59, 59, 999999, tzinfo=UTC)
    assert next_reset(last_moment, SEOUL) == dt.datetime(2026, 8, 10, 15, 0, tzinfo=UTC)
    turn = last_moment + US
    assert next_reset(turn, SEOUL) == dt.datetime(2026, 8, 11, 15, 0, tzinfo=UTC)


def test_remaining_attempts_counts_charges_net_of_refunds() -> None:
    assert remaining_attempts(2, 0) == 2
    assert remaining_attempts(2, 1) == 1
    assert remaining_attempts(2, 2) == 0
    # Two charged, both refunded (platform faults), one more charged: one left.
    assert remaining_attempts(2, 2 - 2 + 1) == 1


@settings(max_examples=200)
@given(
    per_day=st.integers(min_value=0, max_value=20),
    charges=st.integers(min_value=0, max_value=50),
    refunds=st.integers(min_value=0, max_value=50),
)
def test_remaining_is_never_negative_and_each_refund_gives_one_back(
    per_day: int, charges: int, refunds: int
) -> None:
    remaining = remaining_attempts(per_day, charges - refunds)
    assert remaining == max(0, per_day - (charges - refunds))
    if refunds > 0:  # one refund more never gives less, and gives one more while any is used
        more = remaining_attempts(per_day, charges - refunds - 1)
        assert more == remaining + 1 or (remaining == 0 and more == 0)
    # Refunds of earlier days' attempts booked today: one more each, above the allowance.
    assert remaining_attempts(per_day, -refunds) == per_day + refunds


def test_remaining_refuses_a_negative_allowance() -> None:
    with pytest.raises(ValueError):
        remaining_attempts(-1, 0)


def test_next_attempt_is_now_while_one_remains_else_the_reset() -> None:
    now = dt.datetime(2026, 8, 12, 3, 0, tzinfo=UTC)  # 12:00 KST
    assert next_attempt_at(now, SEOUL, 2, 1) == now
    assert next_attempt_at(now, SEOUL, 2, 2) == dt.datetime(2026, 8, 12, 15, 0, tzinfo=UTC)
    assert next_attempt_at(now, SEOUL, 2, 5 - 4) == now  # many refunds


@settings(max_examples=100)
@given(
    now=AWARE_INSTANTS,
    tz_name=ZONES,
    per_day=st.integers(min_value=0, max_value=5),
    net=st.integers(min_value=-5, max_value=10),
)
def test_next_attempt_at_is_never_in_the_past(
    now: dt.datetime, tz_name: str, per_day: int, net: int
) -> None:
    at = next_attempt_at(now, tz_name, per_day, net)
    if remaining_attempts(per_day, net) > 0:
        assert at == now
    else:
        assert at == next_reset(now, tz_name) > now


# The pass gate ------------------------------------------------------------------------


def test_pass_threshold_on_the_official_and_practice_cohorts() -> None:
    assert pass_threshold(10_000, 9_900, 10_000) == 9_900
    assert pass_threshold(1_000, 9_900, 10_000) == 990
    assert pass_threshold(1, 9_900, 10_000) == 1  # rounded up, never down
    assert pass_threshold(0, 9_900, 10_000) == 0
    assert pass_threshold(1_001, 9_900, 10_000) == 991  # 990.99 rounds up


def test_passes_at_the_gate() -> None:
    assert passes(9_900, 10_000, 9_900, 10_000)
    assert not passes(9_899, 10_000, 9_900, 10_000)
    assert passes(990, 1_000, 9_900, 10_000)
    assert not passes(989, 1_000, 9_900, 10_000)


@pytest.mark.parametrize(
    ("total", "pass_min", "cohort"), [(-1, 1, 1), (1, -1, 1), (1, 2, 1), (1, 1, 0)]
)
def test_pass_threshold_refuses_nonsense(total: int, pass_min: int, cohort: int) -> None:
    with pytest.raises(ValueError):
        pass_threshold(total, pass_min, cohort)


@settings(max_examples=300)
@given(
    cohort_size=st.integers(min_value=1, max_value=10**9),
    data=st.data(),
)
def test_pass_threshold_is_the_exact_ceiling_of_the_ratio(
    cohort_size: int, data: st.DataObject
) -> None:
    pass_min = data.draw(st.integers(min_value=0, max_value=cohort_size))
    total = data.draw(st.integers(min_value=0, max_value=10**9))
    needed = pass_threshold(total, pass_min, cohort_size)
    # needed is the least integer k with k / total >= pass_min / cohort_size.
    assert needed * cohort_size >= total * pass_min
    assert (needed - 1) * cohort_size < total * pass_min or needed == 0
    assert 0 <= needed <= total
    assert pass_threshold(cohort_size, pass_min, cohort_size) == pass_min
    assert needed == math.ceil(Fraction(total * pass_min, cohort_size))


# The ranking ------------------------------------------------------------------------


def candidate(
    entrant: int, run: int, wall_ns: int, *, submission: int | None = None, minute: int = 0
) -> Candidate:
    return Candidate(
        entrant_id=entrant,
        run_id=run,
        submission_id=submission if submission is not None else run,
        wall_time_ns=wall_ns,
        submitted_at=dt.datetime(2026, 8, 12, 3, minute, tzinfo=UTC),
    )


def test_each_entrant_keeps_only_the_fastest_run() -> None:
    alice_slow = candidate(1, 10, 5_000_000_000)
    alice_fast = candidate(1, 11, 4_000_000_000)
    bob = candidate(2, 20, 4_500_000_000)
    board = best_per_entrant([alice_slow, bob, alice_fast])
    assert board == [alice_fast, bob]


def test_exact_tie_goes_to_the_earlier_submission_then_the_lower_id() -> None:
    alice_later = candidate(1, 10, 4_000_000_000, minute=5)
    bob_earlier = candidate(2, 20, 4_000_000_000, minute=1)
    assert best_per_entrant([alice_later, bob_earlier]) == [bob_earlier, alice_later]
    charlie_same_time_higher_id = candidate(3, 31, 4_000_000_000, submission=31, minute=1)
    dave_same_time_lower_id = candidate(4, 30, 4_000_000_000, submission=30, minute=1)
    assert best_per_entrant([charlie_same_time_higher_id, dave_same_time_lower_id]) == [
        dave_same_time_lower_id,
        charlie_same_time_higher_id,
    ]


def test_an_entrants_tie_between_two_runs_keeps_the_earlier_submission() -> None:
    first = candidate(1, 10, 4_000_000_000, minute=1)
    second = candidate(1, 11, 4_000_000_000, minute=2)
    assert best_per_entrant([second, first]) == [first]


def test_rank_key_orders_by_time_then_acceptance_then_ids() -> None:
    c = candidate(1, 7, 123, submission=5, minute=3)
    assert rank_key(c) == (123, c.submitted_at, 5, 7)


CANDIDATES = st.lists(
    st.builds(
        Candidate,
        entrant_id=st.integers(min_value=1, max_value=6),
        run_id=st.integers(min_value=1, max_value=10_000),
        submission_id=st.integers(min_value=1, max_value=10_000),
        wall_time_ns=st.integers(min_value=1, max_value=5),  # small: many exact ties
        submitted_at=st.sampled_from(
            [dt.datetime(2026, 8, 12, 3, m, tzinfo=UTC) for m in range(3)]
        ),
    ),
    max_size=30,
    unique_by=lambda c: c.run_id,
)


@settings(max_examples=200)
@given(candidates=CANDIDATES, seed=st.integers())
def test_best_per_entrant_equals_brute_force_and_ignores_input_order(
    candidates: list[Candidate], seed: int
) -> None:
    board = best_per_entrant(candidates)

    expected = []
    for entrant in {c.entrant_id for c in candidates}:
        runs = sorted((c for c in candidates if c.entrant_id == entrant), key=rank_key)
        expected.append(runs[0])
    expected.sort(key=rank_key)
    assert board == expected

    shuffled = list(candidates)
    random.Random(seed).shuffle(shuffled)
    assert best_per_entrant(shuffled) == board
    assert best_per_entrant(reversed(candidates)) == board
    assert len({c.entrant_id for c in board}) == len(board)


# Artifact retention -------------------------------------------------------------------


def test_purging_is_allowed_from_the_close_plus_the_retention_days_in_utc() -> None:
    allowed = purge_allowed_from(CLOSES_AT, 90)
    assert allowed == dt.datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    assert allowed.tzinfo is UTC
    assert purge_allowed_from(CLOSES_AT, 0) == CLOSES_AT


def test_retention_days_are_24_hours_even_across_a_clock_change() -> None:
    closes_at = dt.datetime(2026, 3, 7, 12, 0, tzinfo=ZoneInfo(NEW_YORK))
    allowed = purge_allowed_from(closes_at, 2)
    assert allowed - closes_at == dt.timedelta(hours=48)


def test_purge_allowed_from_refuses_naive_times_and_negative_days() -> None:
    with pytest.raises(ValueError, match="closes_at must be a timezone-aware datetime"):
        purge_allowed_from(dt.datetime(2026, 8, 31, 9, 0), 90)  # noqa: DTZ001 - on purpose
    with pytest.raises(ValueError, match="retention_days must not be negative, got -1"):
        purge_allowed_from(CLOSES_AT, -1)


@pytest.mark.parametrize(
    ("members", "pool", "canaries"),
    [
        (10_000, 50_000, 5_000),
        (100, 50, 50),
        (101, 1_000, 51),
        (100, 20, 20),
        (100, 0, 0),
        (1, 9, 1),
    ],
)
def test_half_of_a_verification_is_canaries_as_far_as_the_pool_goes(members, pool, canaries):
    assert rules.CANARY_SHARE_PCT == 50
    assert rules.canary_count(members, pool) == canaries


def test_a_pool_must_hold_half_a_run_rounded_up_and_counts_are_never_negative():
    assert [rules.canaries_wanted(n) for n in (0, 1, 3, 10_000)] == [0, 1, 2, 5_000]
    assert rules.canary_count(3, 1 << 62) == rules.canaries_wanted(3)
    with pytest.raises(ValueError):
        rules.canaries_wanted(-1)
    with pytest.raises(ValueError):
        rules.canary_count(10, -1)


def test_the_canary_share_makes_a_table_that_runs_its_model_only_on_canaries_miss_the_timing():
    """Hostile: a table at 0.2 ms an image plus a 5 ms model on the images it does not
    know. Its official run is all table; its verification pays the model on every canary,
    and the timing rule rejects it even on the fastest cohort, where the slack matters."""
    for members in (100, 1_000, 10_000):
        canaries = rules.canary_count(members, members)
        official_ns = members * 200_000
        verification_ns = (members - canaries) * 200_000 + canaries * 5_000_000
        verdict = rules.verification_decision(
            official_ns=official_ns,
            status="passed",
            reason="",
            walls_ns=[verification_ns] * 3,
            tolerance_pct=10,
            noise_band_pct=None,
            noise_factor=3.0,
            max_runs=3,
            slack_ns=100_000_000,
        )
        assert verdict.action == rules.REJECT, members


def test_a_final_run_far_faster_than_its_official_run_has_a_problem():
    problem = rules.final_run_problem(
        official_ns=2_000_000_000,
        final_ns=500_000_000,
        tolerance_pct=10,
        noise_band_pct=2.0,
        noise_factor=3.0,
        slack_ns=100_000_000,
    )
    assert problem == (
        "the final run took 0.500 s against the official 2.000 s: the official run was more"
        " than 10% (at least 100 ms) slower than it"
    )


@pytest.mark.parametrize(
    ("official_ns", "final_ns"),
    [
        (2_000_000_000, 1_830_000_000),  # 9.3% faster: within 10%
        (2_000_000_000, 1_700_000_000),  # 17.6%: within 3 x the 6% band
        (300_000_000, 210_000_000),  # 43% but 90 ms: within the slack
        (2_000_000_000, 9_000_000_000),  # slower: it ranks with its slower time
    ],
)
def test_an_honest_final_run_has_none(official_ns, final_ns):
    problem = rules.final_run_problem(
        official_ns=official_ns,
        final_ns=final_ns,
        tolerance_pct=10,
        noise_band_pct=6.0,
        noise_factor=3.0,
        slack_ns=100_000_000,
    )
    assert problem == ""
