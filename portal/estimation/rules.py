"""The pure rules of metered estimation (docs/rules.md, "Metered estimation"): per-MLP
rows from a grade, the public and withheld scores, seed 004's compute ratio and its
outliers, the board's order, the suites' seeds and the published final standings' CSV.
No Django.

A grade is whestbench's own result (``evaluate_estimator``'s dict); everything here reads
it and decides nothing that whestbench decides (the per-MLP score and the fallback).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from portal.standings.rules import sha256_of, table_csv

# The flags whestbench sets on an MLP that got the zero-prediction fallback, and the words
# Podium shows for each (an exception's own code comes from ``error_code``).
_FLAG_REASONS = (
    ("budget_exhausted", "over the FLOP budget"),
    ("time_exhausted", "over the wall-clock cap"),
    ("residual_wall_time_exhausted", "over the residual-time cap"),
    ("combined_budget_exhausted", "over the budget with residual time priced in"),
)
# A graded entry whose ratio (FLOPs over effective compute, residual time valued at
# lambda) is under this fraction of the board's median ratio is flagged on the board.
OUTLIER_FRACTION = 0.1
SEED_MAX = 2**63


@dataclass(frozen=True)
class MlpRow:
    """One MLP of a grade, as the submission page shows it."""

    index: int
    name: str
    final_layer_mse: float
    score: float
    flops_used: int
    residual_wall_time_s: float
    wall_time_s: float
    effective_compute: float
    fallback: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON can hold it: a non-finite MSE or score (whestbench gave none) is
        ``None``, since PostgreSQL's ``jsonb`` refuses ``NaN``."""
        return {
            "index": self.index,
            "name": self.name,
            "final_layer_mse": _finite(self.final_layer_mse),
            "score": _finite(self.score),
            "flops_used": self.flops_used,
            "residual_wall_time_s": self.residual_wall_time_s,
            "wall_time_s": self.wall_time_s,
            "effective_compute": self.effective_compute,
            "fallback": self.fallback,
            "reason": self.reason,
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _fallback_reason(entry: Mapping[str, Any]) -> str:
    for flag, words in _FLAG_REASONS:
        if entry.get(flag):
            return words
    if "error" in entry or entry.get("error_code"):
        code = str(entry.get("error_code") or "error")
        message = entry.get("error")
        if isinstance(message, Mapping):
            message = message.get("message")
        text = f"{code}: {message}" if message else code
        return text[:300]
    return ""


def mlp_rows(grade: Mapping[str, Any]) -> list[MlpRow]:
    """The grade's per-MLP entries (whestbench's ``per_mlp``) as rows, in suite order."""
    rows: list[MlpRow] = []
    for entry in grade.get("per_mlp") or []:
        reason = _fallback_reason(entry)
        rows.append(
            MlpRow(
                index=int(entry.get("mlp_index", len(rows))),
                name=str(entry.get("mlp_name") or ""),
                final_layer_mse=float(entry.get("final_layer_mse", math.nan)),
                score=float(entry.get("adjusted_final_layer_score", math.nan)),
                flops_used=int(entry.get("flops_used") or 0),
                residual_wall_time_s=float(entry.get("residual_wall_time_s") or 0.0),
                wall_time_s=float(entry.get("wall_time_s") or 0.0),
                effective_compute=float(entry.get("effective_compute") or 0.0),
                fallback=bool(reason),
                reason=reason,
            )
        )
    return rows


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class Split:
    """A phase grade's two halves: the public MLPs (the live board) and the withheld."""

    public_score: float | None
    withheld_score: float | None
    public_mse: float | None
    fallbacks: int


def split_scores(rows: Sequence[MlpRow], public_mlps: int) -> Split:
    """The mean score of the first ``public_mlps`` rows and of the rest (lower is better);
    an MLP with a non-finite score makes its half's score missing."""
    public = rows[:public_mlps]
    withheld = rows[public_mlps:]

    def mean_score(part: Sequence[MlpRow]) -> float | None:
        scores = [r.score for r in part]
        if any(not math.isfinite(s) for s in scores):
            return None
        return _mean(scores)

    return Split(
        public_score=mean_score(public),
        withheld_score=mean_score(withheld),
        public_mse=_mean([r.final_layer_mse for r in public]),
        fallbacks=sum(1 for r in rows if r.fallback),
    )


def suite_score(rows: Sequence[MlpRow]) -> float | None:
    """The mean score over every MLP (the final suite's score)."""
    return split_scores(rows, len(rows)).public_score


def compute_ratio(rows: Iterable[MlpRow], lambda_flops_per_second: float) -> float | None:
    """Seed 004's ratio: metered FLOPs over effective compute, with residual time valued at
    ``lambda`` even under the capped rule, so that work done off the meter shows. 1.0 when
    every charged operation went through flopscope; near 0 when the compute went elsewhere.
    None when the entry spent nothing at all (or every MLP fell back)."""
    flops = 0.0
    effective = 0.0
    for row in rows:
        if row.fallback:
            continue
        flops += row.flops_used
        effective += row.flops_used + lambda_flops_per_second * row.residual_wall_time_s
    if effective <= 0:
        return None
    return flops / effective


@dataclass(frozen=True)
class Figures:
    """A run of rows summed up as a submission page shows it: the mean score (missing
    when an MLP has none) and MSE, the mean FLOPs and effective compute, seed 004's ratio
    and the fallback count."""

    score: float | None
    mse: float | None
    mean_flops: float | None
    mean_effective_compute: float | None
    ratio: float | None
    fallbacks: int


def grade_figures(rows: Sequence[MlpRow], lambda_flops_per_second: float) -> Figures:
    """The figures of ``rows`` (see :class:`Figures`)."""
    split = split_scores(rows, len(rows))
    return Figures(
        score=split.public_score,
        mse=split.public_mse,
        mean_flops=_mean([r.flops_used for r in rows]),
        mean_effective_compute=_mean([r.effective_compute for r in rows]),
        ratio=compute_ratio(rows, lambda_flops_per_second),
        fallbacks=split.fallbacks,
    )


def ratio_outliers(ratios: Mapping[int, float | None]) -> set[int]:
    """The keys whose ratio is under :data:`OUTLIER_FRACTION` of the median ratio."""
    known = [r for r in ratios.values() if r is not None]
    if len(known) < 2:
        return set()
    floor = OUTLIER_FRACTION * statistics.median(known)
    return {key for key, ratio in ratios.items() if ratio is not None and ratio < floor}


@dataclass(frozen=True)
class Candidate:
    """A graded entry on the board: whose it is (team, else entrant), its score, when."""

    entry_id: int
    owner: str  # "team:<id>" or "user:<id>"
    score: float
    submitted_at: dt.datetime


def rank_key(c: Candidate) -> tuple[float, dt.datetime, int]:
    """Lower score first; the earlier submission breaks a tie, then the lower id."""
    return (c.score, c.submitted_at, c.entry_id)


def best_per_owner(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Each team's (or solo entrant's) best entry, ranked by :func:`rank_key`."""
    best: dict[str, Candidate] = {}
    for c in candidates:
        if not math.isfinite(c.score):
            continue
        held = best.get(c.owner)
        if held is None or rank_key(c) < rank_key(held):
            best[c.owner] = c
    return sorted(best.values(), key=rank_key)


def owner_key(team_id: int | None, entrant_id: int) -> str:
    return f"team:{team_id}" if team_id is not None else f"user:{entrant_id}"


def final_picks(
    ranked: Sequence[Candidate], nominated: set[int], per_owner: int
) -> list[Candidate]:
    """Seed 001's rerun set: each owner's nominated entries (at most ``per_owner``), or,
    with none nominated, their ``per_owner`` best. ``ranked`` is every graded entry of
    every owner, best first."""
    by_owner: dict[str, list[Candidate]] = {}
    for c in sorted(ranked, key=rank_key):
        by_owner.setdefault(c.owner, []).append(c)
    picks: list[Candidate] = []
    for entries in by_owner.values():
        chosen = [c for c in entries if c.entry_id in nominated][:per_owner]
        picks.extend(chosen or entries[:per_owner])
    return sorted(picks, key=rank_key)


def seed_digest(private_seed: str) -> str:
    return hashlib.sha256(private_seed.encode()).hexdigest()


def derive_seeds(private_seed: str, role: str, n: int) -> list[int]:
    """``n`` distinct per-MLP seeds for the suite of ``role`` ("phase", "final",
    "public"), each below 2**63 (whestbench's int63): HMAC-SHA256 keyed by
    ``private_seed`` over the role and a counter. The same inputs give the same seeds (and
    a longer suite keeps a shorter one's first seeds); another role or private seed gives
    unrelated ones, and none reveals the private seed."""
    if not private_seed:
        raise ValueError("the private seed must not be empty")
    if not role or "\n" in role:
        raise ValueError("the role must be a non-empty single line")
    if n < 0:
        raise ValueError("n must not be negative")
    key = private_seed.encode()
    seeds: list[int] = []
    seen: set[int] = set()
    counter = 0
    while len(seeds) < n:
        message = f"podium.whest-suite\n{role}\n{counter}".encode()
        value = int.from_bytes(hmac.new(key, message, hashlib.sha256).digest()[:8], "big")
        value %= SEED_MAX
        counter += 1
        if value not in seen:
            seen.add(value)
            seeds.append(value)
    return seeds


def seeds_digest(seeds: Sequence[int]) -> str:
    return hashlib.sha256(",".join(str(s) for s in seeds).encode()).hexdigest()


def monte_carlo_band(
    avg_variances: Sequence[float], flop_budget: int, width: int, depth: int
) -> tuple[float, float, float] | None:
    """The Monte Carlo convergence band at the phase's budget: the final-layer MSE that
    plain sampling reaches spending the whole budget, as (10th percentile, median, 90th
    percentile) over the suite's MLPs. One sample costs a forward pass, about
    ``2 * width**2 * depth`` FLOPs; a mean of ``k`` samples has squared error about the
    neuron's variance over ``k`` (whestbench records each MLP's mean final-layer
    variance). None without variances or when the budget buys no sample."""
    per_sample = 2 * width * width * depth
    samples = flop_budget // per_sample if per_sample else 0
    values = sorted(v / samples for v in avg_variances if samples and math.isfinite(v))
    if not values:
        return None

    def pct(q: float) -> float:
        return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]

    return (pct(0.1), pct(0.5), pct(0.9))


# The columns of a phase's published final standings (the canonical CSV; its SHA-256 is
# their digest, as for timed benchmarks' standings).
STANDINGS_COLUMNS = ("rank", "team", "entrant", "entry_id", "score")


@dataclass(frozen=True)
class StandingScore:
    """One row of a phase's final standings: ``team`` empty for an entrant on their own;
    ``score`` the entry's final score (lower is better)."""

    rank: int
    team: str
    entrant: str
    entry_id: int
    score: float


def standings_csv(rows: Iterable[StandingScore]) -> str:
    """The rows as the canonical CSV (:data:`STANDINGS_COLUMNS`; the score as Python's
    shortest round-trip form, ``repr``), through the timed standings' writer."""
    return table_csv(
        STANDINGS_COLUMNS,
        ([str(r.rank), r.team, r.entrant, str(r.entry_id), repr(r.score)] for r in rows),
    )


def standings_digest(rows: Iterable[StandingScore]) -> str:
    """``sha256:<hex>`` of :func:`standings_csv`."""
    return sha256_of(standings_csv(rows))
