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
from django.db.models import Min, Q, Sum
from django.utils import timezone

from portal.contests import rules
from portal.contests.models import Benchmark
from portal.submissions.models import AttemptLedger, Submission
from portal.teams.hooks import MergeCounts
from portal.teams.selectors import Identity, identity_of

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


def identity_rows(identity: Identity) -> Q:
    """The ledger rows an identity counts: every row of its members (wherever they were
    charged), and every row charged in its team, even of a member who left it since."""
    rows = Q(entrant_id__in=list(identity.member_ids))
    if identity.team_id is not None:
        rows |= Q(team_id=identity.team_id)
    return rows


def net_charged_of(identity: Identity, benchmark: Benchmark, kind: str, day: dt.date) -> int:
    """Charges minus refunds of ``kind`` on one attempt day, over the rows ``identity``
    counts (``identity_rows``)."""
    total = AttemptLedger.objects.filter(
        identity_rows(identity), benchmark=benchmark, kind=kind, attempt_day=day
    ).aggregate(net=Sum("delta"))["net"]
    return int(total or 0)


def merge_counts(
    benchmark: Benchmark, team_id: int, member_ids: Sequence[int], joiner_id: int, now: dt.datetime
) -> dict[str, MergeCounts]:
    """Each kind's net charges as the teams' merge rule reads them (``portal.teams.hooks``):
    the team's and the joiner's of the attempt day of ``now``, and the two together, each
    row once (a rejoining member's rows charged in the team are the team's already), of
    that day and of the earlier days, with the first day either was charged. One query."""
    day = rules.attempt_day(now, benchmark.attempt_timezone)
    team = identity_rows(Identity(team_id=team_id, member_ids=list(member_ids)))
    own = Q(entrant_id=joiner_id)
    today, before = Q(attempt_day=day), Q(attempt_day__lt=day)
    rows = (
        AttemptLedger.objects.filter(team | own, benchmark=benchmark, attempt_day__lte=day)
        .values("kind")
        .annotate(
            team_today=Sum("delta", filter=team & today),
            own_today=Sum("delta", filter=own & today),
            both_today=Sum("delta", filter=today),
            both_before=Sum("delta", filter=before),
            first_day=Min("attempt_day"),
        )
        .order_by()
    )
    counts = {kind: MergeCounts() for kind in KINDS}
    for row in rows:
        counts[row["kind"]] = MergeCounts(
            team_today=int(row["team_today"] or 0),
            own_today=int(row["own_today"] or 0),
            both_today=int(row["both_today"] or 0),
            both_before=int(row["both_before"] or 0),
            first_day=row["first_day"],
        )
    return counts


def _day_nets(
    rows: Q, benchmark: Benchmark, day: dt.date, *, user_ids: Sequence[int] = ()
) -> dict[int, dict[str, int]]:
    """The ledger ``rows`` of one attempt day: each entrant's charges minus refunds, by
    kind (a kind with no row is absent; each of ``user_ids`` maps at least to {}). One
    query."""
    nets: dict[int, dict[str, int]] = {user_id: {} for user_id in user_ids}
    found = (
        AttemptLedger.objects.filter(rows, benchmark=benchmark, attempt_day=day)
        .values("entrant_id", "kind")
        .annotate(net=Sum("delta"))
        .order_by()
    )
    for row in found:
        nets.setdefault(row["entrant_id"], {})[row["kind"]] = int(row["net"] or 0)
    return nets


def quota_for(
    entrant: Any,
    benchmark: Benchmark,
    kind: str,
    now: dt.datetime,
    *,
    identity: Identity | None = None,
) -> Quota:
    """How many attempts of ``kind`` the entrant has left on today's attempt day: their
    team's, when they are in one (the allowance is the team's: ``identity_rows``).

    ``used_today`` is the day's charges net of its refunds, never below zero; a refund of
    an earlier day's attempt booked today shows as one more ``remaining_today``, which
    may then exceed ``per_day``. ``identity``: the entrant's team and its members, when
    the caller has read them already (``teams.selectors.identity_of``).

    ``next_available_at`` is when the next upload can be accepted: now, the next reset,
    the opening if that is later (official attempts only: practice runs are accepted
    before the opening), or None once the window has closed.
    """
    day = rules.attempt_day(now, benchmark.attempt_timezone)
    identity = identity or identity_of(benchmark.pk, entrant.pk)
    return _quota(benchmark, kind, net_charged_of(identity, benchmark, kind, day), now)


def quotas_for(
    entrant: Any, benchmark: Benchmark, now: dt.datetime, *, identity: Identity | None = None
) -> list[Quota]:
    """``quota_for`` of both kinds, official then practice, for what the pages and the API
    show: each member's day, and the day of the rows charged in their team, are read from
    the cache (every write of the ledger, here, drops the uploader's and the team's), the
    others in one read of the ledger each. Charging reads the ledger itself
    (``quota_for``, under the entrants' row locks)."""
    day = rules.attempt_day(now, benchmark.attempt_timezone)
    identity = identity or identity_of(benchmark.pk, entrant.pk)
    keys = {user_id: _day_key(benchmark.pk, day, user_id) for user_id in identity.member_ids}
    team_key = (
        "" if identity.team_id is None else _team_day_key(benchmark.pk, day, identity.team_id)
    )
    found: dict[str, Any] = cache.get_many([*keys.values(), *([team_key] if team_key else [])])
    fresh: dict[str, Any] = {}
    missing = [user_id for user_id, key in keys.items() if key not in found]
    if missing:
        read = _day_nets(Q(entrant_id__in=list(missing)), benchmark, day, user_ids=missing)
        fresh.update({keys[user_id]: nets for user_id, nets in read.items()})
    if identity.team_id is not None and team_key not in found:
        fresh[team_key] = _day_nets(Q(team_id=identity.team_id), benchmark, day)
    if fresh:
        cache.set_many(fresh, DAY_CACHE_S)
        found.update(fresh)
    nets: list[dict[str, int]] = [found[key] for key in keys.values()]
    # Rows made in the team by someone who has left it since are still the team's.
    team: dict[int, dict[str, int]] = found.get(team_key, {}) if team_key else {}
    nets += [day_nets for user_id, day_nets in team.items() if user_id not in keys]
    used = {kind: sum(net.get(kind, 0) for net in nets) for kind in KINDS}
    return [_quota(benchmark, kind, used[kind], now) for kind in KINDS]


def _day_key(benchmark_id: int, day: dt.date, entrant_id: int) -> str:
    return f"podium:attempt-day:{benchmark_id}:{day.isoformat()}:{entrant_id}"


def _team_day_key(benchmark_id: int, day: dt.date, team_id: int) -> str:
    return f"podium:attempt-day:{benchmark_id}:{day.isoformat()}:team:{team_id}"


def _day_changed(row: AttemptLedger) -> None:
    """Drop the cached days the ledger row changes (its uploader's, and its team's) now
    and once the write is committed (a read between the two would cache them as they
    were)."""
    keys = [_day_key(row.benchmark_id, row.attempt_day, row.entrant_id)]
    if row.team_id is not None:
        keys.append(_team_day_key(row.benchmark_id, row.attempt_day, row.team_id))
    cache.delete_many(keys)
    transaction.on_commit(lambda: cache.delete_many(keys))


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


def attempt_charge(*, submission: Submission, team_id: int | None, now: dt.datetime) -> None:
    """Charge ``submission``'s attempt on its attempt day (inside the transaction that
    accepts it, holding the entrant's and their team's row locks:
    ``intake.submission_accept``). The row is the uploader's, charged in ``team_id``
    (their team, None on their own): it counts against both for good
    (``identity_rows``)."""
    benchmark = submission.benchmark
    day = rules.attempt_day(now, benchmark.attempt_timezone)
    row = AttemptLedger.objects.create(
        entrant_id=submission.entrant_id,
        team_id=team_id,
        benchmark=benchmark,
        submission=submission,
        kind=submission.kind,
        attempt_day=day,
        delta=AttemptLedger.CHARGE,
        reason="upload accepted",
        at=now,
    )
    _day_changed(row)


def attempt_refund(*, submission: Submission, reason: str) -> bool:
    """Refund the submission's attempt once (platform failure or staff cancellation).

    The refund is booked on the attempt day it is given: on the charge's own day that
    day gets its attempt back; after it (a build or run that failed past midnight) the
    attempt comes back on the refund's day, since the charge's day is over and an
    attempt restored to it could never be used. It is charged in the charge's team.
    """
    charge = submission.ledger.filter(delta=AttemptLedger.CHARGE).first()
    if charge is None:
        return False
    now = timezone.now()
    today = rules.attempt_day(now, submission.benchmark.attempt_timezone)
    day = max(charge.attempt_day, today)
    try:
        with transaction.atomic():
            row = AttemptLedger.objects.create(
                entrant_id=submission.entrant_id,
                team_id=charge.team_id,
                benchmark_id=submission.benchmark_id,
                submission=submission,
                kind=submission.kind,
                attempt_day=day,
                delta=AttemptLedger.REFUND,
                reason=reason,
                at=now,
            )
            _day_changed(row)
    except IntegrityError:
        return False  # already refunded
    return True
