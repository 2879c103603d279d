"""Reads of the final standings for the pages and the API."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass

from django.db.models import Exists, OuterRef
from django.utils import timezone

from portal.contests.models import Benchmark, Cohort
from portal.standings import rules
from portal.standings.models import Correction, Standings
from portal.standings.prizes import review_states, reviewed_positions

LIVE = "live"
PROVISIONAL = "provisional"
FINAL = "final"

# How the pages and the CSV export's header say which cohort decides the standings.
COHORT_WORDS = {
    Cohort.FINAL: "final cohort (private, fresh)",
    Cohort.OFFICIAL: "official cohort: not fresh",
}


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


def deciding_cohort(benchmark: Benchmark) -> str:
    """The kind of cohort that decides (or decided) the final standings, ``final`` or
    ``official``: the final rerun's once started; the official one (the board's) for
    standings published without a rerun; until then the one a rerun would run on. One
    query."""
    rerun_kind, is_published, has_final = (
        Benchmark.objects.filter(pk=benchmark.pk)
        .annotate(
            is_published=Exists(Standings.objects.filter(benchmark=OuterRef("pk"))),
            has_final=Exists(Cohort.objects.filter(benchmark=OuterRef("pk"), kind=Cohort.FINAL)),
        )
        .values_list("final_rerun__cohort__kind", "is_published", "has_final")
        .get()
    )
    if rerun_kind is not None:
        return str(rerun_kind)
    return Cohort.FINAL if has_final and not is_published else Cohort.OFFICIAL


@dataclass(frozen=True)
class Outline:
    """What a benchmark's rules page says of its end: the cohort that decides (in words)
    and the prize positions reviewed (0 without a validation-data boundary)."""

    cohort: str
    prize_positions: int


def final_outline(benchmark: Benchmark) -> Outline:
    """The rules page's account of the end (one query; two with a boundary)."""
    return Outline(
        cohort=COHORT_WORDS[deciding_cohort(benchmark)],
        prize_positions=reviewed_positions(benchmark),
    )


@dataclass(frozen=True)
class Published:
    """The frozen rows, their corrections, each reviewed row's provenance review state now
    (``reviews``: submission id to ``under_review``, ``cleared`` or ``disqualified``) and
    the cohort that decided them."""

    standings: Standings
    rows: list[rules.Row]
    corrections: list[Correction]
    reviews: dict[int, str]
    cohort: str  # the kind of cohort that decided them (``deciding_cohort``)

    @property
    def cohort_words(self) -> str:
        return COHORT_WORDS.get(self.cohort, self.cohort)

    @property
    def marked(self) -> list[dict[str, object]]:
        """The rows with their review state (:func:`marked_rows`)."""
        return marked_rows(self.rows, self.reviews)

    @property
    def csv(self) -> str:
        """The standings' CSV, whose SHA-256 is ``standings.digest`` (``rules.published_csv``:
        the canonical form, or the plain one standings published before it are of)."""
        return rules.published_csv(self.rows, self.standings.digest)


def published(benchmark: Benchmark) -> Published | None:
    """The benchmark's published standings with their corrections, review states and
    deciding cohort; None before. Five queries."""
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
        cohort=Cohort.OFFICIAL
        if standings.source == Standings.BOARD
        else deciding_cohort(benchmark),
    )
