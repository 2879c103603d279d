"""Setting a campaign up: the campaign of a ``campaign`` benchmark, its baseline image
(pinned once, audited), and the name the audit log gives a campaign
(:func:`campaign_target`)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.campaigns.models import Campaign, Round
from portal.contests.models import Benchmark
from portal.core import errors


def campaign_target(campaign: Campaign) -> str:
    """The audit log's name of a campaign (an audit event's ``target``)."""
    return f"campaign:{campaign.slug}"


def campaign_create(*, benchmark: Benchmark, **settings: Any) -> Campaign:
    """The campaign of a ``campaign`` benchmark, on its official cohort and hardware class.

    ``settings``: any of the campaign's fields (round_size, slice_count, ceilings...).
    Refuses a leaderboard benchmark. No round starts before the benchmark has an official
    cohort (the request pool) and the campaign a baseline image.
    """
    if benchmark.kind != Benchmark.CAMPAIGN:
        raise errors.InvalidParameter("Only a benchmark of kind 'campaign' has a campaign.")
    return Campaign.objects.create(
        benchmark=benchmark, hardware_class_id=benchmark.hardware_class_id, **settings
    )


def campaign_baseline_record(
    *,
    campaign: Campaign,
    image_tag: str,
    image_digest: str,
    image_ref: str = "",
    actor: Any = None,
    origin: Origin = NOWHERE,
) -> Campaign:
    """Pin the baseline image (the starter kit's, built once). Audited.

    Refused once a round has been created: every round of a campaign runs against the
    same baseline image.
    """
    if not image_digest:
        raise errors.InvalidParameter("A baseline needs its image digest.")
    with transaction.atomic():
        campaign = Campaign.objects.select_for_update().get(pk=campaign.pk)
        if campaign.baseline_image_digest == image_digest:
            return campaign
        if Round.objects.filter(campaign=campaign).exists():
            raise errors.InvalidParameter(
                "This campaign has rounds; its baseline image cannot change."
            )
        campaign.baseline_image_tag = image_tag
        campaign.baseline_image_digest = image_digest
        campaign.baseline_image_ref = image_ref
        campaign.baseline_recorded_at = timezone.now()
        campaign.save(
            update_fields=[
                "baseline_image_tag",
                "baseline_image_digest",
                "baseline_image_ref",
                "baseline_recorded_at",
            ]
        )
        audit_record(
            actor=actor,
            action="campaign.baseline",
            target=f"campaign:{campaign.slug}",
            origin=origin,
            details={"image_tag": image_tag, "image_digest": image_digest, "image_ref": image_ref},
        )
    return campaign
