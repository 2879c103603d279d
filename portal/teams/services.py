"""Forming teams: creating one, inviting, answering an invitation, leaving and removing.

Every change is audited and runs in one transaction holding row locks in one order: the
entrant whose membership changes (their user row), then the team's row. Uploads and
board refreshes take the same locks in the same order (``portal.submissions``), so a
join or a departure never interleaves with a charge of the same team's allowance.

Membership is fixed from the benchmark's team freeze (``Benchmark.teams_frozen_at``):
every change is refused ``window_closed`` from then on, except declining an invitation.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.contests.models import Benchmark
from portal.contests.rules import attempt_day
from portal.core import errors
from portal.teams import hooks
from portal.teams.locks import lock_team, lock_user
from portal.teams.models import Team, TeamInvitation, TeamMember
from portal.teams.selectors import member_ids, teammates_forget

NAME_MAX = Team._meta.get_field("name").max_length or 100
KINDS = {"official": "attempts_per_day", "practice": "practice_per_day"}


def days_run_before(*, today: dt.date, opening_day: dt.date, first_day: dt.date | None) -> int:
    """The attempt days before ``today`` that attempts could be charged on: from the
    opening's day, or from the first day the parties were charged when that is earlier
    (practice runs are accepted before the opening)."""
    start = opening_day if first_day is None else min(opening_day, first_day)
    return max(0, (today - start).days)


def merge_fits(*, per_day: int, days_before: int, counts: hooks.MergeCounts) -> bool:
    """The merge rule: a join is allowed when the team and the joiner together (each
    ledger row once) have used at most one day's allowance today (net of refunds, never
    below zero), and at most ``per_day`` times the earlier attempt days over those days.
    Then, whatever the merged team uploads today, its net charges over the contest stay
    within ``per_day`` times the attempt days run."""
    return max(0, counts.both_today) <= per_day and counts.both_before <= per_day * days_before


def _merge_refusal(
    benchmark: Benchmark, kind: str, per_day: int, counts: hooks.MergeCounts, start: dt.date
) -> str:
    """Why a join does not fit the merge rule, and from when it would (if neither uploads
    more meanwhile)."""
    if max(0, counts.both_today) > per_day:
        return (
            f"Joining would put the team over today's {kind} allowance: the team has used "
            f"{max(0, counts.team_today)} and you {max(0, counts.own_today)} of {per_day}. "
            f"Join on a later attempt day ({benchmark.attempt_timezone})."
        )
    days = -(-counts.both_before // per_day) if per_day > 0 else 0
    return (
        f"Joining would put the team over its {kind} allowance for the contest so far: the "
        f"team and you were charged {counts.both_before} {kind} attempts on the earlier "
        f"attempt days, more than {per_day} a day allows; a team's charges never exceed "
        f"the allowance times the days run. If neither uploads more, you may join from "
        f"the attempt day {(start + dt.timedelta(days=days)).isoformat()} "
        f"({benchmark.attempt_timezone})."
    )


def _check_changeable(benchmark: Benchmark, now: dt.datetime) -> None:
    if benchmark.team_size_max <= 1:
        raise errors.InvalidParameter("This benchmark has no teams: every entrant competes alone.")
    frozen_at = benchmark.teams_frozen_at()
    if now >= frozen_at:
        raise errors.WindowClosed(
            f"Teams on this benchmark are fixed since {frozen_at.isoformat()}: no team is "
            "created, joined, left or changed any more."
        )


def _membership_changed(benchmark: Benchmark, team: Team | None, user_ids: list[int]) -> None:
    """After a change of ``team`` (None once deleted) that ``user_ids`` joined or left:
    the pages' cached teammates of everyone concerned go, then the apps above are told."""
    teammates_forget(benchmark.pk, [*user_ids, *(member_ids(team) if team is not None else [])])
    hooks.membership_changed(benchmark, team, user_ids)


def _target(team: Team) -> str:
    return f"team:{team.pk}"


def team_create(
    *,
    user: Any,
    benchmark: Benchmark,
    name: str,
    origin: Origin = NOWHERE,
    now: dt.datetime | None = None,
) -> Team:
    """Create a team with ``user`` as its captain and only member."""
    now = now or timezone.now()
    name = " ".join(name.split())
    if not name or len(name) > NAME_MAX:
        raise errors.InvalidParameter(f"A team's name has 1 to {NAME_MAX} characters.")
    _check_changeable(benchmark, now)
    try:
        with transaction.atomic():
            lock_user(user.pk)
            held = TeamMember.objects.filter(benchmark=benchmark, user=user).first()
            if held is not None:
                raise errors.InvalidParameter(
                    "You are already in a team on this benchmark; leave it first."
                )
            if Team.objects.filter(benchmark=benchmark, name__iexact=name).exists():
                raise errors.InvalidParameter(f"A team named '{name}' exists on this benchmark.")
            team = Team.objects.create(benchmark=benchmark, name=name, captain=user, created_at=now)
            TeamMember.objects.create(team=team, benchmark=benchmark, user=user, joined_at=now)
            audit_record(
                actor=user,
                action="team.create",
                target=_target(team),
                origin=origin,
                details={"benchmark": benchmark.slug, "name": name},
            )
            _membership_changed(benchmark, team, [user.pk])
    except IntegrityError as exc:  # a concurrent create took the name
        raise errors.InvalidParameter(f"A team named '{name}' exists on this benchmark.") from exc
    return team


def team_invite(
    *,
    user: Any,
    benchmark: Benchmark,
    username: str,
    origin: Origin = NOWHERE,
    now: dt.datetime | None = None,
) -> TeamInvitation:
    """Invite ``username`` to the inviting member's team."""
    now = now or timezone.now()
    _check_changeable(benchmark, now)
    invitee = get_user_model().objects.filter(username=username, is_active=True).first()
    if invitee is None:
        raise errors.NotFound("No such user.")
    with transaction.atomic():
        lock_user(user.pk)
        member = TeamMember.objects.filter(benchmark=benchmark, user=user).first()
        if member is None:
            raise errors.NotFound("You are in no team on this benchmark.")
        team = lock_team(member.team_id)
        if invitee.pk == user.pk:
            raise errors.InvalidParameter("You are already in this team.")
        other = TeamMember.objects.filter(benchmark=benchmark, user=invitee).first()
        if other is not None:
            raise errors.InvalidParameter(
                f"{invitee.get_username()} is already in a team on this benchmark."
            )
        if TeamInvitation.objects.filter(
            team=team, invitee=invitee, state=TeamInvitation.PENDING
        ).exists():
            raise errors.InvalidParameter(
                f"{invitee.get_username()} already has an invitation to this team."
            )
        if TeamMember.objects.filter(team=team).count() >= benchmark.team_size_max:
            raise errors.InvalidParameter(
                f"The team is full: at most {benchmark.team_size_max} members on this benchmark."
            )
        invitation = TeamInvitation.objects.create(
            team=team, invitee=invitee, invited_by=user, created_at=now
        )
        audit_record(
            actor=user,
            action="team.invite",
            target=_target(team),
            origin=origin,
            details={"benchmark": benchmark.slug, "invitee": invitee.get_username()},
        )
    return invitation


def _pending_invitation(user: Any, invitation_id: int) -> TeamInvitation:
    invitation = (
        TeamInvitation.objects.select_related("team", "team__benchmark")
        .filter(pk=invitation_id, invitee=user, state=TeamInvitation.PENDING)
        .first()
    )
    if invitation is None:
        raise errors.NotFound("No such invitation.")
    return invitation


def invitation_accept(
    *, user: Any, invitation_id: int, origin: Origin = NOWHERE, now: dt.datetime | None = None
) -> Team:
    """Join the inviting team, if it has room, the user is in no team of its benchmark,
    and the merge rule holds (:func:`merge_fits`, each kind of attempt), read under the
    user's and the team's row locks, which every charge of either takes too."""
    now = now or timezone.now()
    invitation = _pending_invitation(user, invitation_id)
    benchmark = invitation.team.benchmark
    _check_changeable(benchmark, now)
    with transaction.atomic():
        lock_user(user.pk)
        invitation = _pending_invitation(user, invitation_id)
        team = lock_team(invitation.team_id)
        if TeamMember.objects.filter(benchmark=benchmark, user=user).exists():
            raise errors.InvalidParameter(
                "You are already in a team on this benchmark; leave it before joining another."
            )
        members = member_ids(team)
        if len(members) >= benchmark.team_size_max:
            raise errors.InvalidParameter(
                f"The team is full: at most {benchmark.team_size_max} members on this benchmark."
            )
        counted = hooks.merge_counts(benchmark, int(team.pk), members, int(user.pk), now)
        today = attempt_day(now, benchmark.attempt_timezone)
        opening_day = attempt_day(benchmark.opens_at, benchmark.attempt_timezone)
        for kind, field in KINDS.items():
            per_day = int(getattr(benchmark, field))
            counts = counted.get(kind, hooks.MergeCounts())
            days_before = days_run_before(
                today=today, opening_day=opening_day, first_day=counts.first_day
            )
            if not merge_fits(per_day=per_day, days_before=days_before, counts=counts):
                start = today - dt.timedelta(days=days_before)
                raise errors.InvalidParameter(
                    _merge_refusal(benchmark, kind, per_day, counts, start)
                )
        TeamMember.objects.create(team=team, benchmark=benchmark, user=user, joined_at=now)
        invitation.state, invitation.decided_at = TeamInvitation.ACCEPTED, now
        invitation.save(update_fields=["state", "decided_at"])
        # Other invitations of this benchmark cannot be accepted any more.
        TeamInvitation.objects.filter(
            invitee=user, team__benchmark=benchmark, state=TeamInvitation.PENDING
        ).update(state=TeamInvitation.WITHDRAWN, decided_at=now)
        audit_record(
            actor=user,
            action="team.join",
            target=_target(team),
            origin=origin,
            details={"benchmark": benchmark.slug, "invitation": invitation.pk},
        )
        _membership_changed(benchmark, team, [user.pk])
    return team


def invitation_decline(
    *, user: Any, invitation_id: int, origin: Origin = NOWHERE, now: dt.datetime | None = None
) -> TeamInvitation:
    """Decline an invitation (allowed after the freeze too: it changes no team)."""
    now = now or timezone.now()
    with transaction.atomic():
        lock_user(user.pk)
        invitation = _pending_invitation(user, invitation_id)
        invitation.state, invitation.decided_at = TeamInvitation.DECLINED, now
        invitation.save(update_fields=["state", "decided_at"])
        audit_record(
            actor=user,
            action="team.decline",
            target=_target(invitation.team),
            origin=origin,
            details={"benchmark": invitation.team.benchmark.slug, "invitation": invitation.pk},
        )
    return invitation


def _depart(team: Team, departing: Any, now: dt.datetime) -> Team | None:
    """Remove ``departing`` from ``team`` (both locked). An emptied team is deleted with
    its pending invitations; a team whose captain left gets its longest-standing member
    as captain. Returns the team, or None once deleted."""
    TeamMember.objects.filter(team=team, user=departing).delete()
    rest = list(TeamMember.objects.filter(team=team).order_by("joined_at", "id"))
    if not rest:
        team.delete()
        return None
    if team.captain_id == departing.pk:
        team.captain_id = rest[0].user_id
        team.save(update_fields=["captain"])
    return team


def team_leave(
    *, user: Any, benchmark: Benchmark, origin: Origin = NOWHERE, now: dt.datetime | None = None
) -> Team | None:
    """Leave one's team on the benchmark; returns the team, None if it was deleted."""
    now = now or timezone.now()
    _check_changeable(benchmark, now)
    with transaction.atomic():
        lock_user(user.pk)
        member = TeamMember.objects.filter(benchmark=benchmark, user=user).first()
        if member is None:
            raise errors.NotFound("You are in no team on this benchmark.")
        team = lock_team(member.team_id)
        target = _target(team)
        left = _depart(team, user, now)
        audit_record(
            actor=user,
            action="team.leave",
            target=target,
            origin=origin,
            details={"benchmark": benchmark.slug, "deleted": left is None},
        )
        _membership_changed(benchmark, left, [user.pk])
    return left


def team_remove(
    *,
    user: Any,
    benchmark: Benchmark,
    username: str,
    origin: Origin = NOWHERE,
    now: dt.datetime | None = None,
) -> Team:
    """The captain removes a member of their team."""
    now = now or timezone.now()
    _check_changeable(benchmark, now)
    own = TeamMember.objects.filter(benchmark=benchmark, user=user).first()
    if own is None:
        raise errors.NotFound("You are in no team on this benchmark.")
    removed = get_user_model().objects.filter(username=username).first()
    if removed is None:
        raise errors.NotFound("No such member.")
    if removed.pk == user.pk:
        raise errors.InvalidParameter("To leave your own team, leave it.")
    with transaction.atomic():
        lock_user(removed.pk)
        team = lock_team(own.team_id)
        if not TeamMember.objects.filter(team=team, user=removed).exists():
            raise errors.NotFound("No such member.")
        if team.captain_id != user.pk:
            raise errors.PermissionDenied("Only the team's captain removes members.")
        _depart(team, removed, now)
        audit_record(
            actor=user,
            action="team.remove",
            target=_target(team),
            origin=origin,
            details={"benchmark": benchmark.slug, "member": removed.get_username()},
        )
        _membership_changed(benchmark, team, [removed.pk])
    return team
