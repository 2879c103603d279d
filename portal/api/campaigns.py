"""Campaigns: the crown, the queue and the rounds; an entry's report; a campaign
submission's timeline and build log.

Campaigns, rounds and reports are public, like the leaderboard: anyone reads them without
signing in (the score's arithmetic is public). A submission's timeline and build log under
the campaign path are its entrant's, as under ``/submissions/``: another entrant's is
``not_found``, staff read any.
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework.generics import GenericAPIView
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import campaign_serializers as cs
from portal.api import serializers as s
from portal.api.common import (
    NOT_FOUND,
    TAIL_PARAMETER,
    TEXT_RESPONSE,
    RawAPIView,
    caller_id,
    staff_reads,
    tail_lines,
    text_response,
)
from portal.campaigns import api_selectors
from portal.campaigns.models import Campaign, Round
from portal.campaigns.selectors import campaign_by_slug, round_entry_report
from portal.core import errors, storage
from portal.submissions.models import Submission

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
        responses=cs.CampaignSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        # The stubs type a plain Serializer's instance as one item even with many=True
        # (typeddjango/djangorestframework-stubs#260).
        return Response(cs.CampaignSerializer(api_selectors.campaign_pages(), many=True).data)  # type: ignore[arg-type]


class CampaignDetailView(APIView):
    """One campaign: the crown (null: vacant), what the next round waits for, the queue,
    and the latest rounds, newest first."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="campaigns_retrieve",
        tags=TAGS,
        responses={200: cs.CampaignSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, slug: str) -> Response:
        page = api_selectors.campaign_page(get_campaign(slug))
        return Response(cs.CampaignSerializer(page).data)


class CampaignRoundsView(GenericAPIView[Round]):
    """Every round of the campaign, newest first, with its entries (paginated)."""

    permission_classes = [AllowAny]

    # For the schema only: get() renders the page's rounds as selectors.RoundRow with it,
    # while the stubs want a serializer of the Round queryset itself.
    serializer_class = cs.RoundSerializer  # type: ignore[assignment]

    def get_queryset(self) -> QuerySet[Round]:
        if getattr(self, "swagger_fake_view", False):  # schema generation
            return Round.objects.none()
        return api_selectors.round_queryset(get_campaign(self.kwargs["slug"]))

    @extend_schema(
        operation_id="campaigns_rounds",
        tags=TAGS,
        # 400: a page that is not a whole number; 404: no such campaign, or past the end.
        responses={200: cs.RoundSerializer(many=True), **s.error_responses(400, 401, 404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        rows = api_selectors.round_rows(list(page or []))
        # The stubs type a plain Serializer's instance as one item even with many=True
        # (typeddjango/djangorestframework-stubs#260).
        return self.get_paginated_response(cs.RoundSerializer(rows, many=True).data)  # type: ignore[arg-type]


class RoundEntryReportView(APIView):
    """One entry's score, slice by slice: baseline and candidate seconds, the speedup, why
    a slice scored nothing; a summary; the host's environment readings. Never per-image
    answers or the round's requests."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="rounds_entry_report",
        tags=TAGS,
        responses={200: cs.EntryReportSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, round_id: int, entry_id: int) -> Response:
        report = round_entry_report(entry_id)
        if report is None or report.round.id != round_id:
            raise errors.NotFound("No such entry in this round.")
        return Response(cs.EntryReportSerializer(report).data)


class CampaignSubmissionView(APIView):
    """One of your campaign submissions: its timeline and its latest round entry (status,
    score, reason). Staff read anyone's."""

    @extend_schema(
        operation_id="campaigns_submission",
        tags=TAGS,
        responses={200: cs.CampaignSubmissionSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, slug: str, submission_id: int) -> Response:
        campaign = get_campaign(slug)
        submission = own_campaign_submission(request, campaign, submission_id)
        data = api_selectors.campaign_submission(campaign, submission)
        return Response(cs.CampaignSubmissionSerializer(data).data)


class CampaignSubmissionBuildLogView(RawAPIView):
    """The last ``tail`` lines of your campaign submission's build log (text/plain); 404
    ``not_found`` when the submission or its log does not exist."""

    @extend_schema(
        operation_id="campaigns_submission_build_log",
        tags=TAGS,
        parameters=[TAIL_PARAMETER],
        responses={**TEXT_RESPONSE, **s.error_responses(400, 401, 404)},
    )
    def get(self, request: Request, slug: str, submission_id: int) -> HttpResponse:
        submission = own_campaign_submission(request, get_campaign(slug), submission_id)
        lines = tail_lines(request)
        log = storage.submission_build_log(submission.pk)
        if not log.is_file():
            raise errors.NotFound("This submission has no build log.")
        return text_response(storage.read_tail(log, lines))
