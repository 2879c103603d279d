"""The reads of metered estimation: the board (each team's best public score), the
withheld scores after the close, seed 004's ratio and its outliers, every graded entry
(the chart's points) and the final standings."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from portal.contests.models import Benchmark
from portal.estimation import rules
from portal.estimation.models import Entry, EntryReview, FinalScore, PhaseRules, Suite
from portal.teams.selectors import identity_of

# A final row's status when its entry was disqualified by its review before prizes.
DISQUALIFIED = EntryReview.DISQUALIFIED


def graded_candidates(benchmark: Benchmark) -> list[rules.Candidate]:
    """Every graded entry with a public score, as board candidates (team, else entrant)."""
    rows = Entry.objects.filter(
        benchmark=benchmark, status=Entry.GRADED, public_score__isnull=False
    ).values_list("pk", "team_id", "entrant_id", "public_score", "submitted_at")
    return [
        rules.Candidate(
            entry_id=pk, owner=rules.owner_key(team_id, entrant_id), score=score, submitted_at=at
        )
        for pk, team_id, entrant_id, score, at in rows
        if score is not None
    ]


@dataclass(frozen=True)
class BoardRow:
    rank: int
    entry_id: int
    owner: str
    entrant: str
    team: str
    public_score: float
    withheld_score: float | None  # None before the close
    mean_flops: float | None
    mean_effective_compute: float | None
    ratio: float | None
    ratio_outlier: bool
    fallbacks: int  # over every MLP after the close; before it, over the public ones
    submitted_at: dt.datetime

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "entry": self.entry_id,
            "entrant": self.entrant,
            "team": self.team or None,
            "public_score": self.public_score,
            "withheld_score": self.withheld_score,
            "mean_flops": self.mean_flops,
            "mean_effective_compute": self.mean_effective_compute,
            "ratio": self.ratio,
            "ratio_outlier": self.ratio_outlier,
            "fallbacks": self.fallbacks,
            "submitted_at": self.submitted_at.isoformat(),
        }


def stored_rows(entry: Entry) -> list[rules.MlpRow]:
    """The entry's per-MLP rows as :func:`services.entry_record` stored them (a missing
    MSE or score, stored as ``None``, read back as NaN), in suite order."""
    found = []
    for r in (entry.results or {}).get("mlps", []):
        row = dict(r)
        for key in ("final_layer_mse", "score"):
            if row.get(key) is None:
                row[key] = math.nan
        found.append(rules.MlpRow(**row))
    return found


def entry_ratio(entry: Entry, phase: PhaseRules) -> float | None:
    """Seed 004's ratio of the entry's public MLPs (:func:`rules.compute_ratio`)."""
    rows = stored_rows(entry)[: phase.public_mlps]
    return rules.compute_ratio(rows, phase.lambda_flops_per_second)


def shown_fallbacks(entry: Entry, phase: PhaseRules, *, closed: bool) -> int:
    """The entry's fallbacks as shown: over every MLP once the phase closed, over its
    public MLPs before (the withheld MLPs' outcomes are not shown until the close)."""
    if closed:
        return entry.fallbacks or 0
    return sum(1 for row in stored_rows(entry)[: phase.public_mlps] if row.fallback)


def board(benchmark: Benchmark, now: dt.datetime | None = None) -> list[BoardRow]:
    """Each team's (or solo entrant's) best graded entry by its public score, lower first,
    the earlier submission breaking a tie; withheld scores only once the phase closed."""
    now = now or timezone.now()
    phase = PhaseRules.objects.get(benchmark=benchmark)
    best = rules.best_per_owner(graded_candidates(benchmark))
    entries = {
        e.pk: e
        for e in Entry.objects.filter(pk__in=[c.entry_id for c in best]).select_related(
            "entrant", "team"
        )
    }
    ratios = {pk: entry_ratio(e, phase) for pk, e in entries.items()}
    outliers = rules.ratio_outliers(ratios)
    closed = now >= benchmark.closes_at
    rows = []
    for rank, c in enumerate(best, start=1):
        e = entries[c.entry_id]
        rows.append(
            BoardRow(
                rank=rank,
                entry_id=e.pk,
                owner=c.owner,
                entrant=e.entrant.get_username(),
                team=e.team.name if e.team is not None else "",
                public_score=c.score,
                withheld_score=e.withheld_score if closed else None,
                mean_flops=e.mean_flops,
                mean_effective_compute=e.mean_effective_compute,
                ratio=ratios[e.pk],
                ratio_outlier=e.pk in outliers,
                fallbacks=shown_fallbacks(e, phase, closed=closed),
                submitted_at=e.submitted_at,
            )
        )
    return rows


def every_entry_points(benchmark: Benchmark) -> list[tuple[float, float, int]]:
    """Every graded entry as (mean effective compute, mean public final-layer MSE, id):
    the every-attempt chart's points (compute on a log scale against error)."""
    rows = Entry.objects.filter(
        benchmark=benchmark,
        status=Entry.GRADED,
        mean_effective_compute__gt=0,
        public_mse__isnull=False,
    ).values_list("mean_effective_compute", "public_mse", "pk")
    return [(float(c), float(m), int(pk)) for c, m, pk in rows if c is not None and m is not None]


def monte_carlo_band(benchmark: Benchmark) -> tuple[float, float, float] | None:
    """The phase suite's Monte Carlo convergence band at the phase's budget."""
    phase = PhaseRules.objects.get(benchmark=benchmark)
    suite = Suite.objects.filter(benchmark=benchmark, role=Suite.PHASE, status=Suite.READY).first()
    if suite is None:
        return None
    variances = (suite.stats or {}).get("avg_variances") or []
    public = [float(v) for v in variances[: phase.public_mlps]]
    return rules.monte_carlo_band(public, phase.flop_budget, phase.width, phase.depth)


def visible_entries(benchmark: Benchmark, user_id: int) -> list[Entry]:
    """The entries the user may see in full: their team's (or their own), newest first."""
    members = identity_of(benchmark.pk, user_id).member_ids
    qs = Entry.objects.filter(benchmark=benchmark, entrant_id__in=members)
    return list(qs.select_related("benchmark", "entrant", "team").order_by("-submitted_at", "-id"))


@dataclass(frozen=True)
class FinalRow:
    rank: int | None
    entry_id: int
    entrant: str
    team: str
    status: str
    score: float | None
    fallbacks: int | None
    public_score: float | None


def disqualified_entries(entry_ids: list[int]) -> set[int]:
    """Those of the entries disqualified by their review before prizes (one query)."""
    return set(
        EntryReview.objects.filter(
            entry_id__in=entry_ids, status=EntryReview.DISQUALIFIED
        ).values_list("entry_id", flat=True)
    )


def final_standings(benchmark: Benchmark) -> list[FinalRow]:
    """The final rerun's rows: graded ones ranked by their final score (lower first, the
    earlier submission breaking a tie), each team once (its best), then the rest. An
    entry disqualified by its review before prizes is not ranked (status
    :data:`DISQUALIFIED`): the team's other pick, or the next team, moves up."""
    finals = list(
        FinalScore.objects.filter(entry__benchmark=benchmark).select_related(
            "entry__entrant", "entry__team"
        )
    )
    out = disqualified_entries([f.entry_id for f in finals])
    graded = rules.best_per_owner(
        rules.Candidate(
            entry_id=f.entry_id,
            owner=rules.owner_key(f.entry.team_id, f.entry.entrant_id),
            score=f.score,
            submitted_at=f.entry.submitted_at,
        )
        for f in finals
        if f.status == Entry.GRADED and f.score is not None and f.entry_id not in out
    )
    rank_of = {c.entry_id: i for i, c in enumerate(graded, start=1)}
    rows = [
        FinalRow(
            rank=rank_of.get(f.entry_id),
            entry_id=f.entry_id,
            entrant=f.entry.entrant.get_username(),
            team=f.entry.team.name if f.entry.team is not None else "",
            status=DISQUALIFIED if f.entry_id in out else f.status,
            score=f.score,
            fallbacks=f.fallbacks,
            public_score=f.entry.public_score,
        )
        for f in finals
    ]
    return sorted(rows, key=lambda r: (r.rank is None, r.rank or 0, r.entry_id))
