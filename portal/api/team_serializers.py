"""Request and response shapes of the teams endpoints (``teams``)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from portal.api.serializers import OffsetDateTimeField


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
