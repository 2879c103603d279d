"""An entrant's attempt quota: what the attempt ledger charged on an attempt day, and what
is left of today's."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db.models import Sum

from portal.contests import rules
from portal.contests.models import Benchmark
from portal.submissions.models import AttemptLedger, Submission


@dataclass(frozen=True)
class Quota:
    kind: str
    per_day: int
    used_today: int
    remaining_today: int
    resets_at: dt.datetime
    next_available_at: dt.datetime | None


def net_charged_on(entrant: Any, benchmark: Benchmark, kind: str, day: dt.date) -> int:
    """Charges minus refunds of ``kind`` on one attempt day."""
    total = AttemptLedger.objects.filter(
        entrant=entrant, benchmark=benchmark, kind=kind, attempt_day=day
    ).aggregate(net=Sum("delta"))["net"]
    return int(total or 0)


def quota_for(entrant: Any, benchmark: Benchmark, kind: str, now: dt.datetime) -> Quota:
    """How many attempts of ``kind`` the entrant has left on today's attempt day.

    ``next_available_at`` is when the next upload can be accepted: now, the next reset,
    the opening if that is later, or None once the window has closed.
    """
    per_day = (
        benchmark.attempts_per_day if kind == Submission.OFFICIAL else benchmark.practice_per_day
    )
    tz_name = benchmark.attempt_timezone
    used = net_charged_on(entrant, benchmark, kind, rules.attempt_day(now, tz_name))
    window = rules.window_state(now, benchmark.opens_at, benchmark.closes_at)
    next_at: dt.datetime | None = rules.next_attempt_at(now, tz_name, per_day, used)
    if window == "upcoming":
        next_at = benchmark.opens_at
    elif window == "closed" or (next_at is not None and next_at >= benchmark.closes_at):
        next_at = None
    return Quota(
        kind=kind,
        per_day=per_day,
        used_today=used,
        remaining_today=rules.remaining_attempts(per_day, used),
        resets_at=rules.next_reset(now, tz_name),
        next_available_at=next_at,
    )
