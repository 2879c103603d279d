"""Reads of the stored board (its rows, pages, version and an entrant's standing) and of
the benchmarks' schedules. What is read from submissions and runs is in
``portal.submissions``: ``leaderboard.verifying_rows`` and ``quota.quota_for``."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from django.core.cache import cache
from django.db import connection
from django.db.models import Count, F, Q
from django.db.models.fields.json import KeyTransform

from portal.contests import rules
from portal.contests.models import Benchmark, Cohort, CohortItem, LeaderboardEntry


@dataclass(frozen=True)
class LeaderboardRow:
    rank: int
    entrant: str
    wall_time_ns: int
    matches: int
    total: int
    submission_id: int
    submitted_at: dt.datetime
    cpu_per_wall: float | None = None  # the meter: CPU seconds per wall second of the run
    # The GPU meter (on a GPU class; None elsewhere): joules per image, mean utilization %.
    energy_per_image_j: float | None = None
    gpu_util_mean_pct: float | None = None
    # Provenance review of the row's submission: "under_review", "cleared" or None.
    review: str | None = None
    # Whether the row is a team's (``entrant`` is then the team's name).
    team: bool = False


def _run_figure(*path: str) -> KeyTransform:
    """One figure of the run's stored ``resources`` (``path``: keys into it), read by the
    database: a row never loads the GPU meter's samples."""
    first, *rest = path
    expression = KeyTransform(first, "run__resources")
    for key in rest:
        expression = KeyTransform(key, expression)
    return expression


def _entries(benchmark: Benchmark) -> Any:
    """The board's rows in rank order, with the entrant and the run's meter readings."""
    return (
        LeaderboardEntry.objects.filter(benchmark=benchmark)
        .select_related("entrant")
        .annotate(
            run_cpu_per_wall=_run_figure("cpu_per_wall"),
            run_energy_per_image_j=_run_figure("gpu", "energy_per_image_j"),
            run_gpu_util_mean_pct=_run_figure("gpu", "gpu_util_mean_pct"),
            review_status=F("submission__provenance_review__status"),
        )
        .order_by(*RANK_ORDER)
    )


def leaderboard_rows(benchmark: Benchmark) -> list[LeaderboardRow]:
    """The board in rank order: wall time, then earlier submission, then id. One query."""
    return [_row(entry, rank) for rank, entry in enumerate(_entries(benchmark), start=1)]


# Pages of the board ----------------------------------------------------------------

RANK_ORDER = ("wall_time_ns", "submitted_at", "submission_id")
# How long an entrant's standing stays cached for one version of the board (a new version
# is a new key; this only bounds what an idle key keeps).
STANDING_CACHE_S = 600


@dataclass(frozen=True)
class BoardVersion:
    """How many entrants the stored board holds, and a fingerprint of its rows.

    Every change of a row changes its run (a new best, or an older run after a
    disqualification) or the number of rows, so the count, the sum of run ids, the sum
    of wall times and the newest row id together move with any change; the counts of
    the rows' provenance reviews, opened and decided, move with their marks. Caches of what
    is drawn from the board (its rendered pages, the progress chart) key on ``key``.
    """

    entrants: int
    key: str


# The board's rows with their provenance reviews (of their submissions), counted and
# summed; a row that became a team's (or stopped being one) changes its name, not its run.
VERSION_SQL = """
    SELECT COUNT(e.id), SUM(e.run_id), SUM(e.wall_time_ns), MAX(e.id),
           COUNT(r.id), COUNT(r.decided_at), COUNT(CASE WHEN e.team_name <> '' THEN 1 END)
    FROM contests_leaderboardentry e
    LEFT JOIN submissions_provenancereview r ON r.submission_id = e.submission_id
    WHERE e.benchmark_id = %s
"""


def leaderboard_version(benchmark: Benchmark) -> BoardVersion:
    """The board's size and fingerprint. One query (an aggregate over the board's rows).

    Every board page reads it, so it is written as SQL: the ORM's compiling of this
    aggregate cost four times the query itself.
    """
    with connection.cursor() as cursor:
        cursor.execute(VERSION_SQL, [benchmark.pk])
        rows, runs, times, last, reviews, decided, teams = cursor.fetchone()
    return BoardVersion(
        entrants=rows, key=f"{rows}-{runs}-{times}-{last}-{reviews}-{decided}-{teams}"
    )


def benchmark_stamp(benchmark: Benchmark) -> str:
    """A fingerprint of the benchmark's row as read: any edit of any of its fields (its
    rules, window, limits) gives another, so what the pages cache of it keys on this."""
    values = repr([getattr(benchmark, field.attname) for field in Benchmark._meta.concrete_fields])
    return hashlib.blake2b(values.encode(), digest_size=12).hexdigest()


class LeaderboardPage:
    """One page of the ranked board. Its rows are read (one query) only when first used,
    so a page whose rendering is cached costs only the version query."""

    def __init__(
        self, benchmark: Benchmark, *, page: int, per_page: int, version: BoardVersion
    ) -> None:
        self.benchmark = benchmark
        self.version = version
        self.entrants = version.entrants
        self.per_page = per_page
        self.pages = max(1, -(-version.entrants // per_page))
        self.page = min(max(1, page), self.pages)

    @property
    def has_previous(self) -> bool:
        return self.page > 1

    @property
    def has_next(self) -> bool:
        return self.page < self.pages

    @property
    def cache_key(self) -> str:
        """Names this page of this version of the board (for ``{% cache %}``)."""
        return f"{self.benchmark.pk}:{self.version.key}:{self.page}:{self.per_page}"

    @cached_property
    def rows(self) -> list[LeaderboardRow]:
        offset = (self.page - 1) * self.per_page
        entries = _entries(self.benchmark)[offset : offset + self.per_page]
        return [_row(entry, rank) for rank, entry in enumerate(entries, start=offset + 1)]

    @cached_property
    def gpu_columns(self) -> bool:
        """Whether the board shows the GPU meter's columns: some row of this page has its
        figures (only runs on a GPU class do), so a CPU benchmark's board stays as it was."""
        return any(
            row.energy_per_image_j is not None or row.gpu_util_mean_pct is not None
            for row in self.rows
        )


def _row(entry: LeaderboardEntry, rank: int) -> LeaderboardRow:
    return LeaderboardRow(
        rank=rank,
        entrant=entry.team_name or entry.entrant.get_username(),
        wall_time_ns=entry.wall_time_ns,
        matches=entry.matches,
        total=entry.total,
        submission_id=entry.submission_id,
        submitted_at=entry.submitted_at,
        cpu_per_wall=_float(getattr(entry, "run_cpu_per_wall", None)),
        energy_per_image_j=_float(getattr(entry, "run_energy_per_image_j", None)),
        gpu_util_mean_pct=_float(getattr(entry, "run_gpu_util_mean_pct", None)),
        review=_review(getattr(entry, "review_status", None)),
        team=bool(entry.team_name),
    )


def _review(status: Any) -> str | None:
    """The mark a row shows: under review or cleared (a disqualified row is not shown)."""
    return status if status in ("under_review", "cleared") else None


def _float(value: Any) -> float | None:
    """A stored figure as a number (None for a missing or odd one)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def leaderboard_page(
    benchmark: Benchmark, *, page: int, per_page: int, version: BoardVersion | None = None
) -> LeaderboardPage:
    """Page ``page`` (from 1; clamped to the pages there are) of the ranked board.

    One query for the board's version (none when given), one more when the rows are used.
    """
    version = version or leaderboard_version(benchmark)
    return LeaderboardPage(benchmark, page=page, per_page=per_page, version=version)


def leaderboard_standing(
    benchmark: Benchmark,
    entrant: Any,
    *,
    teammates: Sequence[int] = (),
    version: BoardVersion,
) -> LeaderboardRow | None:
    """The entrant's own row (their team's: the row of any of ``teammates``) with its
    rank, or None when they have no passing official run.

    Cached for the board's ``version`` (a row and its rank change only with the board);
    read, two queries whatever the size of the board: the row, then how many rank ahead.
    """
    ids = sorted({entrant.pk, *teammates})
    key = f"podium:standing:{benchmark.pk}:{version.key}:{','.join(map(str, ids))}"
    cached: tuple[LeaderboardRow | None] | None = cache.get(key)
    if cached is None:
        cached = (_standing(benchmark, ids),)
        cache.set(key, cached, STANDING_CACHE_S)
    return cached[0]


def _standing(benchmark: Benchmark, entrant_ids: Sequence[int]) -> LeaderboardRow | None:
    entry = _entries(benchmark).filter(entrant_id__in=list(entrant_ids)).first()
    if entry is None:
        return None
    ahead = (
        LeaderboardEntry.objects.filter(benchmark=benchmark)
        .filter(
            Q(wall_time_ns__lt=entry.wall_time_ns)
            | Q(wall_time_ns=entry.wall_time_ns, submitted_at__lt=entry.submitted_at)
            | Q(
                wall_time_ns=entry.wall_time_ns,
                submitted_at=entry.submitted_at,
                submission_id__lt=entry.submission_id,
            )
        )
        .count()
    )
    return _row(entry, ahead + 1)


# The schedule as the pages tell it ----------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """Where a benchmark stands at ``now`` and the next moment that changes it."""

    status: str  # upcoming / open / closed
    next_event: str  # "opens" / "closes" / "" once closed
    next_at: dt.datetime | None


def schedule_at(benchmark: Benchmark, now: dt.datetime) -> Schedule:
    status = rules.window_state(now, benchmark.opens_at, benchmark.closes_at)
    if status == "upcoming":
        return Schedule(status, "opens", benchmark.opens_at)
    if status == "open":
        return Schedule(status, "closes", benchmark.closes_at)
    return Schedule(status, "", None)


def benchmark_schedules(now: dt.datetime) -> list[tuple[Benchmark, Schedule]]:
    """Every benchmark with its schedule, open ones first, then upcoming, then closed. One query."""
    order = {"open": 0, "upcoming": 1, "closed": 2}
    pairs = [(benchmark, schedule_at(benchmark, now)) for benchmark in Benchmark.objects.all()]
    return sorted(pairs, key=lambda pair: order[pair[1].status])


def official_cohort_size(benchmark: Benchmark) -> int:
    """How many images the benchmark's official cohort holds (0 before one is imported)."""
    return CohortItem.objects.filter(
        cohort__benchmark=benchmark, cohort__kind=Cohort.OFFICIAL
    ).count()


def practice_cohort(benchmark: Benchmark) -> tuple[int, str] | None:
    """The published practice cohort's size and the public seed it was drawn with ("" for
    a prepared cohort), in one query; None before one is imported."""
    row = (
        Cohort.objects.filter(benchmark=benchmark, kind=Cohort.PRACTICE)
        .annotate(size=Count("items"))
        .values_list("size", "public_seed")
        .first()
    )
    return None if row is None else (int(row[0]), str(row[1]))


def verification_canaries(benchmark: Benchmark) -> int:
    """How many canaries a verification (or final run) of ``benchmark`` carries: its
    share of the cohort as far as the canary pool goes (``rules.canary_count``)."""
    pool = CohortItem.objects.filter(cohort__benchmark=benchmark, cohort__kind=Cohort.CANARY)
    return rules.canary_count(benchmark.cohort_size, pool.count())
