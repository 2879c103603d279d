"""The minute's sweep (Celery beat, ``portal.campaigns.tasks``): running rounds whose
host's heartbeat went stale are void, pending rounds no host claimed wait for capacity,
and every unpaused campaign whose trigger says so starts a round.
"""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.utils import timezone

from portal.campaigns import rules
from portal.campaigns.models import Campaign, Round
from portal.campaigns.recording import round_facts, round_void_record
from portal.campaigns.rounds import round_maybe_start, round_wait_for_capacity

# A pending round whose try was due this long ago and that no host claimed: no host of its
# class took the message, so it waits for capacity (backoff) and is sent again.
CLAIM_GRACE = dt.timedelta(minutes=5)
# A running round whose host has not called round_heartbeat for this long is void.
HEARTBEAT_STALE = dt.timedelta(minutes=15)
STALE_HEARTBEAT = "the scoring host's heartbeat went stale"


def round_void_stale(now: dt.datetime | None = None) -> list[int]:
    """Void every running round whose host's heartbeat is older than :data:`HEARTBEAT_STALE`
    (the host died or lost the database). The ids voided."""
    now = now or timezone.now()
    voided = []
    stale = Round.objects.filter(status=Round.RUNNING, heartbeat_at__lt=now - HEARTBEAT_STALE)
    for round_id in stale.values_list("pk", flat=True):
        with transaction.atomic():
            round_ = (
                Round.objects.select_for_update()
                .select_related("campaign")
                .filter(pk=round_id, status=Round.RUNNING, heartbeat_at__lt=now - HEARTBEAT_STALE)
                .first()
            )
            if round_ is None:
                continue
            round_void_record(
                round_,
                STALE_HEARTBEAT,
                {**round_facts(round_, round_.campaign), "host": round_.host},
                now,
                cause=rules.VOID_HOST,
            )
            voided.append(round_id)
    return voided


def round_retry_unclaimed(now: dt.datetime | None = None) -> list[int]:
    """Pending rounds that no host claimed :data:`CLAIM_GRACE` after their try was due
    wait for capacity (:func:`round_wait_for_capacity`). The ids."""
    now = now or timezone.now()
    overdue = [
        pk
        for pk, created_at, next_try_at in Round.objects.filter(status=Round.PENDING).values_list(
            "pk", "created_at", "next_try_at"
        )
        if (next_try_at or created_at) + CLAIM_GRACE <= now
    ]
    for round_id in overdue:
        round_wait_for_capacity(round_id, reason="no host claimed it", now=now)
    return overdue


def campaigns_sweep(now: dt.datetime | None = None) -> dict[str, list[int]]:
    """The minute's check (Celery beat): void stale rounds, resend unclaimed ones, then
    start a round in every unpaused campaign whose trigger says so."""
    now = now or timezone.now()
    voided = round_void_stale(now)
    retried = round_retry_unclaimed(now)
    started = []
    for campaign in Campaign.objects.filter(paused=False).exclude(baseline_image_digest=""):
        round_ = round_maybe_start(campaign, now)
        if round_ is not None:
            started.append(round_.pk)
    return {"voided": voided, "retried": retried, "started": started}
