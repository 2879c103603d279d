"""The row locks that guard what a team shares (its allowance, its nominations), in their
one order: the entrant's user row first, then their team's row.

Uploads (``portal.submissions.intake``), the board's refresh, nominations
(``portal.standings``) and changes of membership (``services``) all take them in this
order, so they serialize without deadlock.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model

from portal.contests.models import Benchmark
from portal.core import errors
from portal.teams.models import Team


def lock_user(user_id: int) -> None:
    list(get_user_model().objects.select_for_update().filter(pk=user_id).values_list("pk"))


def lock_team(team_id: int) -> Team:
    team = Team.objects.select_for_update().filter(pk=team_id).first()
    if team is None:
        raise errors.NotFound("No such team.")
    return team


def lock_identity(*, entrant_id: int, benchmark: Benchmark) -> Team | None:
    """Lock the entrant's user row, then, when they are in a team on ``benchmark``, the
    team's row (inside a transaction); returns that team, or None for an entrant on their
    own.

    Two members of one team lock different user rows but the same team row, so what they
    do to the team's shared state (an upload's charge, its nominations) serializes on it;
    the user row comes first because a change of membership locks the entrant's row first
    too: while it is held, the entrant cannot join or leave, so the team found here stays
    theirs until the commit, and both orders agree (no deadlock). Under READ COMMITTED,
    each statement after the lock reads what the previous holder committed, so a quota
    counted next includes the charge of a concurrent upload that got the lock first.
    """
    lock_user(entrant_id)
    team_id = (
        Team.objects.filter(benchmark=benchmark, members__user_id=entrant_id)
        .values_list("pk", flat=True)
        .first()
    )
    return None if team_id is None else lock_team(team_id)
