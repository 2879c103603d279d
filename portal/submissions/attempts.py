"""An entrant's attempts, in one place: the ledger's charge when an upload is accepted,
its refund (platform failures, staff cancellations, duplicates), and the quota they
leave on an attempt day. The day's arithmetic is pure (``portal.contests.rules``:
``attempt_day``, ``remaining_attempts``, ``next_attempt_at``); what the ledger holds is
read and written only here."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from portal.contests import rules
from portal.contests.models import Benchmark
from portal.submissions.models import AttemptLedger, Submission
from portal.teams.selectors import teammate_ids

KINDS = (Submission.OFFICIAL, Submission.PRACTICE)
# How long the pages may keep an entrant's attempt day: every write of their ledger drops
# it, so this bounds only a read that raced a write.
DAY_CACHE_S = 60


@dataclass(frozen=True)
class Quota:
    kind: str
    per_day: int
    used_today: int
    remaining_today: int
    resets_at: dt.datetime
    next_available_at: dt.datetime | None


def net_charged_on(entrant: Any, benchmark: Benchmark, kind: str, day: dt.date) -> int:
    """Charges minus refunds of ``kind`` on one attempt day: the entrant's team's, every
    member's ledger rows together (only the entrant's own when on their own)."""
    return net_charged_of(teammate_ids(benchmark.pk, entrant.pk), benchmark, kind, day)


def net_charged_of(user_ids: Sequence[int], benchmark: Benchmark, kind: str, day: dt.date) -> int:
    """Charges minus refunds of ``kind`` on one attempt day, over the entrants named."""
    total = AttemptLedger.objects.filter(
        entrant_id__in=list(user_ids), benchmark=benchmark, kind=kind, attempt_day=day
    ).aggregate(net=Sum("delta"))["net"]
    return int(total or 0)


def attempts_used_today(
    benchmark: Benchmark, user_ids: Sequence[int], now: dt.datetime
) -> dict[str, int]:
    """Each kind's net charges of the attempt day of ``now`` over ``user_ids`` (never
    below zero): what the teams' merge rule counts (``portal.teams.hooks``)."""
    day = rules.attempt_day(now, benchmark.attempt_timezone)
    nets = _day_nets(user_ids, benchmark, day).values()
    return {kind: max(0, sum(net.get(kind, 0) for net in nets)) for kind in KINDS}


def _day_nets(
    user_ids: Sequence[int], benchmark: Benchmark, day: dt.date
) -> dict[int, dict[str, int]]:
    """Each entrant's charges minus refunds of one attempt day, by kind (a kind with no row
    is absent; an entrant with none maps to {}). One query."""
    nets: dict[int, dict[str, int]] = {user_id: {} for user_id in user_ids}
    rows = (
        AttemptLedger.objects.filter(
            entrant_id__in=list(user_ids), benchmark=benchmark, attempt_day=day
        )
        .values("entrant_id", "kind")
        .annotate(net=Sum("delta"))
        .order_by()
    )
    for row in rows:
        nets[row["entrant_id"]][row["kind"]] = int(row["net"] or 0)
    return nets


def quota_for(
    entrant: Any,
    benchmark: Benchmark,
    kind: str,
    now: dt.datetime,
    *,
    members: Sequence[int] | None = None,
) -> Quota:
    """How many attempts of ``kind`` the entrant has left on today's attempt day: their
    team's, when they are in one (the allowance is the team's).

    ``used_today`` is the day's charges net of its refunds, never below zero; a refund of
    an earlier day's attempt booked today shows as one more ``remaining_today``, which
    may then exceed ``per_day``. ``members``: the entrant's team's user ids, when the
    caller has read them already (``teams.selectors.teammate_ids``).

    ``next_available_at`` is when the next upload can be accepted: now, the next reset,
    the opening if that is later (official attempts only: practice runs are accepted
    before the opening), or None once the window has closed.
    """
    day = rules.attempt_day(now, benchmark.attempt_timezone)
    if members is None:
        used = net_charged_on(entrant, benchmark, kind, day)
    else:
        used = net_charged_of(members, benchmark, kind, day)
    return _quota(benchmark, kind, used, now)


def quotas_for(
    entrant: Any, benchmark: Benchmark, now: dt.datetime, *, members: Sequence[int] | None = None
) -> list[Quota]:
    """``quota_for`` of both kinds, official then practice, for what the pages and the API
    show: each member's day is read from the cache (every write of their ledger, here,
    drops it), the others in one read of the ledger. Charging reads the ledger itself
    (``quota_for``, under the entrants' row locks)."""
    day = rules.attempt_day(now, benchmark.attempt_timezone)
    if members is None:
        members = teammate_ids(benchmark.pk, entrant.pk)
    keys = {user_id: _day_key(benchmark.pk, day, user_id) for user_id in members}
    found: dict[str, dict[str, int]] = cache.get_many(list(keys.values()))
    missing = [user_id for user_id, key in keys.items() if key not in found]
    if missing:
        read = _day_nets(missing, benchmark, day)
        fresh = {keys[user_id]: nets for user_id, nets in read.items()}
        cache.set_many(fresh, DAY_CACHE_S)
        found.update(fresh)
    used = {kind: sum(nets.get(kind, 0) for nets in found.values()) for kind in KINDS}
    return [_quota(benchmark, kind, used[kind], now) for kind in KINDS]


def _day_key(benchmark_id: int, day: dt.date, entrant_id: int) -> str:
    return f"podium:attempt-day:{benchmark_id}:{day.isoformat()}:{entrant_id}"


def _day_changed(benchmark_id: int, day: dt.date, entrant_id: int) -> None:
    """Drop the entrant's cached day now and once the write is committed (a read between
    the two would cache it as it was)."""
    key = _day_key(benchmark_id, day, entrant_id)
    cache.delete(key)
    transaction.on_commit(lambda: cache.delete(key))


def _quota(benchmark: Benchmark, kind: str, used: int, now: dt.datetime) -> Quota:
    per_day = (
        benchmark.attempts_per_day if kind == Submission.OFFICIAL else benchmark.practice_per_day
    )
    tz_name = benchmark.attempt_timezone
    window = rules.window_state(now, benchmark.opens_at, benchmark.closes_at)
    next_at: dt.datetime | None = rules.next_attempt_at(now, tz_name, per_day, used)
    if window == "upcoming" and kind == Submission.OFFICIAL:
        next_at = benchmark.opens_at
    elif window == "closed" or (next_at is not None and next_at >= benchmark.closes_at):
        next_at = None
    return Quota(
        kind=kind,
        per_day=per_day,
        used_today=max(0, used),
        remaining_today=rules.remaining_attempts(per_day, used),
        resets_at=rules.next_reset(now, tz_name),
        next_available_at=next_at,
    )


def attempt_charge(*, submission: Submission, now: dt.datetime) -> None:
    """Charge ``submission``'s attempt on its attempt day (inside the transaction that
    accepts it, holding the entrant's and their team's row locks:
    ``intake.submission_accept``). The row is the uploader's; their team's count sums
    its members' rows."""
    benchmark = submission.benchmark
    day = rules.attempt_day(now, benchmark.attempt_timezone)
    AttemptLedger.objects.create(
        entrant_id=submission.entrant_id,
        benchmark=benchmark,
        submission=submission,
        kind=submission.kind,
        attempt_day=day,
        delta=AttemptLedger.CHARGE,
        reason="upload accepted",
        at=now,
    )
    _day_changed(benchmark.pk, day, submission.entrant_id)


def attempt_refund(*, submission: Submission, reason: str) -> bool:
    """Refund the submission's attempt once (platform failure or staff cancellation).

    The refund is booked on the attempt day it is given: on the charge's own day that
    day gets its attempt back; after it (a build or run that failed past midnight) the
    attempt comes back on the refund's day, since the charge's day is over and an
    attempt restored to it could never be used.
    """
    charge = submission.ledger.filter(delta=AttemptLedger.CHARGE).first()
    if charge is None:
        return False
    now = timezone.now()
    today = rules.attempt_day(now, submission.benchmark.attempt_timezone)
    day = max(charge.attempt_day, today)
    try:
        with transaction.atomic():
            AttemptLedger.objects.create(
                entrant_id=submission.entrant_id,
                benchmark_id=submission.benchmark_id,
                submission=submission,
                kind=submission.kind,
                attempt_day=day,
                delta=AttemptLedger.REFUND,
                reason=reason,
                at=now,
            )
            _day_changed(submission.benchmark_id, day, submission.entrant_id)
    except IntegrityError:
        return False  # already refunded
    return True
