"""Reads of the final standings for the pages and the API."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass

from django.utils import timezone

from portal.contests.models import Benchmark
from portal.standings import rules
from portal.standings.models import Correction, Standings
from portal.standings.prizes import review_states

LIVE = "live"
PROVISIONAL = "provisional"
FINAL = "final"


def board_state(benchmark: Benchmark, now: dt.datetime | None = None) -> str:
    """``live`` before the close, ``provisional`` from the close until final standings
    are published, ``final`` afterwards (publishing is refused before the close)."""
    now = now or timezone.now()
    if now < benchmark.closes_at:  # nothing is published before the close: no query
        return LIVE
    return FINAL if Standings.objects.filter(benchmark=benchmark).exists() else PROVISIONAL


def marked_rows(rows: list[rules.Row], reviews: dict[int, str]) -> list[dict[str, object]]:
    """Each row's fields with ``review``: its submission's provenance review state, None
    when it was never reviewed."""
    return [{**asdict(row), "review": reviews.get(row.submission_id)} for row in rows]


@dataclass(frozen=True)
class Published:
    """The frozen rows, their corrections, and each reviewed row's provenance review state
    now (``reviews``: submission id to ``under_review``, ``cleared`` or ``disqualified``)."""

    standings: Standings
    rows: list[rules.Row]
    corrections: list[Correction]
    reviews: dict[int, str]

    @property
    def marked(self) -> list[dict[str, object]]:
        """The rows with their review state (:func:`marked_rows`)."""
        return marked_rows(self.rows, self.reviews)

    @property
    def csv(self) -> str:
        """The canonical CSV: its SHA-256 is ``standings.digest``."""
        return rules.canonical_csv(self.rows)


def published(benchmark: Benchmark) -> Published | None:
    """The benchmark's published standings with their corrections and review states;
    None before. Four queries."""
    standings = Standings.objects.filter(benchmark=benchmark).first()
    if standings is None:
        return None
    rows = [
        rules.Row(
            rank=row.rank,
            entrant_id=0,
            entrant=row.entrant,
            submission_id=row.submission_id,
            wall_time_ns=row.wall_time_ns,
            runs=row.runs,
            tied=row.tied,
        )
        for row in standings.rows.order_by("position")
    ]
    return Published(
        standings=standings,
        rows=rows,
        corrections=list(standings.corrections.all()),
        reviews=review_states([row.submission_id for row in rows]),
    )
