"""Forming teams: the size limit, one team per benchmark, the freeze, the merge rule,
invitations answered either way, leaving and removing; every change audited."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.core import errors
from portal.submissions.attempts import quota_for
from portal.submissions.intake import submission_accept
from portal.submissions.models import Submission
from portal.teams import services
from portal.teams.models import Team, TeamInvitation, TeamMember
from tests import factories
from tests.submissions.test_concurrent_charging import source_archive


@pytest.fixture(autouse=True)
def _no_broker(sent: Any) -> None:
    """Uploads enqueue their builds; nothing is sent anywhere."""


def join(team: Team, user: Any, *, inviter: Any | None = None, **kwargs: Any) -> Team:
    invitation = services.team_invite(
        user=inviter or team.captain, benchmark=team.benchmark, username=user.username
    )
    return services.invitation_accept(user=user, invitation_id=invitation.pk, **kwargs)


def members(team: Team) -> list[str]:
    return sorted(TeamMember.objects.filter(team=team).values_list("user__username", flat=True))


def test_creating_a_team_makes_its_creator_captain_and_only_member(alice, benchmark):
    team = services.team_create(user=alice, benchmark=benchmark, name="  Fast   Cats ")

    assert team.name == "Fast Cats"
    assert team.captain == alice
    assert members(team) == ["alice"]
    event = AuditEvent.objects.get(action="team.create")
    assert (event.actor, event.target) == (alice, f"team:{team.pk}")


def test_a_team_name_is_unique_per_benchmark_whatever_its_case(alice, bob, benchmark):
    services.team_create(user=alice, benchmark=benchmark, name="Fast Cats")
    other = factories.BenchmarkFactory(opens_at=benchmark.opens_at, closes_at=benchmark.closes_at)

    with pytest.raises(errors.InvalidParameter, match="exists"):
        services.team_create(user=bob, benchmark=benchmark, name="fast cats")
    assert services.team_create(user=bob, benchmark=other, name="fast cats").name == "fast cats"


def test_an_entrant_is_in_at_most_one_team_per_benchmark(alice, bob, benchmark):
    team = services.team_create(user=alice, benchmark=benchmark, name="A")

    with pytest.raises(errors.InvalidParameter, match="already in a team"):
        services.team_create(user=alice, benchmark=benchmark, name="B")
    rival = services.team_create(user=bob, benchmark=benchmark, name="B")
    with pytest.raises(errors.InvalidParameter, match="already in a team"):
        services.team_invite(user=alice, benchmark=benchmark, username="bob")
    assert members(team) == ["alice"]
    assert members(rival) == ["bob"]


def test_accepting_after_joining_another_team_is_refused(alice, bob, benchmark):
    carol = factories.UserFactory(username="carol")
    first = services.team_create(user=alice, benchmark=benchmark, name="A")
    second = services.team_create(user=bob, benchmark=benchmark, name="B")
    to_first = services.team_invite(user=alice, benchmark=benchmark, username="carol")
    to_second = services.team_invite(user=bob, benchmark=benchmark, username="carol")

    services.invitation_accept(user=carol, invitation_id=to_first.pk)

    to_second.refresh_from_db()
    assert to_second.state == TeamInvitation.WITHDRAWN
    with pytest.raises(errors.NotFound):
        services.invitation_accept(user=carol, invitation_id=to_second.pk)
    assert members(first) == ["alice", "carol"]
    assert members(second) == ["bob"]


def test_a_team_holds_at_most_team_size_max_members(benchmark):
    benchmark.team_size_max = 2
    benchmark.save()
    alice, bob, carol, dave = (factories.UserFactory(username=n) for n in "abcd")
    team = services.team_create(user=alice, benchmark=benchmark, name="T")
    to_carol = services.team_invite(user=alice, benchmark=benchmark, username=carol.username)
    join(team, bob)

    with pytest.raises(errors.InvalidParameter, match="full"):
        services.team_invite(user=alice, benchmark=benchmark, username=dave.username)
    with pytest.raises(errors.InvalidParameter, match="full"):
        services.invitation_accept(user=carol, invitation_id=to_carol.pk)
    assert members(team) == ["a", "b"]


def test_team_size_max_one_means_no_teams(alice, benchmark):
    benchmark.team_size_max = 1
    benchmark.save()

    with pytest.raises(errors.InvalidParameter, match="no teams"):
        services.team_create(user=alice, benchmark=benchmark, name="T")
    assert not Team.objects.exists()


def test_a_declined_invitation_cannot_be_accepted_and_changes_no_team(alice, bob, benchmark):
    team = services.team_create(user=alice, benchmark=benchmark, name="T")
    invitation = services.team_invite(user=alice, benchmark=benchmark, username="bob")

    services.invitation_decline(user=bob, invitation_id=invitation.pk)

    with pytest.raises(errors.NotFound):
        services.invitation_accept(user=bob, invitation_id=invitation.pk)
    assert members(team) == ["alice"]
    assert AuditEvent.objects.filter(action="team.decline", actor=bob).count() == 1


def test_only_the_invitee_answers_an_invitation(alice, bob, benchmark):
    carol = factories.UserFactory(username="carol")
    services.team_create(user=alice, benchmark=benchmark, name="T")
    invitation = services.team_invite(user=alice, benchmark=benchmark, username="bob")

    with pytest.raises(errors.NotFound):
        services.invitation_accept(user=carol, invitation_id=invitation.pk)
    with pytest.raises(errors.NotFound):
        services.invitation_decline(user=alice, invitation_id=invitation.pk)


def test_membership_is_fixed_from_the_team_freeze(alice, bob, benchmark):
    carol = factories.UserFactory(username="carol")
    team = services.team_create(user=alice, benchmark=benchmark, name="T")
    join(team, bob)
    late = services.team_invite(user=alice, benchmark=benchmark, username="carol")
    benchmark.team_freeze_at = timezone.now() - dt.timedelta(seconds=1)
    benchmark.save()

    for change in (
        lambda: services.team_create(user=carol, benchmark=benchmark, name="U"),
        lambda: services.team_invite(user=alice, benchmark=benchmark, username="carol"),
        lambda: services.invitation_accept(user=carol, invitation_id=late.pk),
        lambda: services.team_leave(user=bob, benchmark=benchmark),
        lambda: services.team_remove(user=alice, benchmark=benchmark, username="bob"),
    ):
        with pytest.raises(errors.WindowClosed):
            change()
    assert members(team) == ["alice", "bob"]
    services.invitation_decline(user=carol, invitation_id=late.pk)  # still allowed


def test_without_a_freeze_membership_is_fixed_at_the_close(alice, bob, benchmark):
    team = services.team_create(user=alice, benchmark=benchmark, name="T")
    join(team, bob)

    with pytest.raises(errors.WindowClosed):
        services.team_leave(user=bob, benchmark=benchmark, now=benchmark.closes_at)
    services.team_leave(
        user=bob, benchmark=benchmark, now=benchmark.closes_at - dt.timedelta(seconds=1)
    )
    assert members(team) == ["alice"]


def test_only_the_captain_removes_members(alice, bob, benchmark):
    carol = factories.UserFactory(username="carol")
    team = services.team_create(user=alice, benchmark=benchmark, name="T")
    join(team, bob)
    join(team, carol)

    with pytest.raises(errors.PermissionDenied) as refused:
        services.team_remove(user=bob, benchmark=benchmark, username="carol")
    assert refused.value.code == "permission_denied"
    services.team_remove(user=alice, benchmark=benchmark, username="carol")

    assert members(team) == ["alice", "bob"]
    event = AuditEvent.objects.get(action="team.remove")
    assert (event.actor, event.details["member"]) == (alice, "carol")


def test_removing_someone_of_another_team_is_not_found(alice, bob, benchmark):
    services.team_create(user=alice, benchmark=benchmark, name="T")
    services.team_create(user=bob, benchmark=benchmark, name="U")

    with pytest.raises(errors.NotFound):
        services.team_remove(user=alice, benchmark=benchmark, username="bob")


def test_a_captain_who_leaves_hands_over_and_the_last_one_out_deletes_the_team(
    alice, bob, benchmark
):
    team = services.team_create(user=alice, benchmark=benchmark, name="T")
    join(team, bob)

    services.team_leave(user=alice, benchmark=benchmark)
    team.refresh_from_db()
    assert team.captain == bob
    assert services.team_leave(user=bob, benchmark=benchmark) is None

    assert not Team.objects.filter(pk=team.pk).exists()
    assert AuditEvent.objects.filter(action="team.leave").count() == 2
    # The name is free again.
    assert services.team_create(user=bob, benchmark=benchmark, name="T").name == "T"


# The shared allowance and the merge rule ----------------------------------------------


class Uploads:
    def __init__(self, benchmark: Any, tmp_path: Path) -> None:
        factories.cohorts(benchmark)
        self.benchmark = benchmark
        self.archive = tmp_path / "kit.tar.gz"
        self.archive.write_bytes(source_archive())

    def upload(
        self, user: Any, *, kind: str = Submission.OFFICIAL, environment: Any = None
    ) -> Submission:
        environment = environment or factories.EnvironmentFactory(
            owner=user, benchmark=self.benchmark
        )
        return submission_accept(
            entrant=user,
            benchmark=self.benchmark,
            environment=environment,
            source_file=self.archive,
            source_name="kit.tar.gz",
            kind=kind,
        )


def test_the_daily_allowance_is_the_teams(alice, bob, benchmark, tmp_path):
    uploads = Uploads(benchmark, tmp_path)  # 2 official attempts a day
    team = services.team_create(user=alice, benchmark=benchmark, name="T")
    join(team, bob)

    uploads.upload(alice)
    uploads.upload(bob)

    now = timezone.now()
    assert quota_for(alice, benchmark, Submission.OFFICIAL, now).used_today == 2
    assert quota_for(bob, benchmark, Submission.OFFICIAL, now).remaining_today == 0
    with pytest.raises(errors.QuotaExhausted, match="Your team has used all 2"):
        uploads.upload(alice)


def test_the_pages_show_the_days_attempts_at_once_across_uploads_joins_leaves_and_refunds(
    client, alice, bob, benchmark, tmp_path
):
    """The quota the pages show is cached per entrant and day: each upload, refund and
    change of team must show on the next page, never the count before it."""
    from django.core.cache import cache

    from portal.submissions.attempts import attempt_refund

    uploads = Uploads(benchmark, tmp_path)  # 2 official attempts a day
    client.force_login(alice)

    def left() -> str:
        text = " ".join(client.get(f"/b/{benchmark.slug}/").content.decode().split())
        start = text.index("official attempts left today") - 12
        return text[start : text.index(" official attempts left today")].rsplit(">", 1)[-1]

    cache.clear()
    assert left() == "2 of 2"
    uploads.upload(alice)
    assert left() == "1 of 2"
    team = services.team_create(user=bob, benchmark=benchmark, name="T")
    uploads.upload(bob)
    assert left() == "1 of 2"  # bob's attempt is not alice's while she is on her own
    join(team, alice, inviter=bob)
    assert left() == "0 of 2"  # the team's: alice's and bob's
    refunded = Submission.objects.filter(entrant=bob).get()
    assert attempt_refund(submission=refunded, reason="platform failure")
    assert left() == "1 of 2"
    services.team_leave(user=alice, benchmark=benchmark)
    assert left() == "1 of 2"  # her own again


def test_joining_is_refused_when_the_days_attempts_would_exceed_the_allowance(
    alice, bob, benchmark, tmp_path
):
    uploads = Uploads(benchmark, tmp_path)  # 2 official attempts a day
    carol = factories.UserFactory(username="carol")
    team = services.team_create(user=alice, benchmark=benchmark, name="T")
    uploads.upload(alice)
    uploads.upload(bob)
    uploads.upload(bob)  # bob has used his 2 today; the team 1

    invitation = services.team_invite(user=alice, benchmark=benchmark, username="bob")
    with pytest.raises(errors.InvalidParameter, match="over today's official allowance"):
        services.invitation_accept(user=bob, invitation_id=invitation.pk)
    uploads.upload(carol)  # carol has used 1: 1 + 1 fits in 2
    join(team, carol)

    assert members(team) == ["alice", "carol"]
    assert quota_for(alice, benchmark, Submission.OFFICIAL, timezone.now()).remaining_today == 0
    # bob may still answer later, on a day that leaves room: the invitation stays pending.
    invitation.refresh_from_db()
    assert invitation.state == TeamInvitation.PENDING


def test_the_merge_rule_counts_practice_runs_too(alice, bob, benchmark, tmp_path):
    benchmark.practice_per_day = 1
    benchmark.save()
    uploads = Uploads(benchmark, tmp_path)
    team = services.team_create(user=alice, benchmark=benchmark, name="T")
    uploads.upload(alice, kind=Submission.PRACTICE)
    uploads.upload(bob, kind=Submission.PRACTICE)

    invitation = services.team_invite(user=alice, benchmark=benchmark, username="bob")
    with pytest.raises(errors.InvalidParameter, match="practice"):
        services.invitation_accept(user=bob, invitation_id=invitation.pk)
    assert members(team) == ["alice"]


def test_a_member_who_leaves_leaves_their_charges_of_the_day_with_the_team_too(
    alice, bob, benchmark, tmp_path
):
    uploads = Uploads(benchmark, tmp_path)
    team = services.team_create(user=alice, benchmark=benchmark, name="T")
    join(team, bob)
    uploads.upload(bob)

    services.team_leave(user=bob, benchmark=benchmark)

    now = timezone.now()
    # The charge was made in the team: it counts against the team and against bob.
    assert quota_for(alice, benchmark, Submission.OFFICIAL, now).used_today == 1
    assert quota_for(bob, benchmark, Submission.OFFICIAL, now).used_today == 1


def test_a_member_submits_with_a_teammates_environment_and_an_outsider_cannot(
    alice, bob, benchmark, tmp_path
):
    uploads = Uploads(benchmark, tmp_path)
    carol = factories.UserFactory(username="carol")
    team = services.team_create(user=alice, benchmark=benchmark, name="T")
    join(team, bob)
    alices = factories.EnvironmentFactory(owner=alice, benchmark=benchmark)

    submission = uploads.upload(bob, environment=alices)

    assert (submission.entrant, submission.environment) == (bob, alices)
    with pytest.raises(errors.NotFound):
        uploads.upload(carol, environment=alices)
