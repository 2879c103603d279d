"""A round from its start to its report: created, sent, claimed and heartbeated by a
scoring host, or sent back to wait for capacity.

- One round at a time per campaign: a round is created holding the campaign's row lock,
  and the database refuses a second open one (``one_open_round_per_campaign``).
- A round's messages name only the round; the host claims it with :func:`round_claim`.

What the host reports is recorded by ``portal.campaigns.recording``. A line on a
submission's timeline in a campaign: :func:`submission_event`.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from portal.campaigns import rules, selectors
from portal.campaigns.crown import crown_eligible
from portal.campaigns.models import Campaign, Round, RoundEntry
from portal.contests.models import Cohort, CohortItem
from portal.core import jobs
from portal.submissions.models import Submission, SubmissionEvent

log = logging.getLogger(__name__)


def submission_event(submission_id: int, status: str, note: str) -> None:
    """A line on the submission's timeline; its status does not change."""
    SubmissionEvent.objects.create(
        submission_id=submission_id, status=status, at=timezone.now(), note=note
    )


# Starting a round ------------------------------------------------------------------------


def _material(campaign: Campaign) -> str:
    latest = (
        Round.objects.filter(campaign=campaign, status__in=[Round.SCORED, Round.VOID])
        .exclude(evidence_digest="")
        .order_by("-ordinal")
        .values_list("evidence_digest", flat=True)
        .first()
    )
    return latest or rules.GENESIS


def round_maybe_start(
    campaign: Campaign, now: dt.datetime | None = None, *, force: bool = False
) -> Round | None:
    """Create the campaign's next round when the trigger says so, and send it to its class.

    Nothing starts while the campaign is paused, has no baseline image, or has an open
    (pending or running) round, nor without one challenger, nor once its benchmark has
    closed (not even by staff: the crown at the close is the final one). ``force`` (staff: start a
    round now) skips only the trigger. The round is created ``pending`` with its entries
    (the leader, then up to ``max_challengers`` oldest queued), its material and its
    request set, then ``jobs.RUN_ROUND(round_id)`` is sent to the class's queue after
    commit. Holds the campaign's row lock; safe to call from many processes.
    """
    now = now or timezone.now()
    with transaction.atomic():
        campaign = (
            Campaign.objects.select_for_update().select_related("benchmark").get(pk=campaign.pk)
        )
        if campaign.paused or not campaign.has_baseline:
            return None
        if now >= campaign.benchmark.closes_at:
            return None
        if Round.objects.filter(campaign=campaign, status__in=Round.OPEN).exists():
            return None
        crown = crown_eligible(campaign)
        leader_id = crown.submission_id if crown is not None else None
        queued = selectors.queued(campaign, now)
        trigger = rules.trigger_decision(
            queued,
            now,
            count=campaign.trigger_queued,
            wait=dt.timedelta(seconds=campaign.trigger_wait_s),
        )
        if not trigger.start and not force:
            return None
        composition = rules.compose_round(
            leader_id, queued, max_challengers=campaign.max_challengers
        )
        if not composition.challenger_ids:
            return None
        cohort = Cohort.objects.filter(benchmark=campaign.benchmark, kind=Cohort.OFFICIAL).first()
        if cohort is None:
            return None
        material = _material(campaign)
        pool = list(CohortItem.objects.filter(cohort=cohort).values_list("position", flat=True))
        positions = rules.draw_requests(
            rules.round_seed(material, campaign.pk), pool, campaign.round_size
        )
        last = (
            Round.objects.filter(campaign=campaign)
            .order_by("-ordinal")
            .values_list("ordinal", flat=True)
            .first()
        )
        round_ = Round.objects.create(
            campaign=campaign,
            cohort=cohort,
            ordinal=(last or 0) + 1,
            status=Round.PENDING,
            material=material,
            request_positions=positions,
            request_digest=rules.request_digest(positions),
            slice_count=len(rules.slice_bounds(len(positions), campaign.slice_count)),
            created_at=now,
        )
        digests = dict(
            Submission.objects.filter(pk__in=[sid for sid, _ in composition.order]).values_list(
                "pk", "image_digest"
            )
        )
        for position, (submission_id, role) in enumerate(composition.order):
            RoundEntry.objects.create(
                round=round_,
                submission_id=submission_id,
                role=role,
                position=position,
                image_digest=digests[submission_id],
            )
            what = "as the leader" if role == rules.LEADER else "as a challenger"
            status = Submission.PASSED if role == rules.LEADER else Submission.BENCH_QUEUED
            submission_event(submission_id, status, f"in round {round_.ordinal} {what}")
        _send(round_, campaign)
        return round_


def round_maybe_start_after_commit(campaign_id: int) -> None:
    """:func:`round_maybe_start`, by id: run from ``transaction.on_commit``."""
    campaign = Campaign.objects.filter(pk=campaign_id).first()
    if campaign is not None:
        round_maybe_start(campaign)


def _send(round_: Round, campaign: Campaign, countdown: float | None = None) -> None:
    jobs.enqueue(
        jobs.RUN_ROUND,
        round_.pk,
        countdown=countdown,
        queue=jobs.scoring_queue(campaign.hardware_class_id),
    )


# On the scoring host ---------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimedImage:
    entry_id: int | None  # None for the baseline
    submission_id: int | None
    role: str  # leader / challenger / baseline
    position: int
    image_tag: str
    image_digest: str
    image_ref: str  # "" without a registry: the image is local to the host


@dataclass(frozen=True)
class RoundClaim:
    """What a host needs to run a round it claimed.

    Run order: a warm-up pass of ``baseline`` (thrown away), the opening baseline, each
    of ``entries`` in order, the closing baseline; each pass one supervised invocation per
    slice (``slices``: ``[start, end)`` indexes into ``request_positions``, which are
    positions of ``cohort_id``'s items). Echo ``request_digest`` in the outcome.
    """

    round_id: int
    ordinal: int
    campaign_slug: str
    benchmark_id: int
    hardware_class: str
    cohort_id: int
    request_positions: list[int]
    request_digest: str
    slices: list[tuple[int, int]]
    baseline: ClaimedImage
    entries: list[ClaimedImage]
    limits: rules.Limits


def round_claim(round_id: int, host: str, now: dt.datetime | None = None) -> RoundClaim | None:
    """pending -> running on ``host``; what the host needs, or None when the round is not
    pending (already claimed, void, scored, or unknown): then do nothing.

    The round's heartbeat starts now: call :func:`round_heartbeat` while it runs.
    """
    now = now or timezone.now()
    with transaction.atomic():
        done = Round.objects.filter(pk=round_id, status=Round.PENDING).update(
            status=Round.RUNNING, host=host, started_at=now, heartbeat_at=now, next_try_at=None
        )
        if not done:
            return None
        round_ = Round.objects.select_related("campaign__benchmark").get(pk=round_id)
        campaign = round_.campaign
        entries = [
            ClaimedImage(
                entry_id=entry.pk,
                submission_id=entry.submission_id,
                role=entry.role,
                position=entry.position,
                image_tag=entry.submission.image_tag,
                image_digest=entry.image_digest,
                image_ref=entry.submission.image_ref,
            )
            for entry in round_.entries.select_related("submission").order_by("position")
        ]
    positions = [int(position) for position in round_.request_positions]
    return RoundClaim(
        round_id=round_.pk,
        ordinal=round_.ordinal,
        campaign_slug=campaign.slug,
        benchmark_id=campaign.benchmark_id,
        hardware_class=campaign.hardware_class_id,
        cohort_id=round_.cohort_id,
        request_positions=positions,
        request_digest=round_.request_digest,
        slices=rules.slice_bounds(len(positions), round_.slice_count),
        baseline=ClaimedImage(
            entry_id=None,
            submission_id=None,
            role="baseline",
            position=-1,
            image_tag=campaign.baseline_image_tag,
            image_digest=campaign.baseline_image_digest,
            image_ref=campaign.baseline_image_ref,
        ),
        entries=entries,
        limits=campaign_limits(campaign),
    )


def campaign_limits(campaign: Campaign) -> rules.Limits:
    """The campaign's limits (agreement, ceilings, moat), as ``rules.decide_round`` reads
    them, and its slice repeats, as the host runs them."""
    return rules.Limits(
        min_agreement=campaign.min_agreement,
        reproducibility_ceiling=campaign.reproducibility_ceiling,
        drift_ceiling=campaign.drift_ceiling,
        moat=campaign.moat,
        slice_repeats=campaign.slice_repeats,
    )


def round_heartbeat(round_id: int, host: str, now: dt.datetime | None = None) -> bool:
    """The host still runs the round; False when the round is no longer its (void): stop."""
    return bool(
        Round.objects.filter(pk=round_id, status=Round.RUNNING, host=host).update(
            heartbeat_at=now or timezone.now()
        )
    )


def round_wait_for_capacity(
    round_id: int, *, reason: str = "", now: dt.datetime | None = None
) -> dt.datetime | None:
    """No host of the class can run the round now: back to ``pending``, keeping its ordinal,
    entries and request set, and sent again after a backoff doubling from 5 minutes to an
    hour (``tries``, ``next_try_at``). The time of the next try, or None when the round
    was neither pending nor running. Nothing ran, so nothing else changes."""
    now = now or timezone.now()
    with transaction.atomic():
        round_ = (
            Round.objects.select_for_update()
            .select_related("campaign")
            .filter(pk=round_id, status__in=Round.OPEN)
            .first()
        )
        if round_ is None:
            return None
        tries = round_.tries + 1
        next_try_at = now + rules.capacity_backoff(tries)
        Round.objects.filter(pk=round_id).update(
            status=Round.PENDING,
            tries=tries,
            next_try_at=next_try_at,
            host="",
            started_at=None,
            heartbeat_at=None,
        )
        log.info("round %s waits for capacity until %s: %s", round_id, next_try_at, reason)
        _send(round_, round_.campaign, countdown=(next_try_at - now).total_seconds())
        return next_try_at
