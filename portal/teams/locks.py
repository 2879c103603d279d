"""The row locks that guard a team's shared allowance, in their one order: the entrant's
user row first, then their team's row.

Uploads (``portal.submissions.intake``), the board's refresh and changes of membership
(``services``) all take them in this order, so they serialize without deadlock.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model

from portal import errors
from portal.contests.models import Benchmark
from portal.teams.models import Team


def lock_user(user_id: int) -> None:
    list(get_user_model().objects.select_for_update().filter(pk=user_id).values_list("pk"))


def lock_team(team_id: int) -> Team:
    team = Team.objects.select_for_update().filter(pk=team_id).first()
    if team is None:
        raise errors.NotFound("No such team.")
    return team


def lock_allowance(*, entrant_id: int, benchmark: Benchmark) -> None:
    """Lock the rows that guard the entrant's daily allowance, inside a transaction: the
    entrant's user row, then, when they are in a team on ``benchmark``, the team's row.

    Two members of one team lock different user rows but the same team row, so their
    uploads serialize on it; the user row comes first because a change of membership
    locks the entrant's row first too: while an upload holds it, the entrant cannot join
    or leave, so the team found here stays theirs until the commit, and both orders agree
    (no deadlock). Under READ COMMITTED, each statement after the lock reads what the
    previous holder committed, so the quota counted next includes the charge of a
    concurrent upload that got the lock first.
    """
    lock_user(entrant_id)
    team_id = (
        Team.objects.filter(benchmark=benchmark, members__user_id=entrant_id)
        .values_list("pk", flat=True)
        .first()
    )
    if team_id is not None:
        lock_team(team_id)
