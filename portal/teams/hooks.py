"""What the teams floor asks of the apps above it, answered by what they register from
their ``AppConfig.ready()``; this floor never imports them.

- **Attempts used** (:func:`attempts_used`): each kind's net charges of the attempt day of
  ``now`` for a set of entrants (``portal.submissions``), for the merge rule of a join.
- **Membership changed** (:func:`membership_changed`): called inside the transaction
  that changed a team, holding the row locks of the entrants named and of the team, so
  the board can show the team's best (``portal.submissions``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only
    from portal.contests.models import Benchmark
    from portal.teams.models import Team

AttemptsUsed = Callable[["Benchmark", Sequence[int], dt.datetime], dict[str, int]]
MembershipChanged = Callable[["Benchmark", "Team | None", Sequence[int]], None]

_attempts: list[AttemptsUsed] = []
_changed: list[MembershipChanged] = []


def attempts_register(used: AttemptsUsed) -> None:
    if used not in _attempts:
        _attempts.append(used)


def membership_register(changed: MembershipChanged) -> None:
    if changed not in _changed:
        _changed.append(changed)


def attempts_used(
    benchmark: Benchmark, user_ids: Sequence[int], now: dt.datetime
) -> dict[str, int]:
    """Net charges of today by kind (``official``, ``practice``), summed over the apps."""
    total: dict[str, int] = {}
    for used in _attempts:
        for kind, count in used(benchmark, user_ids, now).items():
            total[kind] = total.get(kind, 0) + count
    return total


def membership_changed(benchmark: Benchmark, team: Team | None, user_ids: Sequence[int]) -> None:
    """``team``: the team that changed (None once deleted); ``user_ids``: who left it or
    now stands alone."""
    for changed in _changed:
        changed(benchmark, team, user_ids)
