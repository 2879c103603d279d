"""Teams (``/api/v1/benchmarks/<slug>/team/``, ``/api/v1/invitations/``): the caller's
team on a benchmark, creating one, inviting, answering an invitation, leaving and removing
members (docs/api.md, "Teams"). Every change is a service of ``portal.teams.services``
(audited).

Views and their serializers.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.common import NOT_FOUND, OffsetDateTimeField, error_responses, get_benchmark
from portal.audit.services import Origin
from portal.core import errors
from portal.teams import services
from portal.teams.models import Team
from portal.teams.selectors import invitations_for, pending_invitations, team_members, team_of


class TeamMemberSerializer(serializers.Serializer[Any]):
    username = serializers.CharField(source="user.username")
    joined_at = OffsetDateTimeField()


class InvitationSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    benchmark = serializers.CharField(source="team.benchmark.slug")
    team = serializers.CharField(source="team.name")
    invitee = serializers.CharField(source="invitee.username")
    invited_by = serializers.CharField(source="invited_by.username")
    state = serializers.ChoiceField(choices=["pending", "accepted", "declined", "withdrawn"])
    created_at = OffsetDateTimeField()
    decided_at = OffsetDateTimeField(allow_null=True)


class TeamSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    benchmark = serializers.CharField(source="benchmark.slug")
    name = serializers.CharField()
    captain = serializers.CharField(source="captain.username")
    members = TeamMemberSerializer(many=True, source="member_rows")
    invitations = InvitationSerializer(
        many=True, source="pending", help_text="Invitations not answered yet."
    )
    size_max = serializers.IntegerField(source="benchmark.team_size_max")
    frozen_at = OffsetDateTimeField(
        source="benchmark.teams_frozen_at",
        help_text="From this moment membership is fixed (the team freeze, else the close).",
    )


class TeamCreateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100)


class TeamInviteSerializer(serializers.Serializer[Any]):
    username = serializers.CharField(max_length=150)


TAGS = ["teams"]
CHANGE_ERRORS = error_responses(400, 401, 404, 409, 415)


def team_data(team: Team) -> dict[str, Any]:
    team.member_rows = team_members(team)  # type: ignore[attr-defined]
    team.pending = pending_invitations(team)  # type: ignore[attr-defined]
    return dict(TeamSerializer(team).data)


def _my_team(request: Request, slug: str) -> Team:
    team = team_of(get_benchmark(slug).pk, int(request.user.pk or 0))
    if team is None:
        raise errors.NotFound("You are in no team on this benchmark.")
    return team


class TeamView(APIView):
    """Your team on a benchmark; POST creates one (you its captain and only member)."""

    @extend_schema(
        operation_id="teams_retrieve",
        tags=TAGS,
        responses={200: TeamSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, slug: str) -> Response:
        return Response(team_data(_my_team(request, slug)))

    @extend_schema(
        operation_id="teams_create",
        tags=TAGS,
        request=TeamCreateSerializer,
        responses={201: TeamSerializer, **CHANGE_ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        serializer = TeamCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        team = services.team_create(
            user=request.user,
            benchmark=benchmark,
            name=serializer.validated_data["name"],
            origin=Origin.of(request),
        )
        return Response(team_data(team), status=status.HTTP_201_CREATED)


class TeamInvitationsView(APIView):
    """Invite an entrant to your team (any member may)."""

    @extend_schema(
        operation_id="teams_invite",
        tags=TAGS,
        request=TeamInviteSerializer,
        responses={201: InvitationSerializer, **CHANGE_ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        serializer = TeamInviteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        invitation = services.team_invite(
            user=request.user,
            benchmark=benchmark,
            username=serializer.validated_data["username"],
            origin=Origin.of(request),
        )
        return Response(InvitationSerializer(invitation).data, status=status.HTTP_201_CREATED)


class TeamLeaveView(APIView):
    """Leave your team (the last member out deletes it)."""

    @extend_schema(
        operation_id="teams_leave",
        tags=TAGS,
        request=None,
        responses={204: None, **error_responses(400, 401, 404, 409)},
    )
    def post(self, request: Request, slug: str) -> Response:
        services.team_leave(
            user=request.user, benchmark=get_benchmark(slug), origin=Origin.of(request)
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class TeamMemberView(APIView):
    """The captain removes a member."""

    @extend_schema(
        operation_id="teams_remove_member",
        tags=TAGS,
        responses={200: TeamSerializer, **error_responses(400, 401, 403, 404, 409)},
    )
    def delete(self, request: Request, slug: str, username: str) -> Response:
        team = services.team_remove(
            user=request.user,
            benchmark=get_benchmark(slug),
            username=username,
            origin=Origin.of(request),
        )
        return Response(team_data(team))


class InvitationListView(APIView):
    """Your invitations waiting for an answer, newest first."""

    @extend_schema(
        operation_id="invitations_list",
        tags=TAGS,
        responses={200: InvitationSerializer(many=True), **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        return Response(InvitationSerializer(invitations_for(request.user), many=True).data)


class InvitationAcceptView(APIView):
    """Accept an invitation: join its team."""

    @extend_schema(
        operation_id="invitations_accept",
        tags=TAGS,
        request=None,
        responses={200: TeamSerializer, **error_responses(400, 401, 404, 409)},
    )
    def post(self, request: Request, invitation_id: int) -> Response:
        team = services.invitation_accept(
            user=request.user, invitation_id=invitation_id, origin=Origin.of(request)
        )
        return Response(team_data(team))


class InvitationDeclineView(APIView):
    """Decline an invitation."""

    @extend_schema(
        operation_id="invitations_decline",
        tags=TAGS,
        request=None,
        responses={200: InvitationSerializer, **error_responses(401, 404)},
    )
    def post(self, request: Request, invitation_id: int) -> Response:
        invitation = services.invitation_decline(
            user=request.user, invitation_id=invitation_id, origin=Origin.of(request)
        )
        return Response(InvitationSerializer(invitation).data)
