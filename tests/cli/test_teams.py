"""``podium team``: forming a team from the command line, and a refusal's exit code."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from portal.teams.models import TeamInvitation, TeamMember
from tests.cli.conftest import Podium


def members(benchmark: Any) -> list[str]:
    return sorted(
        TeamMember.objects.filter(benchmark=benchmark).values_list("user__username", flat=True)
    )


def test_create_invite_accept_show_remove_and_leave(
    server: str, benchmark: Any, alice: Any, bob: Any, podium: Podium, sign_in: Callable[[Any], str]
) -> None:
    sign_in(alice)
    assert "no team" in podium("team", "show", benchmark.slug).out
    created = podium("team", "create", benchmark.slug, "Fast Cats")
    assert created.code == 0, created.err
    assert "Team Fast Cats" in created.out
    assert podium("team", "invite", benchmark.slug, "bob").code == 0

    sign_in(bob)
    invitation = TeamInvitation.objects.get(invitee=bob)
    shown = podium("team", "show", benchmark.slug)
    assert "Fast Cats" in shown.out and str(invitation.pk) in shown.out
    joined = podium("team", "accept", str(invitation.pk))
    assert joined.code == 0, joined.err
    assert members(benchmark) == ["alice", "bob"]
    refused = podium("team", "remove", benchmark.slug, "alice")
    assert refused.code == 2
    assert "captain" in refused.err

    sign_in(alice)
    removed = podium("team", "remove", benchmark.slug, "bob")
    assert removed.code == 0, removed.err
    assert members(benchmark) == ["alice"]
    assert podium("team", "leave", benchmark.slug).code == 0
    assert members(benchmark) == []


def test_declining(
    server: str, benchmark: Any, alice: Any, bob: Any, podium: Podium, sign_in: Callable[[Any], str]
) -> None:
    sign_in(alice)
    podium("team", "create", benchmark.slug, "Solo")
    podium("team", "invite", benchmark.slug, "bob")
    sign_in(bob)
    invitation = TeamInvitation.objects.get(invitee=bob)

    result = podium("team", "decline", str(invitation.pk))

    assert result.code == 0, result.err
    invitation.refresh_from_db()
    assert invitation.state == TeamInvitation.DECLINED
