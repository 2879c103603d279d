"""Campaigns (``/api/v1/campaigns/``, ``/api/v1/rounds/<id>/entries/<id>/report``): the
crown, the queue and the rounds; an entry's report; a campaign submission's timeline and
build log.

Campaigns, rounds and reports are public, like the leaderboard: anyone reads them without
signing in (the score's arithmetic is public). A submission's timeline and build log under
the campaign path are its entrant's, as under ``/submissions/``: another entrant's is
``not_found``, staff read any.

Views and their serializers (``portal.campaigns.selectors``' dataclasses in). A score is
never shown without the round it is from: the crown carries its round, an entry sits inside
its round, a report names its round. Nothing here reaches a round's request set, per-image
answers or the round's raw evidence: a report gives per-slice times and the host's
environment readings only. Empty reasons are ``null``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.common import (
    NOT_FOUND,
    TAIL_PARAMETER,
    TEXT_RESPONSE,
    OffsetDateTimeField,
    RawAPIView,
    TimelineEventSerializer,
    caller_id,
    error_responses,
    staff_reads,
    tail_lines,
    text_response,
)
from portal.campaigns import api_selectors
from portal.campaigns.api_selectors import (
    CampaignPage,
    CampaignSubmission,
    LatestEntry,
    QueueState,
    RoundRef,
)
from portal.campaigns.models import Campaign, Round, RoundEntry
from portal.campaigns.selectors import (
    CampaignOverview,
    CrownView,
    EntryReport,
    EntryRow,
    QueueRow,
    ReportRow,
    ReportSummary,
    RoundRow,
    campaign_by_slug,
    round_entry_report,
)
from portal.core import errors, storage
from portal.submissions.models import Submission


class BlankAsNullField(serializers.CharField):
    """A reason: the text, or ``null`` when there is none."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_null=True, **kwargs)

    def to_representation(self, value: str) -> str | None:  # type: ignore[override]
        return str(value) if value else None


ROUND_STATUSES = [status for status, _ in Round.STATUSES]
VERDICTS = [verdict for verdict, _ in RoundEntry.VERDICTS]
ROLES = [role for role, _ in RoundEntry.ROLES]
QUEUE_STATES = [
    "closed",
    "running",
    "waiting_for_capacity",
    "waiting_for_host",
    "paused",
    "no_baseline",
    "empty",
    "due",
    "waiting",
]


class RoundRefSerializer(serializers.Serializer[RoundRef | RoundRow]):
    """Which round a number is from."""

    id = serializers.IntegerField()
    ordinal = serializers.IntegerField(help_text="The round's number within its campaign.")


class RoundStateSerializer(RoundRefSerializer):
    # Plain text here: the schema names one enum per field name and component (Round's).
    status = serializers.CharField(help_text="pending, running, scored or void.")
    void_reason = BlankAsNullField(help_text="Why the round is void; null unless it is.")


class EntrySerializer(serializers.Serializer[EntryRow | LatestEntry]):
    """One image in a round (``selectors.EntryRow``)."""

    id = serializers.IntegerField()
    submission = serializers.IntegerField(source="submission_id")
    entrant = serializers.CharField()
    role = serializers.ChoiceField(choices=ROLES)
    position = serializers.IntegerField(help_text="Run order within the round, from 0.")
    verdict = serializers.ChoiceField(
        choices=VERDICTS, help_text="none until the round is scored, and for good in a void one."
    )
    score = serializers.FloatField(
        allow_null=True,
        help_text="Median slice speedup against the baseline in this round only: "
        "(baseline - candidate) / baseline. Not comparable across rounds.",
    )
    agreement = serializers.FloatField(
        allow_null=True, help_text="Share of the round's requests equal to the reference."
    )
    reason = BlankAsNullField(help_text="What decided the verdict, when it was not a pass.")


class RoundSerializer(serializers.Serializer[RoundRow]):
    """One round (``selectors.RoundRow``) with its entries in run order."""

    id = serializers.IntegerField()
    ordinal = serializers.IntegerField(help_text="The round's number within its campaign.")
    status = serializers.ChoiceField(choices=ROUND_STATUSES)
    void_reason = BlankAsNullField(help_text="Why the round is void; null unless it is.")
    created_at = OffsetDateTimeField()
    started_at = OffsetDateTimeField(allow_null=True)
    finished_at = OffsetDateTimeField(allow_null=True)
    waiting_for_capacity = serializers.BooleanField(
        help_text="Pending because no host of the campaign's class was free: the system "
        "waits (5 minutes, doubling to an hour), the round is not stuck."
    )
    tries = serializers.IntegerField(help_text="Claims that found no host.")
    next_try_at = OffsetDateTimeField(allow_null=True)
    host = serializers.SerializerMethodField()
    void_cause = BlankAsNullField(
        help_text="Who caused a void: host, baseline, leader, challengers or staff; null "
        "unless void."
    )
    material = serializers.CharField(
        help_text="Published when the round is created, before it runs: the request set is "
        "drawn from sha256(material || campaign id) over the positions 0 .. pool_size - 1 "
        "of the official cohort (the campaign's id and pool_size)."
    )
    request_count = serializers.IntegerField(help_text="Requests in the round's request set.")
    request_digest = serializers.CharField(
        help_text="sha256 of the drawn positions, one decimal per line, in draw order."
    )
    evidence_digest = BlankAsNullField(
        help_text="sha256 of the finished round's evidence; the next round's material."
    )
    entries = EntrySerializer(many=True)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_host(self, row: RoundRow) -> str | None:
        return row.host or None


class CrownSerializer(serializers.Serializer[CrownView]):
    """The leader (``selectors.CrownView``); the crown is ``null`` when vacant."""

    submission = serializers.IntegerField(source="submission_id")
    entrant = serializers.CharField()
    score = serializers.FloatField(help_text="The leader's score in ``round``, its latest round.")
    round = serializers.SerializerMethodField()
    since = OffsetDateTimeField(help_text="When this submission took the crown.")

    @extend_schema_field(RoundRefSerializer)
    def get_round(self, crown: CrownView) -> dict[str, int]:
        return {"id": crown.round_id, "ordinal": crown.round_ordinal}


class QueueEntrySerializer(serializers.Serializer[QueueRow]):
    submission = serializers.IntegerField(source="submission_id")
    entrant = serializers.CharField()
    queued_at = OffsetDateTimeField(
        allow_null=True, help_text="Its latest queued event: the wait trigger's clock."
    )
    first_queued_at = OffsetDateTimeField(
        allow_null=True,
        help_text="Its place in the queue: rounds take entries by first queued time, kept "
        "across requeues and voids.",
    )
    in_next_round = serializers.BooleanField(
        help_text="Among the first queued, as many as a round takes beside the leader."
    )


class QueueSerializer(serializers.Serializer[QueueState]):
    """What the next round waits for (``api_selectors.QueueState``) and who waits."""

    state = serializers.ChoiceField(
        choices=QUEUE_STATES,
        help_text="running: a round runs now; waiting_for_capacity: the pending round found "
        "no free host and retries at next_try_at; waiting_for_host: the pending round waits "
        "for its first claim; closed: the campaign has closed, no round starts and the "
        "crown is final; paused / no_baseline: no round starts; empty: nothing queued; "
        "due: a round starts at the next check; waiting: fewer queued than the trigger, "
        "and the oldest has not waited long enough.",
    )
    explanation = serializers.CharField(help_text="The state as one sentence (times in UTC).")
    round = RoundRefSerializer(allow_null=True, help_text="The open round, if any.")
    next_try_at = OffsetDateTimeField(allow_null=True)
    queued = serializers.IntegerField(help_text="Submissions free to join the next round.")
    trigger_queued = serializers.IntegerField(help_text="A round starts when this many are queued,")
    trigger_wait_s = serializers.IntegerField(
        help_text="... or when the oldest queued event is this many seconds old."
    )
    due_at = OffsetDateTimeField(
        allow_null=True, help_text="When the wait rule starts a round; null with nothing queued."
    )
    entries = QueueEntrySerializer(many=True, help_text="First queued first.")


class CampaignRulesSerializer(serializers.Serializer[CampaignOverview]):
    round_size = serializers.IntegerField(help_text="Requests in each round's request set.")
    slice_count = serializers.IntegerField(help_text="Timed slices of the request set.")
    slice_repeats = serializers.IntegerField(
        help_text="Timed invocations per slice and pass; the fastest clean one counts."
    )
    scoring_rule = serializers.CharField()
    moat = serializers.FloatField(help_text="A challenger must beat leader score * (1 + moat).")
    drift_ceiling = serializers.FloatField(
        help_text="A closing baseline drifting more than this voids the round."
    )
    reproducibility_ceiling = serializers.FloatField()
    min_agreement = serializers.FloatField()
    leader_void_limit = serializers.IntegerField(
        help_text="A leader whose own entry voids this many rounds in a row loses the crown."
    )


class CampaignSerializer(serializers.Serializer[CampaignPage]):
    """A campaign: an ``api_selectors.CampaignPage`` (the selector's overview and the
    queue's state)."""

    slug = serializers.SlugField(source="overview.slug")
    title = serializers.CharField(source="overview.title")
    paused = serializers.BooleanField(
        source="overview.paused", help_text="A paused campaign starts no round."
    )
    hardware_class = serializers.CharField(source="overview.hardware_class")
    baseline_image_digest = BlankAsNullField(source="overview.baseline_image_digest")
    rules = CampaignRulesSerializer(source="overview")
    id = serializers.IntegerField(
        source="overview.campaign_id", help_text="The campaign id in each round's draw seed."
    )
    pool_size = serializers.IntegerField(
        source="overview.pool_size",
        help_text="Items in the official cohort: the positions a round's requests are drawn from.",
    )
    closed = serializers.BooleanField(
        source="overview.closed",
        help_text="The campaign has closed: no round starts, and the crown is final.",
    )
    crown = CrownSerializer(
        source="overview.crown", allow_null=True, help_text="null: the crown is vacant."
    )
    crown_note = BlankAsNullField(
        source="overview.crown_note",
        help_text="Why the crown is vacant (its leader was disqualified, voided rounds by its "
        "own entry, or lost on correctness or score); null while someone holds it.",
    )
    voids_by_cause = serializers.DictField(
        source="overview.voids_by_cause",
        child=serializers.IntegerField(),
        help_text="Void rounds counted by cause: host, baseline, leader, challengers, staff.",
    )
    queue = QueueSerializer()
    rounds = RoundSerializer(
        source="overview.rounds",
        many=True,
        help_text="The latest rounds, newest first (every round: the rounds endpoint).",
    )


class ReportRowSerializer(serializers.Serializer[ReportRow]):
    """One slice of an entry's arithmetic."""

    slice = serializers.IntegerField(help_text="The slice's index in the round's request set.")
    baseline_s = serializers.FloatField(
        allow_null=True, help_text="The baseline's seconds for this slice (opening pass)."
    )
    candidate_s = serializers.FloatField(allow_null=True, help_text="This image's seconds.")
    compared = serializers.IntegerField(
        source="total",
        allow_null=True,
        help_text="Requests both images were compared on in this slice (null: not run).",
    )
    matches = serializers.IntegerField(
        allow_null=True, help_text="Of those, answers equal to the reference."
    )
    speedup = serializers.FloatField(
        allow_null=True,
        help_text="What the slice counted in the median: (baseline_s - candidate_s) / "
        "baseline_s, or min(that, 0) under tolerance; null: it counted nothing.",
    )
    reason = BlankAsNullField(
        help_text="Why the slice did not score in full (under tolerance, not run, its "
        "verdict, a void round); null when it did."
    )


class ReportSummarySerializer(serializers.Serializer[ReportSummary]):
    slices = serializers.IntegerField()
    slices_scored = serializers.IntegerField()
    slices_under_tolerance = serializers.IntegerField(
        help_text="Slices whose own agreement is below the campaign's min_agreement: they "
        "earn nothing (min(speedup, 0) in the median)."
    )


class EntryReportSerializer(serializers.Serializer[EntryReport]):
    """One round entry's score, slice by slice (``selectors.EntryReport``)."""

    campaign = serializers.SlugField(source="campaign_slug")
    round = RoundStateSerializer(help_text="The round every number here is from.")
    entry = EntrySerializer()
    rows = ReportRowSerializer(many=True)
    summary = ReportSummarySerializer()
    environment = serializers.DictField(
        help_text="The host's readings for the round: CPU, cores, cgroup quota, GPU."
    )


class LatestEntrySerializer(EntrySerializer):
    round = RoundStateSerializer(help_text="The round this entry and its score are from.")


class CampaignSubmissionSerializer(serializers.Serializer[CampaignSubmission]):
    """One of your campaign submissions: its timeline and its latest round entry."""

    id = serializers.IntegerField()
    campaign = serializers.SlugField()
    kind = serializers.CharField()
    status = serializers.CharField()
    submitted_at = OffsetDateTimeField()
    failure_reason = BlankAsNullField()
    timeline = TimelineEventSerializer(many=True)
    entry = LatestEntrySerializer(
        allow_null=True,
        help_text="Its entry in the latest round it ran in; null when it never ran in one.",
    )


TAGS = ["campaigns"]


def get_campaign(slug: str) -> Campaign:
    campaign = campaign_by_slug(slug)
    if campaign is None:
        raise errors.NotFound("No such campaign.")
    return campaign


def own_campaign_submission(request: Request, campaign: Campaign, submission_id: int) -> Submission:
    """The caller's submission of this campaign (staff: anyone's); else ``not_found``."""
    submission = Submission.objects.filter(
        pk=submission_id, benchmark_id=campaign.benchmark_id
    ).first()
    if submission is None or (
        submission.entrant_id != caller_id(request) and not staff_reads(request)
    ):
        raise errors.NotFound("No such submission in this campaign.")
    return submission


class CampaignListView(APIView):
    """Every campaign with its crown, queue and latest rounds (staff create campaigns, so
    the list is short and not paginated)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="campaigns_list",
        tags=TAGS,
        responses=CampaignSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        # The stubs type a plain Serializer's instance as one item even with many=True
        # (typeddjango/djangorestframework-stubs#260).
        return Response(CampaignSerializer(api_selectors.campaign_pages(), many=True).data)  # type: ignore[arg-type]


class CampaignDetailView(APIView):
    """One campaign: the crown (null: vacant), what the next round waits for, the queue,
    and the latest rounds, newest first."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="campaigns_retrieve",
        tags=TAGS,
        responses={200: CampaignSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, slug: str) -> Response:
        page = api_selectors.campaign_page(get_campaign(slug))
        return Response(CampaignSerializer(page).data)


class CampaignRoundsView(GenericAPIView[Round]):
    """Every round of the campaign, newest first, with its entries (paginated)."""

    permission_classes = [AllowAny]

    # For the schema only: get() renders the page's rounds as selectors.RoundRow with it,
    # while the stubs want a serializer of the Round queryset itself.
    serializer_class = RoundSerializer  # type: ignore[assignment]

    def get_queryset(self) -> QuerySet[Round]:
        if getattr(self, "swagger_fake_view", False):  # schema generation
            return Round.objects.none()
        return api_selectors.round_queryset(get_campaign(self.kwargs["slug"]))

    @extend_schema(
        operation_id="campaigns_rounds",
        tags=TAGS,
        # 400: a page that is not a whole number; 404: no such campaign, or past the end.
        responses={200: RoundSerializer(many=True), **error_responses(400, 401, 404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        rows = api_selectors.round_rows(list(page or []))
        # The stubs type a plain Serializer's instance as one item even with many=True
        # (typeddjango/djangorestframework-stubs#260).
        return self.get_paginated_response(RoundSerializer(rows, many=True).data)  # type: ignore[arg-type]


class RoundEntryReportView(APIView):
    """One entry's score, slice by slice: baseline and candidate seconds, the speedup, why
    a slice scored nothing; a summary; the host's environment readings. Never per-image
    answers or the round's requests."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="rounds_entry_report",
        tags=TAGS,
        responses={200: EntryReportSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, round_id: int, entry_id: int) -> Response:
        report = round_entry_report(entry_id)
        if report is None or report.round.id != round_id:
            raise errors.NotFound("No such entry in this round.")
        return Response(EntryReportSerializer(report).data)


class CampaignSubmissionView(APIView):
    """One of your campaign submissions: its timeline and its latest round entry (status,
    score, reason). Staff read anyone's."""

    @extend_schema(
        operation_id="campaigns_submission",
        tags=TAGS,
        responses={200: CampaignSubmissionSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, slug: str, submission_id: int) -> Response:
        campaign = get_campaign(slug)
        submission = own_campaign_submission(request, campaign, submission_id)
        data = api_selectors.campaign_submission(campaign, submission)
        return Response(CampaignSubmissionSerializer(data).data)


class CampaignSubmissionBuildLogView(RawAPIView):
    """The last ``tail`` lines of your campaign submission's build log (text/plain); 404
    ``not_found`` when the submission or its log does not exist."""

    @extend_schema(
        operation_id="campaigns_submission_build_log",
        tags=TAGS,
        parameters=[TAIL_PARAMETER],
        responses={**TEXT_RESPONSE, **error_responses(400, 401, 404)},
    )
    def get(self, request: Request, slug: str, submission_id: int) -> HttpResponse:
        submission = own_campaign_submission(request, get_campaign(slug), submission_id)
        lines = tail_lines(request)
        log = storage.submission_build_log(submission.pk)
        if not log.is_file():
            raise errors.NotFound("This submission has no build log.")
        return text_response(storage.read_tail(log, lines))
