"""The crown: the leader of a campaign, and when it is vacant.

After a scored round the crown goes as ``rules.decide_round`` says (:func:`crown_apply`).
A leader staff disqualified loses it at once (``queue.campaign_entry_disqualified``); one
that may no longer run for another reason loses it when the next round starts
(:func:`crown_eligible`); one whose own entry voided ``leader_void_limit`` rounds in a row
loses it (``rules.leader_void_streak``, :func:`crown_count_leader_void`). A vacant crown
keeps a note saying why (``Campaign.crown_note``, :func:`crown_vacate`). The leader's
submission stays ``passed`` whatever happens to the crown.
"""

from __future__ import annotations

import datetime as dt
import logging

from portal.audit.services import NOWHERE, audit_record
from portal.campaigns import rules
from portal.campaigns.creation import campaign_target
from portal.campaigns.models import Campaign, Crown, Round
from portal.submissions.models import Submission

log = logging.getLogger(__name__)


def crown_vacate(campaign_id: int, note: str) -> None:
    """The crown is vacant, and the page says why."""
    Crown.objects.filter(campaign_id=campaign_id).delete()
    Campaign.objects.filter(pk=campaign_id).update(crown_note=note)


def crown_eligible(campaign: Campaign) -> Crown | None:
    """The crown, if its submission may still run: a leader staff disqualified (or whose
    submission is no longer ``passed``) loses the crown here, which is then vacant."""
    crown = Crown.objects.select_related("submission").filter(campaign=campaign).first()
    if crown is None:
        return None
    submission = crown.submission
    if submission.status == Submission.PASSED and submission.disqualified_at is None:
        return crown
    log.info("campaign %s: leader %s is no longer eligible", campaign.slug, submission.pk)
    crown_vacate(
        campaign.pk,
        f"The crown is vacant: its leader, submission {submission.pk}, may no longer run.",
    )
    return None


def crown_apply(
    campaign: Campaign, round_: Round, change: rules.CrownChange, now: dt.datetime
) -> None:
    """The crown after a scored round; a leader that ran clean starts its void count
    again, and the page's note says why a crown went vacant."""
    current = Crown.objects.filter(campaign=campaign).first()
    if change.holder is None or change.score is None:
        if current is not None:
            crown_vacate(
                campaign.pk,
                f"The crown is vacant: its leader, submission {current.submission_id}, "
                f"failed correctness or scored 0 or less in round {round_.ordinal}, and no "
                "challenger took it.",
            )
        return
    Campaign.objects.filter(pk=campaign.pk).update(crown_note="")
    if current is not None and current.submission_id == change.holder:
        current.score = change.score
        current.round = round_
        current.own_voids = 0
        current.save(update_fields=["score", "round", "own_voids"])
        return
    if current is not None:
        current.delete()
    Crown.objects.create(
        campaign=campaign, submission_id=change.holder, score=change.score, round=round_, since=now
    )


def crown_count_leader_void(
    campaign: Campaign, round_: Round, decision: rules.RoundDecision, leader_id: int | None
) -> None:
    """After a void: the leader's count of voids it caused in a row; at the campaign's
    ``leader_void_limit`` it loses the crown (audited, and the page says why)."""
    crown = Crown.objects.select_for_update().filter(campaign=campaign).first()
    if crown is None or crown.submission_id != leader_id:
        return
    streak = rules.leader_void_streak(crown.own_voids, decision, leader_id)
    if streak < campaign.leader_void_limit:
        Crown.objects.filter(pk=crown.pk).update(own_voids=streak)
        return
    why = (
        f"its leader, submission {leader_id}, voided {streak} rounds in a row by its own "
        f"entry (the limit is {campaign.leader_void_limit}); the last, round "
        f"{round_.ordinal}: {decision.void_reason}"
    )
    crown_vacate(campaign.pk, f"The crown is vacant: {why}.")
    audit_record(
        actor=None,
        action="campaign.crown_vacated",
        target=campaign_target(campaign),
        origin=NOWHERE,
        reason=why,
        details={"round_id": round_.pk, "submission_id": leader_id},
    )
    log.info("campaign %s: %s", campaign.slug, why)
