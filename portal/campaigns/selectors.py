"""Reads of a campaign for pages and the API: plain dataclasses, no rows leak out.

Everything here is public to anyone who may see the benchmark (an entrant's username, a
round's verdicts and scores, the slice times); the views decide who may. Nothing here
writes. Times are aware datetimes (UTC).

- :func:`campaign_overview`: the crown (or vacant), the queue and what the next round
  waits for, the rounds newest first with their entries.
- :func:`round_entry_report`: one entry's arithmetic, slice by slice, the summary and
  the host's environment readings.
- :func:`waiting_submissions`: the queue itself, and :func:`queued`: it as the rules see
  it (``rounds.round_maybe_start`` composes a round from it).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, F, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from portal.campaigns import rules
from portal.campaigns.models import Campaign, Crown, QueuePlace, Round, RoundEntry
from portal.contests.models import Cohort, CohortItem
from portal.submissions.models import Submission


def campaign_by_slug(slug: str) -> Campaign | None:
    """The campaign of the benchmark ``slug`` (None when there is none)."""
    return Campaign.objects.select_related("benchmark").filter(benchmark__slug=slug).first()


def waiting_submissions(campaign: Campaign) -> QuerySet[Submission]:
    """The campaign's queue: its official submissions ``bench_queued``, not disqualified by
    staff and in no open round, by place (first queued time, ``QueuePlace.since``; the
    latest queued event for one without a place), then id. The leader is never in it (its
    submission is ``passed``); a disqualified entry never enters a round.

    A submission stays ``bench_queued`` while its round is pending or running (a void round
    changes no submission's state); being in an open round takes it out of the queue.
    """
    in_open_round = RoundEntry.objects.filter(
        round__campaign=campaign, round__status__in=Round.OPEN
    ).values("submission_id")
    return (
        Submission.objects.filter(
            benchmark_id=campaign.benchmark_id,
            kind=Submission.OFFICIAL,
            status=Submission.BENCH_QUEUED,
            disqualified_at__isnull=True,
        )
        .exclude(pk__in=in_open_round)
        .order_by(Coalesce(F("queue_place__since"), F("queued_at")).asc(nulls_last=True), "id")
    )


def queued(campaign: Campaign, now: dt.datetime) -> list[rules.Queued]:
    """The queue as the rules see it: each entry's latest queued event (the wait trigger)
    and its place (first queued time)."""
    rows = waiting_submissions(campaign).values("id", "queued_at", "queue_place__since")
    return [
        rules.Queued(row["id"], row["queued_at"] or now, row["queue_place__since"]) for row in rows
    ]


def first_queued_at(submission: Submission) -> dt.datetime | None:
    """Its place in the queue: its first queued time (its latest queued event without one)."""
    try:
        return submission.queue_place.since
    except QueuePlace.DoesNotExist:
        return submission.queued_at


# The overview ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CrownView:
    submission_id: int
    entrant: str
    score: float
    round_id: int
    round_ordinal: int
    since: dt.datetime


@dataclass(frozen=True)
class QueueRow:
    submission_id: int
    entrant: str
    queued_at: dt.datetime | None  # its latest queued event: the wait trigger's clock
    first_queued_at: dt.datetime | None  # its place in the queue
    in_next_round: bool  # among the first max_challengers: it runs in the next round


@dataclass(frozen=True)
class NextRound:
    """What the next round waits for.

    ``blocked``: why no round can start whatever the queue ("paused", "no baseline image",
    "a round is open"), "" otherwise. ``due_at``: when the wait rule starts one (the oldest
    queued event plus the wait), None with nothing queued. ``waits_for``: one sentence.
    """

    blocked: str
    queued: int
    trigger_queued: int
    trigger_wait: dt.timedelta
    due_at: dt.datetime | None
    waits_for: str


@dataclass(frozen=True)
class EntryRow:
    id: int
    submission_id: int
    entrant: str
    role: str  # leader / challenger
    position: int
    verdict: str  # passed / failed_correctness / disqualified / infra_failed / none
    score: float | None
    agreement: float | None
    reason: str


@dataclass(frozen=True)
class RoundRow:
    id: int
    ordinal: int
    status: str  # pending / running / scored / void
    void_reason: str
    void_cause: str  # rules.VOID_CAUSES, "" unless void
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    waiting_for_capacity: bool  # pending after a claim found no host of its class
    tries: int
    next_try_at: dt.datetime | None
    host: str
    request_count: int
    material: str  # the draw's material, published when the round is created
    request_digest: str
    evidence_digest: str
    entries: list[EntryRow] = field(default_factory=list)


@dataclass(frozen=True)
class CampaignOverview:
    slug: str
    title: str
    paused: bool
    has_baseline: bool
    baseline_image_digest: str
    hardware_class: str
    round_size: int
    slice_count: int
    slice_repeats: int
    scoring_rule: str
    moat: float
    drift_ceiling: float
    reproducibility_ceiling: float
    min_agreement: float
    crown: CrownView | None  # None: the crown is vacant
    crown_note: str  # why the crown is vacant (or how its last holder lost it)
    closed: bool  # the benchmark has closed: no round starts, the crown is final
    closes_at: dt.datetime
    campaign_id: int  # with the material and the pool, anyone can redo a round's draw
    pool_size: int  # the official cohort's item count: positions 0 .. pool_size - 1
    leader_void_limit: int
    voids_by_cause: dict[str, int]
    queue: list[QueueRow]
    next_round: NextRound
    rounds: list[RoundRow]  # newest first


def _entry_rows(entries: Any) -> list[EntryRow]:
    return [
        EntryRow(
            id=entry.pk,
            submission_id=entry.submission_id,
            entrant=entry.submission.entrant.get_username(),
            role=entry.role,
            position=entry.position,
            verdict=entry.verdict,
            score=entry.score,
            agreement=entry.agreement,
            reason=entry.reason,
        )
        for entry in entries
    ]


def round_row(round_: Round) -> RoundRow:
    """One round as the pages show it (its entries prefetched or not)."""
    entries = round_.entries.select_related("submission__entrant").order_by("position")
    return RoundRow(
        id=round_.pk,
        ordinal=round_.ordinal,
        status=round_.status,
        void_reason=round_.void_reason,
        void_cause=round_.void_cause,
        created_at=round_.created_at,
        started_at=round_.started_at,
        finished_at=round_.finished_at,
        waiting_for_capacity=round_.status == Round.PENDING and round_.tries > 0,
        tries=round_.tries,
        next_try_at=round_.next_try_at,
        host=round_.host,
        request_count=len(round_.request_positions),
        material=round_.material,
        request_digest=round_.request_digest,
        evidence_digest=round_.evidence_digest,
        entries=_entry_rows(entries),
    )


def next_round(campaign: Campaign, now: dt.datetime | None = None) -> NextRound:
    """What the campaign's next round waits for (see :class:`NextRound`)."""
    now = now or timezone.now()
    wait = dt.timedelta(seconds=campaign.trigger_wait_s)
    waiting = queued(campaign, now)
    trigger = rules.trigger_decision(waiting, now, count=campaign.trigger_queued, wait=wait)
    blocked = ""
    if now >= campaign.benchmark.closes_at:
        blocked = "the campaign has closed"
    elif campaign.paused:
        blocked = "paused"
    elif not campaign.has_baseline:
        blocked = "no baseline image"
    elif Round.objects.filter(campaign=campaign, status__in=Round.OPEN).exists():
        blocked = "a round is open"
    if blocked:
        waits_for = f"No round starts: {blocked}."
    elif not waiting:
        waits_for = "Waiting for a first queued submission."
    elif trigger.start:
        waits_for = "A round starts at the next check."
    else:
        waits_for = (
            f"{len(waiting)} of {campaign.trigger_queued} queued; a round starts when "
            f"{campaign.trigger_queued} are, or at {trigger.due_at:%Y-%m-%d %H:%M} UTC."
        )
    return NextRound(
        blocked=blocked,
        queued=len(waiting),
        trigger_queued=campaign.trigger_queued,
        trigger_wait=wait,
        due_at=trigger.due_at,
        waits_for=waits_for,
    )


def campaign_overview(
    campaign: Campaign, *, now: dt.datetime | None = None, round_limit: int = 20
) -> CampaignOverview:
    """The campaign page: crown, queue, next round and the latest ``round_limit`` rounds."""
    now = now or timezone.now()
    crown_row = (
        Crown.objects.select_related("submission__entrant", "round")
        .filter(campaign=campaign)
        .first()
    )
    crown = None
    if crown_row is not None:
        crown = CrownView(
            submission_id=crown_row.submission_id,
            entrant=crown_row.submission.entrant.get_username(),
            score=crown_row.score,
            round_id=crown_row.round_id,
            round_ordinal=crown_row.round.ordinal,
            since=crown_row.since,
        )
    waiting = list(waiting_submissions(campaign).select_related("entrant", "queue_place"))
    queue = [
        QueueRow(
            submission_id=submission.pk,
            entrant=submission.entrant.get_username(),
            queued_at=submission.queued_at,
            first_queued_at=first_queued_at(submission),
            in_next_round=index < campaign.max_challengers,
        )
        for index, submission in enumerate(waiting)
    ]
    rounds = Round.objects.filter(campaign=campaign).order_by("-ordinal")[:round_limit]
    benchmark = campaign.benchmark
    return CampaignOverview(
        slug=benchmark.slug,
        title=benchmark.title,
        paused=campaign.paused,
        has_baseline=campaign.has_baseline,
        baseline_image_digest=campaign.baseline_image_digest,
        hardware_class=campaign.hardware_class_id,
        round_size=campaign.round_size,
        slice_count=campaign.slice_count,
        slice_repeats=campaign.slice_repeats,
        scoring_rule=campaign.scoring_rule,
        moat=campaign.moat,
        drift_ceiling=campaign.drift_ceiling,
        reproducibility_ceiling=campaign.reproducibility_ceiling,
        min_agreement=campaign.min_agreement,
        crown=crown,
        crown_note=""
        if crown is not None
        else Campaign.objects.filter(pk=campaign.pk).values_list("crown_note", flat=True).get(),
        closed=now >= benchmark.closes_at,
        closes_at=benchmark.closes_at,
        campaign_id=campaign.pk,
        pool_size=CohortItem.objects.filter(
            cohort__benchmark=benchmark, cohort__kind=Cohort.OFFICIAL
        ).count(),
        leader_void_limit=campaign.leader_void_limit,
        voids_by_cause=dict(
            Round.objects.filter(campaign=campaign, status=Round.VOID)
            .values_list("void_cause")
            .annotate(count=Count("pk"))
            .values_list("void_cause", "count")
        ),
        queue=queue,
        next_round=next_round(campaign, now),
        rounds=[round_row(round_) for round_ in rounds],
    )


# One entry's arithmetic ------------------------------------------------------------------


@dataclass(frozen=True)
class ReportRow:
    slice: int
    baseline_s: float | None
    candidate_s: float | None
    speedup: float | None
    matches: int | None
    total: int | None
    reason: str  # why the slice did not score in full; "" when it did


@dataclass(frozen=True)
class ReportSummary:
    slices: int
    slices_scored: int  # slices that scored in full
    # Slices whose own agreement (matches / total) is below the campaign's gate: they earn
    # nothing (min(speedup, 0) in the median), though the entry may still pass.
    slices_under_tolerance: int


@dataclass(frozen=True)
class EntryReport:
    entry: EntryRow
    round: RoundRow
    campaign_slug: str
    score: float | None
    rows: list[ReportRow]
    summary: ReportSummary
    environment: dict[str, Any]  # the host's readings: CPU, cores, cgroup quota, GPU...


def round_entry_report(entry_id: int) -> EntryReport | None:
    """The report of one round entry (None when there is no such entry)."""
    entry = (
        RoundEntry.objects.select_related("round__campaign__benchmark", "submission__entrant")
        .filter(pk=entry_id)
        .first()
    )
    if entry is None:
        return None
    campaign = entry.round.campaign
    rows = [
        ReportRow(
            slice=int(row["slice"]),
            baseline_s=row.get("baseline_s"),
            candidate_s=row.get("candidate_s"),
            speedup=row.get("speedup"),
            matches=row.get("matches"),
            total=row.get("total"),
            reason=str(row.get("reason", "")),
        )
        for row in entry.slices
    ]
    under = sum(
        1
        for row in rows
        if row.total
        and row.matches is not None
        and row.matches / row.total < campaign.min_agreement
    )
    return EntryReport(
        entry=_entry_rows([entry])[0],
        round=round_row(entry.round),
        campaign_slug=campaign.slug,
        score=entry.score,
        rows=rows,
        summary=ReportSummary(
            slices=len(rows),
            slices_scored=sum(1 for row in rows if row.speedup is not None and not row.reason),
            slices_under_tolerance=under,
        ),
        environment=dict(entry.round.evidence.get("environment", {})),
    )


def submission_round_entries(submission_id: int) -> list[tuple[RoundRow, EntryRow]]:
    """Every round a submission ran in (newest first), with its entry there."""
    entries = (
        RoundEntry.objects.select_related("round", "submission__entrant")
        .filter(submission_id=submission_id)
        .order_by("-round__ordinal")
    )
    return [(round_row(entry.round), _entry_rows([entry])[0]) for entry in entries]
