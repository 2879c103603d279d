"""Contests (``/api/v1/contests/``): the list, one contest (phases, facts, latest
announcements), and its announcements (public, paginated; staff with
``contests.add_announcement`` post one, audited, mailed to the participants after the
commit).

Views and their serializers. Markdown comes twice: as written (``body``, the facts) and as
the sanitised HTML the pages show (``body_html``, ``facts_html``).
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.common import IsStaff, OffsetDateTimeField, error_responses
from portal.audit.services import Origin
from portal.contests.announcements import announcement_post
from portal.contests.markup import markdown_html
from portal.contests.models import Announcement, Contest
from portal.contests.phases import (
    HUB_ANNOUNCEMENTS,
    ContestView,
    Phase,
    announcements_of,
    contest_view,
    hub_entries,
)
from portal.core import errors

FACTS = ("prizes", "timeline", "final_ranking")


class PhaseSerializer(serializers.Serializer[Phase]):
    """One phase: a benchmark of its own (see ``/api/v1/benchmarks/{slug}/``)."""

    order = serializers.IntegerField(source="benchmark.phase_order")
    name = serializers.CharField(source="label", help_text='Its name, else "Phase N".')
    slug = serializers.CharField(source="benchmark.slug")
    title = serializers.CharField(source="benchmark.title")
    status = serializers.CharField(
        source="schedule.status", help_text="upcoming, open or closed (its window at this moment)."
    )
    opens_at = OffsetDateTimeField(source="benchmark.opens_at")
    closes_at = OffsetDateTimeField(source="benchmark.closes_at")
    hardware_class = serializers.CharField(source="benchmark.hardware_class_id")


class AnnouncementSerializer(serializers.ModelSerializer[Announcement]):
    contest = serializers.CharField(source="contest.slug")
    posted_at = OffsetDateTimeField()
    body = serializers.CharField(help_text="As staff wrote it (Markdown).")
    body_html = serializers.SerializerMethodField(help_text="Sanitised HTML, as the pages show it.")

    class Meta:
        model = Announcement
        fields = ["id", "contest", "title", "body", "body_html", "posted_at"]

    @extend_schema_field(serializers.CharField())
    def get_body_html(self, announcement: Announcement) -> str:
        return markdown_html(announcement.body)


class AnnouncementCreateSerializer(serializers.Serializer[dict[str, Any]]):
    title = serializers.CharField(max_length=200)
    body = serializers.CharField(help_text="Markdown; shown sanitised.")


class FactsSerializer(serializers.Serializer[dict[str, str]]):
    prizes = serializers.CharField(allow_blank=True)
    timeline = serializers.CharField(
        allow_blank=True, help_text="Notes beside the phases' windows."
    )
    final_ranking = serializers.CharField(allow_blank=True)


class ContestSerializer(serializers.Serializer[ContestView]):
    """A contest in the list: its phases in order, each with its window and status."""

    slug = serializers.CharField(source="contest.slug")
    title = serializers.CharField(source="contest.title")
    status = serializers.CharField(
        help_text="open while a phase is open; upcoming while one is still to come; closed after."
    )
    opens_at = OffsetDateTimeField(allow_null=True, help_text="The first phase's opening.")
    closes_at = OffsetDateTimeField(allow_null=True, help_text="The last phase's close.")
    phases = PhaseSerializer(many=True)


class ContestDetailSerializer(ContestSerializer):
    """One contest: its phases, facts and latest announcements."""

    summary = serializers.CharField(source="contest.summary", help_text="Markdown.")
    facts = serializers.SerializerMethodField(help_text="As staff wrote them (Markdown).")
    facts_html = serializers.SerializerMethodField(help_text="Sanitised HTML of each fact.")
    announcements = serializers.SerializerMethodField(
        help_text="The latest, newest first (every one: the announcements endpoint)."
    )

    @extend_schema_field(FactsSerializer)
    def get_facts(self, view: ContestView) -> dict[str, str]:
        return {name: str(getattr(view.contest, name)) for name in FACTS}

    @extend_schema_field(FactsSerializer)
    def get_facts_html(self, view: ContestView) -> dict[str, str]:
        return {name: markdown_html(getattr(view.contest, name)) for name in FACTS}

    @extend_schema_field(AnnouncementSerializer(many=True))
    def get_announcements(self, view: ContestView) -> Any:
        return AnnouncementSerializer(self.context["announcements"], many=True).data


def get_contest(slug: str) -> Contest:
    contest = Contest.objects.filter(slug=slug).first()
    if contest is None:
        raise errors.NotFound("No such contest.")
    return contest


class ContestListView(APIView):
    """Every contest with its phases in order (public); open ones first."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="contests_list", tags=["contests"], responses=ContestSerializer(many=True)
    )
    def get(self, request: Request) -> Response:
        views = [entry.contest for entry in hub_entries(timezone.now()) if entry.contest]
        return Response(ContestSerializer(views, many=True).data)  # type: ignore[arg-type]


class ContestDetailView(APIView):
    """One contest: phases in order with their windows and status, facts, and the latest
    announcements (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="contests_retrieve",
        tags=["contests"],
        responses={200: ContestDetailSerializer, **error_responses(404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        contest = get_contest(slug)
        context = {"announcements": list(announcements_of(contest)[:HUB_ANNOUNCEMENTS])}
        view = contest_view(contest, timezone.now())
        return Response(ContestDetailSerializer(view, context=context).data)


class ContestAnnouncementsView(GenericAPIView[Announcement]):
    """GET: the contest's announcements, newest first (public, paginated). POST (staff
    with ``contests.add_announcement``): post one, dated now; audited and mailed."""

    serializer_class = AnnouncementSerializer

    def get_permissions(self) -> list[BasePermission]:
        if self.request.method == "POST":
            return [IsStaff()]
        return [AllowAny()]

    def get_queryset(self) -> QuerySet[Announcement]:
        if getattr(self, "swagger_fake_view", False):  # schema generation
            return Announcement.objects.none()
        return announcements_of(get_contest(self.kwargs["slug"]))

    @extend_schema(
        operation_id="contests_announcements_list",
        tags=["contests"],
        # 400: a page that is not a whole number; 404: no such contest, or past the last page.
        responses={200: AnnouncementSerializer(many=True), **error_responses(400, 404)},
        auth=[],
    )
    def get(self, request: Request, slug: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(AnnouncementSerializer(page, many=True).data)

    @extend_schema(
        operation_id="contests_announcements_create",
        tags=["contests"],
        request=AnnouncementCreateSerializer,
        responses={201: AnnouncementSerializer, **error_responses(400, 401, 403, 404, 415)},
    )
    def post(self, request: Request, slug: str) -> Response:
        contest = get_contest(slug)
        serializer = AnnouncementCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        announcement = announcement_post(
            contest=contest,
            actor=request.user,
            title=serializer.validated_data["title"],
            body=serializer.validated_data["body"],
            origin=Origin.of(request),
        )
        return Response(AnnouncementSerializer(announcement).data, status=status.HTTP_201_CREATED)
