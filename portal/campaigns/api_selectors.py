"""Reads the campaign API and pages need beyond :mod:`portal.campaigns.selectors`.

- :func:`queue_state`: what the next round waits for, as a state and one sentence: an
  open round (running, or pending and waiting for capacity), the campaign's close (no
  round starts; the crown is final), a pause, a missing baseline, or the trigger (so many
  queued, or the oldest queued event so old).
- :func:`campaign_page` / :func:`campaign_pages`: the selector's overview with that state.
- :func:`round_rows`: every round of a campaign, newest first, a page at a time.
- :func:`campaign_submission`: one submission's timeline and its latest round entry.

Plain dataclasses out, like the selectors; the views decide who may read what.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import QuerySet
from django.utils import timezone

from portal.campaigns.models import Campaign, Round
from portal.campaigns.selectors import (
    CampaignOverview,
    EntryRow,
    QueueRow,
    RoundRow,
    campaign_overview,
    round_row,
    submission_round_entries,
)
from portal.submissions.models import Submission

CLOSED = "closed"
RUNNING = "running"
WAITING_FOR_CAPACITY = "waiting_for_capacity"
WAITING_FOR_HOST = "waiting_for_host"
PAUSED = "paused"
NO_BASELINE = "no_baseline"
EMPTY = "empty"
DUE = "due"
WAITING = "waiting"


@dataclass(frozen=True)
class RoundRef:
    id: int
    ordinal: int


@dataclass(frozen=True)
class QueueState:
    """What the next round waits for (``state`` is one of the constants above).

    ``round``: the open round (running or pending), if any; ``next_try_at``: when a round
    waiting for capacity claims again; ``due_at``: when the wait rule starts a round.
    """

    state: str
    explanation: str
    round: RoundRef | None
    hardware_class: str
    next_try_at: dt.datetime | None
    queued: int
    trigger_queued: int
    trigger_wait_s: int
    due_at: dt.datetime | None
    entries: list[QueueRow]  # first queued first


@dataclass(frozen=True)
class CampaignPage:
    overview: CampaignOverview
    queue: QueueState


def duration_words(seconds: int) -> str:
    """21600 -> "6 hours"; 5400 -> "90 minutes"; 45 -> "45 seconds"."""
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds} second{'' if seconds == 1 else 's'}"


def _utc(moment: dt.datetime) -> str:
    return f"{moment.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC"


def _open_round(rounds: list[RoundRow]) -> RoundRow | None:
    return next((row for row in rounds if row.status in Round.OPEN), None)


def queue_state(campaign: Campaign, overview: CampaignOverview, now: dt.datetime) -> QueueState:
    """The queue's state from the overview (no query of its own).

    An open round comes first: a round pending after a claim found no host is waiting for
    capacity (it keeps its ordinal, entries and requests and retries later), not stuck.
    """
    upcoming = overview.next_round
    wait_s = int(upcoming.trigger_wait.total_seconds())
    open_round = _open_round(overview.rounds)
    next_try_at = None
    cls = campaign.hardware_class_id
    if open_round is not None and open_round.status == Round.RUNNING:
        state = RUNNING
        host = f" on {open_round.host}" if open_round.host else ""
        explanation = f"Round {open_round.ordinal} is running{host}."
    elif open_round is not None and open_round.waiting_for_capacity:
        state = WAITING_FOR_CAPACITY
        next_try_at = open_round.next_try_at
        when = f" The next try is at {_utc(next_try_at)}." if next_try_at else ""
        explanation = (
            f"Round {open_round.ordinal} is waiting for capacity: no {cls} host was free "
            f"({open_round.tries} {'try' if open_round.tries == 1 else 'tries'} so far).{when}"
        )
    elif open_round is not None:
        state = WAITING_FOR_HOST
        explanation = f"Round {open_round.ordinal} is waiting for a {cls} host to start it."
    elif overview.closed:
        state = CLOSED
        explanation = (
            f"The campaign closed at {_utc(overview.closes_at)}: no round starts, and the "
            "crown is final."
        )
    elif overview.paused:
        state, explanation = PAUSED, "The campaign is paused: no round starts."
    elif not overview.has_baseline:
        state = NO_BASELINE
        explanation = "No round starts until the baseline image is recorded."
    elif upcoming.queued == 0:
        state = EMPTY
        explanation = "Nothing is queued: a round needs at least one challenger."
    elif upcoming.queued >= upcoming.trigger_queued or (
        upcoming.due_at is not None and upcoming.due_at <= now
    ):
        state = DUE
        explanation = f"{upcoming.queued} queued: the next round starts at the next check."
    else:
        state = WAITING
        due = f" (at {_utc(upcoming.due_at)})" if upcoming.due_at else ""
        explanation = (
            f"{upcoming.queued} of {upcoming.trigger_queued} queued. The next round starts "
            f"when {upcoming.trigger_queued} are queued, or when the oldest queued event is "
            f"{duration_words(wait_s)} old{due}."
        )
    return QueueState(
        state=state,
        explanation=explanation,
        round=RoundRef(open_round.id, open_round.ordinal) if open_round else None,
        hardware_class=cls,
        next_try_at=next_try_at,
        queued=upcoming.queued,
        trigger_queued=upcoming.trigger_queued,
        trigger_wait_s=wait_s,
        due_at=upcoming.due_at,
        entries=list(overview.queue),
    )


def campaigns() -> QuerySet[Campaign]:
    return Campaign.objects.select_related("benchmark").order_by("benchmark__slug")


def campaign_page(campaign: Campaign, *, round_limit: int = 20) -> CampaignPage:
    """The overview (crown, queue, the latest ``round_limit`` rounds) with the queue state."""
    now = timezone.now()
    overview = campaign_overview(campaign, now=now, round_limit=round_limit)
    return CampaignPage(overview=overview, queue=queue_state(campaign, overview, now))


def campaign_pages(*, round_limit: int = 20) -> list[CampaignPage]:
    """Every campaign's page, by slug (staff create campaigns: a short list)."""
    return [campaign_page(campaign, round_limit=round_limit) for campaign in campaigns()]


def round_queryset(campaign: Campaign) -> QuerySet[Round]:
    """Every round of the campaign, newest first (the ordinal is unique per campaign)."""
    return Round.objects.filter(campaign=campaign).order_by("-ordinal")


def round_rows(rounds: list[Round]) -> list[RoundRow]:
    """Rows of one page of :func:`round_queryset`."""
    return [round_row(round_) for round_ in rounds]


@dataclass(frozen=True)
class LatestEntry:
    """A submission's entry in the latest round it ran in, with that round."""

    round: RoundRow
    id: int
    submission_id: int
    entrant: str
    role: str
    position: int
    verdict: str
    score: float | None
    agreement: float | None
    reason: str


@dataclass(frozen=True)
class TimelineEvent:
    status: str
    at: dt.datetime
    note: str


@dataclass(frozen=True)
class CampaignSubmission:
    id: int
    campaign: str
    kind: str
    status: str
    submitted_at: dt.datetime
    failure_reason: str
    timeline: list[TimelineEvent]
    entry: LatestEntry | None


def _latest(entry: EntryRow, round_: RoundRow) -> LatestEntry:
    return LatestEntry(
        round=round_,
        id=entry.id,
        submission_id=entry.submission_id,
        entrant=entry.entrant,
        role=entry.role,
        position=entry.position,
        verdict=entry.verdict,
        score=entry.score,
        agreement=entry.agreement,
        reason=entry.reason,
    )


def campaign_submission(campaign: Campaign, submission: Submission) -> CampaignSubmission:
    """The submission's timeline (oldest first) and its latest round entry, if it ran."""
    events = submission.events.order_by("at", "id")
    ran = submission_round_entries(submission.pk)
    return CampaignSubmission(
        id=submission.pk,
        campaign=campaign.slug,
        kind=submission.kind,
        status=submission.status,
        submitted_at=submission.submitted_at,
        failure_reason=submission.failure_reason,
        timeline=[TimelineEvent(event.status, event.at, event.note) for event in events],
        entry=_latest(ran[0][1], ran[0][0]) if ran else None,
    )
