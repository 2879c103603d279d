"""Teams in the admin, read-only: staff see who is in which team and every invitation;
membership changes only through the entrants' own actions (audited)."""

from __future__ import annotations

from django.contrib import admin

from portal.core.admin_helpers import ReadOnlyMixin
from portal.teams.models import Team, TeamInvitation, TeamMember


class MemberInline(ReadOnlyMixin, admin.TabularInline[TeamMember, Team]):
    model = TeamMember
    fields = ["user", "joined_at"]
    readonly_fields = ["user", "joined_at"]
    extra = 0


@admin.register(Team)
class TeamAdmin(ReadOnlyMixin, admin.ModelAdmin[Team]):
    list_display = ["name", "benchmark", "captain", "created_at"]
    list_filter = ["benchmark"]
    search_fields = ["name", "members__user__username"]
    inlines = [MemberInline]


@admin.register(TeamInvitation)
class TeamInvitationAdmin(ReadOnlyMixin, admin.ModelAdmin[TeamInvitation]):
    list_display = ["team", "invitee", "invited_by", "state", "created_at", "decided_at"]
    list_filter = ["state"]
    search_fields = ["team__name", "invitee__username"]
