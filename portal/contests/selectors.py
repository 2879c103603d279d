"""Reads that matter: the leaderboard and an entrant's attempt quota."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db.models import Sum

from portal.contests import rules
from portal.contests.models import Benchmark, LeaderboardEntry


@dataclass(frozen=True)
class LeaderboardRow:
    rank: int
    entrant: str
    wall_time_ns: int
    matches: int
    total: int
    submission_id: int
    submitted_at: dt.datetime


def leaderboard_rows(benchmark: Benchmark) -> list[LeaderboardRow]:
    """The board in rank order: wall time, then earlier submission, then id. One query."""
    entries = (
        LeaderboardEntry.objects.filter(benchmark=benchmark)
        .select_related("entrant")
        .order_by("wall_time_ns", "submitted_at", "submission_id")
    )
    return [
        LeaderboardRow(
            rank=index,
            entrant=entry.entrant.get_username(),
            wall_time_ns=entry.wall_time_ns,
            matches=entry.matches,
            total=entry.total,
            submission_id=entry.submission_id,
            submitted_at=entry.submitted_at,
        )
        for index, entry in enumerate(entries, start=1)
    ]


@dataclass(frozen=True)
class Quota:
    kind: str
    per_day: int
    used_today: int
    remaining_today: int
    resets_at: dt.datetime
    next_available_at: dt.datetime


def net_charged_on(entrant: Any, benchmark: Benchmark, kind: str, day: dt.date) -> int:
    """Charges minus refunds of ``kind`` on one attempt day."""
    from portal.submissions.models import AttemptLedger

    total = AttemptLedger.objects.filter(
        entrant=entrant, benchmark=benchmark, kind=kind, attempt_day=day
    ).aggregate(net=Sum("delta"))["net"]
    return int(total or 0)


def quota_for(entrant: Any, benchmark: Benchmark, kind: str, now: dt.datetime) -> Quota:
    """How many attempts of ``kind`` the entrant has left on today's attempt day."""
    from portal.submissions.models import Submission

    per_day = (
        benchmark.attempts_per_day if kind == Submission.OFFICIAL else benchmark.practice_per_day
    )
    tz_name = benchmark.attempt_timezone
    used = net_charged_on(entrant, benchmark, kind, rules.attempt_day(now, tz_name))
    return Quota(
        kind=kind,
        per_day=per_day,
        used_today=used,
        remaining_today=rules.remaining_attempts(per_day, used),
        resets_at=rules.next_reset(now, tz_name),
        next_available_at=rules.next_attempt_at(now, tz_name, per_day, used),
    )
