"""A submission entering and leaving a campaign: the hooks the submissions floor calls
(registered by ``portal/campaigns/apps.py``).

:func:`campaign_entry_queue`: a built submission collapses with its duplicates (see
:data:`ENTERED`), takes its place in the queue (``QueuePlace``) and may start a round.
:func:`campaign_entry_disqualified`: staff disqualified a submission; it leaves the
queue, any pending round and the crown at once.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.campaigns import rules
from portal.campaigns.creation import campaign_target
from portal.campaigns.crown import crown_vacate
from portal.campaigns.models import Campaign, Crown, QueuePlace, Round, RoundEntry
from portal.campaigns.recording import round_facts, round_void_record
from portal.campaigns.rounds import round_maybe_start_after_commit
from portal.submissions.attempts import attempt_refund
from portal.submissions.models import Submission
from portal.submissions.services import submission_transition

log = logging.getLogger(__name__)

# Statuses of a submission whose image counts as already entered: a later submission of
# the same image is a duplicate. (An image that never got a verdict, infra_failed or
# cancelled, may come again.)
ENTERED = (Submission.BENCH_QUEUED, Submission.PASSED, Submission.FAILED, Submission.ERRORED)
DUPLICATE_IMAGE = "duplicate_image"


def campaign_entry_queue(submission: Submission) -> bool:
    """A campaign submission that just became ``bench_queued``: collapse duplicates, give
    it its place in the queue, then maybe start a round. True when it stays queued.

    Duplicates are judged on content: the same source archive (``source_sha256``) built in
    the same environment image (``environment_image_digest``) is the same image, whatever
    digest the build's commit gave it. Copies collapse to the earliest submitted
    (``submitted_at``, then id) among those entered (see :data:`ENTERED`). Once an image
    has run in a round, or is already queued from an earlier submission, a later copy is
    refused. A copy queued before an *earlier* submission of the same image finished
    building (and that has not run) is refused in its favour. A refused submission ends
    ``duplicate_image`` and its attempt is refunded (it never ran). Holds the campaign's
    row lock. Called by ``submissions.builds.submission_build_finished``, inside its
    transaction.
    """
    with transaction.atomic():
        campaign = (
            Campaign.objects.select_for_update()
            .filter(benchmark_id=submission.benchmark_id)
            .first()
        )
        submission = Submission.objects.get(pk=submission.pk)
        if submission.status != Submission.BENCH_QUEUED:
            return False
        same = list(
            Submission.objects.filter(
                benchmark_id=submission.benchmark_id,
                kind=Submission.OFFICIAL,
                source_sha256=submission.source_sha256,
                environment_image_digest=submission.environment_image_digest,
                status__in=ENTERED,
            )
            .exclude(pk=submission.pk)
            .order_by("submitted_at", "id")
        )
        content_known = bool(submission.source_sha256 and submission.environment_image_digest)
        if content_known and same:
            ran = set(
                RoundEntry.objects.filter(submission__in=same).values_list(
                    "submission_id", flat=True
                )
            )
            key = (submission.submitted_at, submission.pk)
            blockers = [
                other
                for other in same
                if (other.submitted_at, other.pk) < key
                or other.pk in ran
                or other.status != Submission.BENCH_QUEUED
            ]
            if blockers:
                _reject_duplicate(submission, original=blockers[0])
                return False
            for later in same:  # queued, never ran, submitted after this one
                _reject_duplicate(later, original=submission)
        QueuePlace.objects.get_or_create(
            submission=submission, defaults={"since": submission.queued_at or timezone.now()}
        )
        if campaign is not None:
            transaction.on_commit(lambda: round_maybe_start_after_commit(campaign.pk))
        return True


def _reject_duplicate(submission: Submission, *, original: Submission) -> None:
    reason = (
        f"{DUPLICATE_IMAGE}: the same source archive, built in the same environment image, "
        f"as submission #{original.pk}, which was entered first; the attempt was refunded."
    )
    if submission_transition(
        submission.pk,
        frm=[Submission.BENCH_QUEUED],
        to=Submission.DUPLICATE_IMAGE,
        note=f"the same image as submission #{original.pk}",
        failure_reason=reason,
    ):
        attempt_refund(submission=submission, reason=f"duplicate image of #{original.pk}")


def campaign_entry_disqualified(
    submission: Submission, *, actor: Any, reason: str, origin: Origin = NOWHERE
) -> bool:
    """Staff disqualified ``submission``: it is out of the campaign at once.

    Holding the crown, the crown is vacant now (audited as ``campaign.crown_vacated``; the
    page says why), not at the next round's start. In a round that has not started (pending)
    its entry is removed, and a round left with no challenger is void (audited as
    ``campaign.round_void``). In a running round it still runs, but ``round_record`` gives
    it no verdict but disqualified and no crown. Queued, it never enters a round
    (``waiting_submissions``). Whether it held the crown.
    """
    now = timezone.now()
    with transaction.atomic():
        for entry in RoundEntry.objects.select_for_update().filter(
            submission=submission, round__status=Round.PENDING
        ):
            round_ = Round.objects.select_related("campaign").get(pk=entry.round_id)
            entry.delete()
            audit_record(
                actor=actor,
                action="campaign.entry_removed",
                target=campaign_target(round_.campaign),
                origin=origin,
                reason=reason,
                details={"round_id": round_.pk, "submission_id": submission.pk},
            )
            if not round_.entries.filter(role=RoundEntry.CHALLENGER).exists():
                why = f"no challenger left: submission {submission.pk} was disqualified"
                round_void_record(
                    round_,
                    f"voided by staff: {why}",
                    {**round_facts(round_, round_.campaign), "host": round_.host},
                    now,
                    cause=rules.VOID_STAFF,
                )
                audit_record(
                    actor=actor,
                    action="campaign.round_void",
                    target=campaign_target(round_.campaign),
                    origin=origin,
                    reason=why,
                    details={"round_id": round_.pk, "ordinal": round_.ordinal},
                )
        crown = Crown.objects.select_for_update().filter(submission=submission).first()
        if crown is None:
            return False
        campaign_id = crown.campaign_id
        why = f"its leader, submission {submission.pk}, was disqualified: {reason}"
        crown_vacate(campaign_id, f"The crown is vacant: {why}.")
        audit_record(
            actor=actor,
            action="campaign.crown_vacated",
            target=f"campaign:{campaign_id}",
            origin=origin,
            reason=why,
        )
    log.info(
        "campaign %s: the crown is vacant (leader %s disqualified)", campaign_id, submission.pk
    )
    return True
