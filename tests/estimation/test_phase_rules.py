"""The pure rules of metered estimation: rows from whestbench's grade, the split into the
public and withheld halves, seed 004's ratio and its outliers, the board's order, the
final rerun's picks and the suites' seeds."""

from __future__ import annotations

import datetime as dt
import math

from hypothesis import given
from hypothesis import strategies as st

from portal.estimation import rules

T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _mlp(
    i: int, score: float, *, flops: int = 1000, residual: float = 0.01, **flags: object
) -> dict:
    entry = {
        "mlp_index": i,
        "mlp_name": f"mlp-{i}",
        "final_layer_mse": score,
        "adjusted_final_layer_score": score,
        "flops_used": flops,
        "residual_wall_time_s": residual,
        "wall_time_s": residual + 0.01,
        "effective_compute": float(flops),
        "budget_exhausted": False,
        "time_exhausted": False,
        "residual_wall_time_exhausted": False,
        "combined_budget_exhausted": False,
    }
    entry.update(flags)
    return entry


def test_rows_say_why_an_mlp_fell_back() -> None:
    grade = {
        "per_mlp": [
            _mlp(0, 0.1),
            _mlp(1, 0.5, budget_exhausted=True),
            _mlp(2, 0.5, residual_wall_time_exhausted=True),
            {**_mlp(3, 0.5), "error": "No module named 'numpy'", "error_code": "PREDICT_ERROR"},
        ]
    }
    rows = rules.mlp_rows(grade)
    assert [r.fallback for r in rows] == [False, True, True, True]
    assert rows[1].reason == "over the FLOP budget"
    assert rows[2].reason == "over the residual-time cap"
    assert "numpy" in rows[3].reason and rows[3].reason.startswith("PREDICT_ERROR")


def test_public_and_withheld_halves_are_scored_apart() -> None:
    rows = rules.mlp_rows({"per_mlp": [_mlp(i, float(i)) for i in range(6)]})
    split = rules.split_scores(rows, 4)
    assert split.public_score == (0 + 1 + 2 + 3) / 4
    assert split.withheld_score == (4 + 5) / 2
    assert split.fallbacks == 0


def test_a_non_finite_score_leaves_its_half_unscored() -> None:
    rows = rules.mlp_rows({"per_mlp": [_mlp(0, 1.0), _mlp(1, math.nan), _mlp(2, 1.0)]})
    split = rules.split_scores(rows, 2)
    assert split.public_score is None
    assert split.withheld_score == 1.0


def test_ratio_shows_compute_done_off_the_meter() -> None:
    lam = 1e11
    honest = rules.mlp_rows(
        {"per_mlp": [_mlp(i, 0.1, flops=10**9, residual=0.001) for i in range(3)]}
    )
    hidden = rules.mlp_rows(
        {"per_mlp": [_mlp(i, 0.1, flops=10**5, residual=0.3) for i in range(3)]}
    )
    honest_ratio = rules.compute_ratio(honest, lam)
    hidden_ratio = rules.compute_ratio(hidden, lam)
    assert honest_ratio is not None and honest_ratio > 0.9
    assert hidden_ratio is not None and hidden_ratio < 0.001
    assert rules.ratio_outliers({1: honest_ratio, 2: honest_ratio, 3: hidden_ratio}) == {3}
    assert rules.ratio_outliers({1: honest_ratio}) == set()


def test_each_owner_ranks_once_lower_score_first_earlier_breaks_ties() -> None:
    c = rules.Candidate
    ranked = rules.best_per_owner(
        [
            c(1, "team:1", 0.5, T0),
            c(2, "team:1", 0.2, T0 + dt.timedelta(hours=1)),
            c(3, "user:9", 0.2, T0),
            c(4, "user:8", math.nan, T0),
        ]
    )
    assert [x.entry_id for x in ranked] == [3, 2]


def test_final_picks_take_nominations_else_the_best() -> None:
    c = rules.Candidate
    entries = [
        c(1, "team:1", 0.1, T0),
        c(2, "team:1", 0.2, T0),
        c(3, "team:1", 0.3, T0),
        c(4, "user:5", 0.4, T0),
        c(5, "user:5", 0.5, T0),
        c(6, "user:5", 0.6, T0),
    ]
    picks = rules.final_picks(entries, nominated={3}, per_owner=2)
    assert sorted(p.entry_id for p in picks) == [3, 4, 5]


@given(st.text(min_size=1, max_size=40), st.integers(min_value=1, max_value=50))
def test_seeds_are_keyed_repeatable_and_apart_by_role(seed: str, n: int) -> None:
    phase = rules.derive_seeds(seed, "phase", n)
    assert phase == rules.derive_seeds(seed, "phase", n)
    assert all(0 <= s < 2**63 for s in phase)
    assert not set(phase) & set(rules.derive_seeds(seed, "final", n))
    assert rules.derive_seeds(seed + "x", "phase", n) != phase


def test_monte_carlo_band_falls_with_the_budget() -> None:
    variances = [0.01, 0.02, 0.04]
    small = rules.monte_carlo_band(variances, 10**6, 16, 2)
    large = rules.monte_carlo_band(variances, 10**8, 16, 2)
    assert small is not None and large is not None
    assert large[1] < small[1]
    assert small[0] <= small[1] <= small[2]
    assert rules.monte_carlo_band(variances, 10, 16, 2) is None
