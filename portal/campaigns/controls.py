"""Staff controls of a campaign (the admin, ``manage.py rounds``): start a round now,
void an open round, pause or resume. Each is audited.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.campaigns import rules
from portal.campaigns.creation import campaign_target
from portal.campaigns.models import Campaign, Round
from portal.campaigns.recording import round_facts, round_void_record
from portal.campaigns.rounds import round_maybe_start, round_maybe_start_after_commit
from portal.core import errors


def round_start_now(*, campaign: Campaign, actor: Any, origin: Origin = NOWHERE) -> Round:
    """Staff: start a round now, whatever the trigger says. Audited. Refuses (and says why)
    a paused campaign, one without a baseline, with an open round or nobody queued."""
    with transaction.atomic():
        campaign = Campaign.objects.select_related("benchmark").get(pk=campaign.pk)
        if campaign.paused:
            raise errors.InvalidParameter("The campaign is paused; resume it first.")
        if not campaign.has_baseline:
            raise errors.InvalidParameter("The campaign has no baseline image yet.")
        if Round.objects.filter(campaign=campaign, status__in=Round.OPEN).exists():
            raise errors.InvalidParameter("A round of this campaign is already open.")
        round_ = round_maybe_start(campaign, force=True)
        if round_ is None:
            raise errors.InvalidParameter("Nobody is queued: a round needs one challenger.")
        audit_record(
            actor=actor,
            action="campaign.round_start",
            target=campaign_target(campaign),
            origin=origin,
            details={"round_id": round_.pk, "ordinal": round_.ordinal},
        )
    return round_


def round_void(*, round_: Round, reason: str, actor: Any, origin: Origin = NOWHERE) -> Round:
    """Staff: void an open (pending or running) round with a reason. Audited.

    As any void: the reason is recorded, the challengers are queued again, the ordinal is
    spent, nothing else changes; the host's later report is ignored. A scored round
    cannot be voided (its verdicts and the crown stand).
    """
    reason = reason.strip()
    if not reason:
        raise errors.InvalidParameter("Give a reason to void a round.")
    now = timezone.now()
    with transaction.atomic():
        campaign = Campaign.objects.select_for_update().get(pk=round_.campaign_id)
        locked = Round.objects.filter(pk=round_.pk, status__in=Round.OPEN).first()
        if locked is None:
            round_.refresh_from_db(fields=["status"])
            raise errors.InvalidParameter(
                f"Only an open round can be voided; this one is {round_.status}."
            )
        who = actor.get_username() if actor is not None and actor.is_authenticated else "system"
        round_void_record(
            locked,
            f"voided by staff: {reason}",
            {**round_facts(locked, campaign), "voided_by": who, "host": locked.host},
            now,
            cause=rules.VOID_STAFF,
        )
        transaction.on_commit(lambda: round_maybe_start_after_commit(campaign.pk))
        audit_record(
            actor=actor,
            action="campaign.round_void",
            target=campaign_target(campaign),
            origin=origin,
            reason=reason,
            details={"round_id": locked.pk, "ordinal": locked.ordinal},
        )
    round_.refresh_from_db()
    return round_


def campaign_pause(
    *,
    campaign: Campaign,
    actor: Any,
    paused: bool = True,
    reason: str = "",
    origin: Origin = NOWHERE,
) -> Campaign:
    """Staff: pause (no new round starts; an open round still runs: void it to stop it)
    or resume a campaign. Audited when it changes anything."""
    with transaction.atomic():
        done = Campaign.objects.filter(pk=campaign.pk).exclude(paused=paused).update(paused=paused)
        if done:
            audit_record(
                actor=actor,
                action="campaign.pause" if paused else "campaign.resume",
                target=campaign_target(campaign),
                origin=origin,
                reason=reason,
            )
    campaign.refresh_from_db(fields=["paused"])
    return campaign
