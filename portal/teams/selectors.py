"""Reads of teams: an entrant's team on a benchmark, its members, their invitations."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from django.db import transaction

from portal.teams.models import Team, TeamInvitation, TeamMember

# How long the pages may keep an entrant's teammates: every change of a team drops them
# (``teammates_forget``), so this bounds only a read that raced a change.
TEAMMATES_CACHE_S = 60


def team_of(benchmark_id: int, user_id: int) -> Team | None:
    """The user's team on the benchmark, or None for an entrant on their own. One query."""
    member = (
        TeamMember.objects.filter(benchmark_id=benchmark_id, user_id=user_id)
        .select_related("team")
        .first()
    )
    return None if member is None else member.team


def member_ids(team: Team) -> list[int]:
    """The team's members' user ids, in pk order (the order their rows are locked in)."""
    return sorted(TeamMember.objects.filter(team=team).values_list("user_id", flat=True))


def teams_by_member(benchmark_id: int) -> dict[int, Team]:
    """Every member of a team on the benchmark, by user id, with their team. One query."""
    return {
        member.user_id: member.team
        for member in TeamMember.objects.filter(benchmark_id=benchmark_id).select_related("team")
    }


@dataclass(frozen=True)
class Identity:
    """Whom an entrant competes as on a benchmark: their team (``team_id``, None on their
    own) and its members' user ids (only the entrant's own on their own), in pk order."""

    team_id: int | None
    member_ids: list[int]


def identity_of(benchmark_id: int, user_id: int) -> Identity:
    """The entrant's :class:`Identity` on the benchmark. One query."""
    team_ids = TeamMember.objects.filter(benchmark_id=benchmark_id, user_id=user_id).values(
        "team_id"
    )
    rows = list(TeamMember.objects.filter(team_id__in=team_ids).values_list("team_id", "user_id"))
    if not rows:
        return Identity(team_id=None, member_ids=[user_id])
    return Identity(team_id=rows[0][0], member_ids=sorted(uid for _, uid in rows))


def teammate_ids(benchmark_id: int, user_id: int) -> list[int]:
    """Everyone whose attempts, environments and feedback the user shares on the
    benchmark: their team's members, or only themselves (:func:`identity_of`). One
    query."""
    return identity_of(benchmark_id, user_id).member_ids


def shown_identity(benchmark_id: int, user_id: int) -> Identity:
    """``identity_of`` for what the pages show (the quota, the standing, the chart's own
    points), from the cache until the team changes. Charging and permissions read the
    rows (``identity_of``, ``teammate_ids``)."""
    key = _teammates_key(benchmark_id, user_id)
    found = cache.get(key)
    if not isinstance(found, Identity):
        found = identity_of(benchmark_id, user_id)
        cache.set(key, found, TEAMMATES_CACHE_S)
    return found


def shown_teammate_ids(benchmark_id: int, user_id: int) -> list[int]:
    """The members of :func:`shown_identity` (only the user on their own)."""
    return shown_identity(benchmark_id, user_id).member_ids


def teammates_forget(benchmark_id: int, user_ids: Iterable[int]) -> None:
    """Drop the cached teammates of ``user_ids`` now and once the change is committed (a
    page read between the two would cache them as they were)."""
    keys = [_teammates_key(benchmark_id, user_id) for user_id in user_ids]
    cache.delete_many(keys)
    transaction.on_commit(lambda: cache.delete_many(keys))


def _teammates_key(benchmark_id: int, user_id: int) -> str:
    return f"podium:identity:{benchmark_id}:{user_id}"


def teammates_any_benchmark(user_id: int) -> Any:
    """A subquery of (benchmark, user) pairs the user shares through their teams."""
    team_ids = TeamMember.objects.filter(user_id=user_id).values("team_id")
    return TeamMember.objects.filter(team_id__in=team_ids)


def team_members(team: Team) -> list[TeamMember]:
    return list(TeamMember.objects.filter(team=team).select_related("user"))


def pending_invitations(team: Team) -> list[TeamInvitation]:
    return list(
        TeamInvitation.objects.filter(team=team, state=TeamInvitation.PENDING).select_related(
            "invitee", "invited_by"
        )
    )


def invitations_for(user: Any) -> list[TeamInvitation]:
    """The user's invitations still waiting for an answer, newest first."""
    return list(
        TeamInvitation.objects.filter(invitee=user, state=TeamInvitation.PENDING).select_related(
            "team", "team__benchmark", "invited_by"
        )
    )
