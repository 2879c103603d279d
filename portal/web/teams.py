"""The team page of a benchmark: the signed-in entrant's team (or none), their pending
invitations, and the forms that create, invite, answer, leave and remove. Each form posts
back here; the change is a service of ``portal.teams.services`` (audited)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from portal.audit.services import Origin
from portal.contests.models import Benchmark
from portal.core import errors
from portal.teams import services
from portal.teams.models import TeamInvitation
from portal.teams.selectors import pending_invitations, team_members, team_of


def _apply(request: HttpRequest, benchmark: Benchmark) -> str:
    """Carry out the posted action; the sentence to show."""
    action = request.POST.get("action", "")
    origin = Origin.of(request)
    user = request.user
    if action == "create":
        team = services.team_create(
            user=user, benchmark=benchmark, name=request.POST.get("name", ""), origin=origin
        )
        return f"Your team {team.name} is created."
    if action == "invite":
        username = request.POST.get("username", "").strip()
        services.team_invite(user=user, benchmark=benchmark, username=username, origin=origin)
        return f"{username} is invited."
    if action in ("accept", "decline"):
        try:
            invitation_id = int(request.POST.get("invitation", ""))
        except ValueError:
            raise errors.NotFound("No such invitation.") from None
        if action == "accept":
            team = services.invitation_accept(user=user, invitation_id=invitation_id, origin=origin)
            return f"You joined {team.name}."
        services.invitation_decline(user=user, invitation_id=invitation_id, origin=origin)
        return "You declined the invitation."
    if action == "leave":
        services.team_leave(user=user, benchmark=benchmark, origin=origin)
        return "You left your team; you compete on your own."
    if action == "remove":
        username = request.POST.get("username", "")
        services.team_remove(user=user, benchmark=benchmark, username=username, origin=origin)
        return f"{username} is no longer in your team."
    raise errors.InvalidParameter("Unknown action.")


@login_required
@require_http_methods(["GET", "POST"])
def team(request: HttpRequest, slug: str) -> HttpResponse:
    benchmark = get_object_or_404(Benchmark, slug=slug)
    if request.method == "POST":
        try:
            done = _apply(request, benchmark)
        except errors.PodiumError as refusal:
            messages.error(request, refusal.detail)
        else:
            messages.success(request, done)
        return redirect("contests:team", slug=slug)
    mine = team_of(benchmark.pk, int(request.user.pk or 0))
    context = {
        "benchmark": benchmark,
        "team": mine,
        "members": team_members(mine) if mine else [],
        "pending": pending_invitations(mine) if mine else [],
        "invitations": TeamInvitation.objects.filter(
            invitee_id=request.user.pk, team__benchmark=benchmark, state=TeamInvitation.PENDING
        ).select_related("team", "invited_by"),
        "frozen": timezone.now() >= benchmark.teams_frozen_at(),
        "teams_enabled": benchmark.team_size_max > 1,
    }
    return render(request, "contests/team.html", context)
