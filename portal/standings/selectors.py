"""Reads of the final standings for the pages and the API."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.utils import timezone

from portal.contests.models import Benchmark
from portal.standings import rules
from portal.standings.models import Correction, Standings

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


@dataclass(frozen=True)
class Published:
    standings: Standings
    rows: list[rules.Row]
    corrections: list[Correction]

    @property
    def csv(self) -> str:
        """The standings' CSV, whose SHA-256 is ``standings.digest`` (``rules.published_csv``:
        the canonical form, or the plain one standings published before it are of)."""
        return rules.published_csv(self.rows, self.standings.digest)


def published(benchmark: Benchmark) -> Published | None:
    """The benchmark's published standings with their corrections; None before. Three
    queries."""
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
    return Published(standings=standings, rows=rows, corrections=list(standings.corrections.all()))
