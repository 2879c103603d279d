"""Contests: the list, one contest (phases, facts, latest announcements), and its
announcements (public, paginated; staff with ``contests.add_announcement`` post one,
audited, mailed to the participants after the commit)."""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.generics import GenericAPIView
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import contest_serializers as cs
from portal.api import serializers as s
from portal.api.common import IsStaff
from portal.audit.services import Origin
from portal.contests.announcements import announcement_post
from portal.contests.models import Announcement, Contest
from portal.contests.phases import (
    HUB_ANNOUNCEMENTS,
    announcements_of,
    contest_view,
    hub_entries,
)
from portal.core import errors


def get_contest(slug: str) -> Contest:
    contest = Contest.objects.filter(slug=slug).first()
    if contest is None:
        raise errors.NotFound("No such contest.")
    return contest


class ContestListView(APIView):
    """Every contest with its phases in order (public); open ones first."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="contests_list", tags=["contests"], responses=cs.ContestSerializer(many=True)
    )
    def get(self, request: Request) -> Response:
        views = [entry.contest for entry in hub_entries(timezone.now()) if entry.contest]
        return Response(cs.ContestSerializer(views, many=True).data)  # type: ignore[arg-type]


class ContestDetailView(APIView):
    """One contest: phases in order with their windows and status, facts, and the latest
    announcements (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="contests_retrieve",
        tags=["contests"],
        responses={200: cs.ContestDetailSerializer, **s.error_responses(404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        contest = get_contest(slug)
        context = {"announcements": list(announcements_of(contest)[:HUB_ANNOUNCEMENTS])}
        view = contest_view(contest, timezone.now())
        return Response(cs.ContestDetailSerializer(view, context=context).data)


class ContestAnnouncementsView(GenericAPIView[Announcement]):
    """GET: the contest's announcements, newest first (public, paginated). POST (staff
    with ``contests.add_announcement``): post one, dated now; audited and mailed."""

    serializer_class = cs.AnnouncementSerializer

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
        responses={200: cs.AnnouncementSerializer(many=True), **s.error_responses(400, 404)},
        auth=[],
    )
    def get(self, request: Request, slug: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(cs.AnnouncementSerializer(page, many=True).data)

    @extend_schema(
        operation_id="contests_announcements_create",
        tags=["contests"],
        request=cs.AnnouncementCreateSerializer,
        responses={201: cs.AnnouncementSerializer, **s.error_responses(400, 401, 403, 404, 415)},
    )
    def post(self, request: Request, slug: str) -> Response:
        contest = get_contest(slug)
        serializer = cs.AnnouncementCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        announcement = announcement_post(
            contest=contest,
            actor=request.user,
            title=serializer.validated_data["title"],
            body=serializer.validated_data["body"],
            origin=Origin.of(request),
        )
        return Response(
            cs.AnnouncementSerializer(announcement).data, status=status.HTTP_201_CREATED
        )
