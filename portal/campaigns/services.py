"""Campaign writes: queueing built submissions, starting, claiming, recording and voiding
rounds, the crown, and staff controls.

Rules of the road (as in ``portal.submissions.services``):

- Every state change is a conditional update (or runs holding the campaign's row lock),
  so a redelivered task or a second caller does nothing twice.
- One round at a time per campaign: a round is created holding the campaign's row lock,
  and the database refuses a second open one (``one_open_round_per_campaign``).
- A round's messages name only the round; the host claims it with :func:`round_claim`.

Submission states in a campaign (official submissions; practice ones take the ordinary
timed path on the practice cohort):

``accepted -> building -> bench_queued`` (or ``duplicate_image``, refunded). In a
scored round a challenger ends ``passed`` (it passed the gate, scored or not, crowned or
not), ``failed`` (failed correctness: the attempt counts), ``errored`` (disqualified: its
own process died; the reason says so), or on a platform fault (``infra_failed`` entry)
is queued again once, and ends ``infra_failed`` with its attempt refunded the second
time. The leader's submission stays ``passed`` whatever happens to the crown: each of its
rounds adds a line to its timeline. A void round changes no submission's status: its
challengers get a new queued event (their wait starts again) and keep their place in the
queue (``QueuePlace``: their first queued time), except a challenger whose own entry
caused the void, which goes to the back; the leader keeps the crown unless its own entry
voided ``leader_void_limit`` rounds in a row (``rules.leader_void_streak``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal import errors, jobs
from portal.audit.services import NOWHERE, Origin, audit_record
from portal.campaigns import rules, selectors
from portal.campaigns.models import Campaign, Crown, QueuePlace, Round, RoundEntry
from portal.campaigns.outcomes import RoundOutcome
from portal.contests.models import Benchmark, Cohort, CohortItem
from portal.submissions.models import Submission, SubmissionEvent
from portal.submissions.services import attempt_refund, submission_transition

log = logging.getLogger(__name__)

# A pending round whose try was due this long ago and that no host claimed: no host of its
# class took the message, so it waits for capacity (backoff) and is sent again.
CLAIM_GRACE = dt.timedelta(minutes=5)
# A running round whose host has not called round_heartbeat for this long is void.
HEARTBEAT_STALE = dt.timedelta(minutes=15)
# Statuses of a submission whose image counts as already entered: a later submission of
# the same image is a duplicate. (An image that never got a verdict, infra_failed or
# cancelled, may come again.)
ENTERED = (Submission.BENCH_QUEUED, Submission.PASSED, Submission.FAILED, Submission.ERRORED)
DUPLICATE_IMAGE = "duplicate_image"
STALE_HEARTBEAT = "the scoring host's heartbeat went stale"


def _event(submission_id: int, status: str, note: str) -> None:
    SubmissionEvent.objects.create(
        submission_id=submission_id, status=status, at=timezone.now(), note=note
    )


def _requeue(submission_id: int, note: str, now: dt.datetime, *, lose_place: bool = False) -> bool:
    """A new queued event for a ``bench_queued`` submission: its wait starts again. It
    keeps its place in the queue (its first queued time) unless ``lose_place``."""
    done = Submission.objects.filter(pk=submission_id, status=Submission.BENCH_QUEUED).update(
        queued_at=now
    )
    if done:
        if lose_place:
            QueuePlace.objects.update_or_create(
                submission_id=submission_id, defaults={"since": now}
            )
        _event(submission_id, Submission.BENCH_QUEUED, note)
    return bool(done)


def _vacate(campaign_id: int, note: str) -> None:
    """The crown is vacant, and the page says why."""
    Crown.objects.filter(campaign_id=campaign_id).delete()
    Campaign.objects.filter(pk=campaign_id).update(crown_note=note)


# Setting a campaign up -------------------------------------------------------------------


def campaign_create(*, benchmark: Benchmark, **settings: Any) -> Campaign:
    """The campaign of a ``campaign`` benchmark, on its official cohort and hardware class.

    ``settings``: any of the campaign's fields (round_size, slice_count, ceilings...).
    Refuses a leaderboard benchmark. No round starts before the benchmark has an official
    cohort (the request pool) and the campaign a baseline image.
    """
    if benchmark.kind != Benchmark.CAMPAIGN:
        raise errors.InvalidParameter("Only a benchmark of kind 'campaign' has a campaign.")
    return Campaign.objects.create(
        benchmark=benchmark, hardware_class=benchmark.hardware_class, **settings
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


# Queueing --------------------------------------------------------------------------------


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
                target=_target(round_.campaign),
                origin=origin,
                reason=reason,
                details={"round_id": round_.pk, "submission_id": submission.pk},
            )
            if not round_.entries.filter(role=RoundEntry.CHALLENGER).exists():
                why = f"no challenger left: submission {submission.pk} was disqualified"
                _void(
                    round_,
                    f"voided by staff: {why}",
                    {**_round_facts(round_, round_.campaign), "host": round_.host},
                    now,
                    cause=rules.VOID_STAFF,
                )
                audit_record(
                    actor=actor,
                    action="campaign.round_void",
                    target=_target(round_.campaign),
                    origin=origin,
                    reason=why,
                    details={"round_id": round_.pk, "ordinal": round_.ordinal},
                )
        crown = Crown.objects.select_for_update().filter(submission=submission).first()
        if crown is None:
            return False
        campaign_id = crown.campaign_id
        why = f"its leader, submission {submission.pk}, was disqualified: {reason}"
        _vacate(campaign_id, f"The crown is vacant: {why}.")
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
    row lock. Called by ``submissions.services.submission_build_finished``, inside its
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
            transaction.on_commit(lambda: _maybe_start_after_commit(campaign.pk))
        return True


def _maybe_start_after_commit(campaign_id: int) -> None:
    campaign = Campaign.objects.filter(pk=campaign_id).first()
    if campaign is not None:
        round_maybe_start(campaign)


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


# Starting a round ------------------------------------------------------------------------


def _leader(campaign: Campaign) -> Crown | None:
    """The crown, if its submission may still run: a leader staff disqualified (or whose
    submission is no longer ``passed``) loses the crown here, which is then vacant."""
    crown = Crown.objects.select_related("submission").filter(campaign=campaign).first()
    if crown is None:
        return None
    submission = crown.submission
    if submission.status == Submission.PASSED and submission.disqualified_at is None:
        return crown
    log.info("campaign %s: leader %s is no longer eligible", campaign.slug, submission.pk)
    _vacate(
        campaign.pk,
        f"The crown is vacant: its leader, submission {submission.pk}, may no longer run.",
    )
    return None


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
        crown = _leader(campaign)
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
            _event(submission_id, status, f"in round {round_.ordinal} {what}")
        _send(round_, campaign)
        return round_


def _send(round_: Round, campaign: Campaign, countdown: float | None = None) -> None:
    jobs.enqueue(
        jobs.RUN_ROUND,
        round_.pk,
        countdown=countdown,
        queue=jobs.scoring_queue(campaign.hardware_class),
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
        hardware_class=campaign.hardware_class,
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
        limits=_limits(campaign),
    )


def _limits(campaign: Campaign) -> rules.Limits:
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


# Recording a round -----------------------------------------------------------------------


def _round_facts(round_: Round, campaign: Campaign) -> dict[str, Any]:
    return {
        "campaign": campaign.slug,
        "campaign_id": campaign.pk,
        "round_id": round_.pk,
        "ordinal": round_.ordinal,
        "cohort_id": round_.cohort_id,
        "material": round_.material,
        "request_positions": list(round_.request_positions),
        "request_digest": round_.request_digest,
        "slices": [
            list(bounds)
            for bounds in rules.slice_bounds(len(round_.request_positions), round_.slice_count)
        ],
        "baseline_image_digest": campaign.baseline_image_digest,
        "scoring_rule": campaign.scoring_rule,
        "limits": dataclasses.asdict(_limits(campaign)),
    }


def _finish(
    round_: Round,
    *,
    status: str,
    void_reason: str,
    evidence: dict[str, Any],
    cause: str = "",
    void_by: tuple[int, ...] = (),
) -> None:
    evidence = {
        **evidence,
        "status": status,
        "void_reason": void_reason,
        "void_cause": cause,
        "void_by": list(void_by),
    }
    Round.objects.filter(pk=round_.pk).update(
        status=status,
        void_reason=void_reason,
        void_cause=cause,
        void_by=list(void_by),
        finished_at=timezone.now(),
        evidence=evidence,
        evidence_digest=rules.evidence_digest(evidence),
        next_try_at=None,
    )


def _void(
    round_: Round,
    reason: str,
    evidence: dict[str, Any],
    now: dt.datetime,
    *,
    cause: str,
    void_by: tuple[int, ...] = (),
) -> None:
    """Void: record why and who caused it, requeue the challengers (a new queued event;
    a challenger whose own entry caused the void loses its place), change nothing else."""
    _finish(
        round_,
        status=Round.VOID,
        void_reason=reason,
        evidence=evidence,
        cause=cause,
        void_by=void_by,
    )
    for entry in round_.entries.all():
        if entry.role == RoundEntry.CHALLENGER:
            own = entry.submission_id in void_by
            _requeue(
                entry.submission_id,
                f"round {round_.ordinal} was void ({reason}); queued again"
                + (", at the back: its own entry caused the void" if own else ""),
                now,
                lose_place=own,
            )


def _count_leader_void(
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
    _vacate(campaign.pk, f"The crown is vacant: {why}.")
    audit_record(
        actor=None,
        action="campaign.crown_vacated",
        target=_target(campaign),
        origin=NOWHERE,
        reason=why,
        details={"round_id": round_.pk, "submission_id": leader_id},
    )
    log.info("campaign %s: %s", campaign.slug, why)


def round_record(outcome: RoundOutcome, now: dt.datetime | None = None) -> bool:
    """Record what the host saw: verdicts, scores and the crown, or a void. Once.

    Only a ``running`` round claimed by ``outcome.host`` is recorded (False otherwise:
    a staff void or a stale heartbeat got there first). The judgement is
    ``rules.decide_round``. The evidence (the round's facts, every run's per-slice times,
    the host's environment, the verdicts, the crown change) and its digest are stored on
    the round; the digest is the next round's material. Submission states: see the
    module docstring. Holds the campaign's row lock, so the crown moves one round at a time.
    """
    now = now or timezone.now()
    with transaction.atomic():
        campaign_id = (
            Round.objects.filter(pk=outcome.round_id).values_list("campaign_id", flat=True).first()
        )
        if campaign_id is None:
            return False
        campaign = (
            Campaign.objects.select_for_update().select_related("benchmark").get(pk=campaign_id)
        )
        round_ = Round.objects.filter(
            pk=outcome.round_id, status=Round.RUNNING, host=outcome.host
        ).first()
        if round_ is None:
            return False
        entries = list(round_.entries.order_by("position"))
        planned = [
            rules.PlannedEntry(
                entry_id=entry.pk,
                submission_id=entry.submission_id,
                role=entry.role,
                position=entry.position,
                image_digest=entry.image_digest,
            )
            for entry in entries
        ]
        bounds = rules.slice_bounds(len(round_.request_positions), round_.slice_count)
        excluded = frozenset(
            Submission.objects.filter(
                pk__in=[entry.submission_id for entry in entries], disqualified_at__isnull=False
            ).values_list("pk", flat=True)
        )
        decision = rules.decide_round(
            outcome,
            planned=planned,
            request_digest=round_.request_digest,
            baseline_digest=campaign.baseline_image_digest,
            slice_totals=[end - start for start, end in bounds],
            limits=_limits(campaign),
            excluded=excluded,
        )
        for entry in entries:
            result = decision.entries[entry.pk]
            entry.verdict = result.verdict
            entry.score = result.score
            entry.agreement = result.agreement
            entry.reason = result.reason
            entry.slices = result.slices
            entry.save(update_fields=["verdict", "score", "agreement", "reason", "slices"])
        evidence = {
            **_round_facts(round_, campaign),
            "host": outcome.host,
            "outcome": dataclasses.asdict(outcome),
            "environment": dict(outcome.environment),
            "baseline": {
                "opening": dataclasses.asdict(decision.baseline_open),
                "closing": dataclasses.asdict(decision.baseline_close),
                "drift": decision.drift,
            },
            "verdicts": [
                {
                    "entry_id": entry.pk,
                    "submission_id": entry.submission_id,
                    "role": entry.role,
                    "position": entry.position,
                    "image_digest": entry.image_digest,
                    "verdict": entry.verdict,
                    "score": entry.score,
                    "agreement": entry.agreement,
                    "reason": entry.reason,
                }
                for entry in entries
            ],
            "crown": dataclasses.asdict(decision.crown) if decision.crown else None,
        }
        transaction.on_commit(lambda: _maybe_start_after_commit(campaign.pk))
        leader_id = next((e.submission_id for e in entries if e.role == RoundEntry.LEADER), None)
        if decision.void_reason:
            _void(
                round_,
                decision.void_reason,
                evidence,
                now,
                cause=decision.void_cause,
                void_by=decision.void_by,
            )
            _count_leader_void(campaign, round_, decision, leader_id)
            return True
        _finish(round_, status=Round.SCORED, void_reason="", evidence=evidence)
        if decision.crown is not None:
            _crown_apply(campaign, round_, decision.crown, now)
        for entry in entries:
            if entry.submission_id in excluded:
                _event(
                    entry.submission_id,
                    Submission.objects.get(pk=entry.submission_id).status,
                    f"round {round_.ordinal}: {rules.STAFF_DISQUALIFIED}; no verdict counts",
                )
                continue
            _settle(entry, round_, decision.crown, now)
        return True


def _crown_apply(
    campaign: Campaign, round_: Round, change: rules.CrownChange, now: dt.datetime
) -> None:
    """The crown after a scored round; a leader that ran clean starts its void count
    again, and the page's note says why a crown went vacant."""
    current = Crown.objects.filter(campaign=campaign).first()
    if change.holder is None or change.score is None:
        if current is not None:
            _vacate(
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


def _settle(
    entry: RoundEntry, round_: Round, crown: rules.CrownChange | None, now: dt.datetime
) -> None:
    """An entry's submission after a scored round (module docstring)."""
    label = f"round {round_.ordinal}"
    crowned = crown is not None and crown.holder == entry.submission_id
    score = f"score {entry.score:+.4f}" if entry.score is not None else "no score"
    if entry.role == RoundEntry.LEADER:
        kept = "kept the crown" if crowned else "lost the crown"
        _event(
            entry.submission_id,
            Submission.PASSED,
            f"{label}: leader, {entry.verdict}, {score}; "
            f"{kept}" + (f" ({entry.reason})" if entry.reason else ""),
        )
        return
    frm = [Submission.BENCH_QUEUED]
    if entry.verdict == RoundEntry.PASSED:
        took = "took the crown" if crowned else "did not take the crown"
        submission_transition(
            entry.submission_id, frm=frm, to=Submission.PASSED, note=f"{label}: {score}; {took}"
        )
    elif entry.verdict == RoundEntry.FAILED_CORRECTNESS:
        submission_transition(
            entry.submission_id,
            frm=frm,
            to=Submission.FAILED,
            note=f"{label}: failed correctness",
            failure_reason=f"Failed correctness in {label}: {entry.reason}",
        )
    elif entry.verdict == RoundEntry.DISQUALIFIED:
        submission_transition(
            entry.submission_id,
            frm=frm,
            to=Submission.ERRORED,
            note=f"{label}: disqualified",
            failure_reason=f"Disqualified in {label}: {entry.reason}",
        )
    elif entry.verdict == RoundEntry.INFRA_FAILED:
        _infra_failed(entry, label, now)


def _infra_failed(entry: RoundEntry, label: str, now: dt.datetime) -> None:
    """Requeued once; the second infra_failed entry (in scored rounds) ends it, refunded."""
    earlier = (
        RoundEntry.objects.filter(
            submission_id=entry.submission_id,
            verdict=RoundEntry.INFRA_FAILED,
            round__status=Round.SCORED,
        )
        .exclude(pk=entry.pk)
        .exists()
    )
    if not earlier:
        _requeue(entry.submission_id, f"{label}: infra_failed ({entry.reason}); queued again", now)
        return
    submission = Submission.objects.get(pk=entry.submission_id)
    if submission_transition(
        submission.pk,
        frm=[Submission.BENCH_QUEUED],
        to=Submission.INFRA_FAILED,
        note=f"{label}: infra_failed again, attempt refunded",
        failure_reason=(
            f"The platform could not score this image twice ({entry.reason}); "
            "the attempt was refunded."
        ),
    ):
        attempt_refund(submission=submission, reason=f"platform failure in {label}")


# Staff controls and the sweep ------------------------------------------------------------


def _target(campaign: Campaign) -> str:
    return f"campaign:{campaign.slug}"


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
            target=_target(campaign),
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
        _void(
            locked,
            f"voided by staff: {reason}",
            {**_round_facts(locked, campaign), "voided_by": who, "host": locked.host},
            now,
            cause=rules.VOID_STAFF,
        )
        transaction.on_commit(lambda: _maybe_start_after_commit(campaign.pk))
        audit_record(
            actor=actor,
            action="campaign.round_void",
            target=_target(campaign),
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
                target=_target(campaign),
                origin=origin,
                reason=reason,
            )
    campaign.refresh_from_db(fields=["paused"])
    return campaign


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
            _void(
                round_,
                STALE_HEARTBEAT,
                {**_round_facts(round_, round_.campaign), "host": round_.host},
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
