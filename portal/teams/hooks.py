"""What the teams floor asks of the apps above it, answered by what they register from
their ``AppConfig.ready()``; this floor never imports them.

- **Merge counts** (:func:`merge_counts`): each kind's net charges of a team and of an
  entrant who would join it, today and over the earlier attempt days
  (``portal.submissions``), for the merge rule of a join.
- **Membership changed** (:func:`membership_changed`): called inside the transaction
  that changed a team, holding the row locks of the entrants named and of the team, so
  the board can show the team's best (``portal.submissions``) and the team's
  nominations follow its members (``portal.standings``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only
    from portal.contests.models import Benchmark
    from portal.teams.models import Team


@dataclass(frozen=True)
class MergeCounts:
    """One kind's charges net of refunds, as the merge rule reads them: the team's and the
    joiner's of today (each as it counts them alone), the two together of today and of
    the earlier attempt days (each ledger row once), and the first attempt day either was
    charged (None: never)."""

    team_today: int = 0
    own_today: int = 0
    both_today: int = 0
    both_before: int = 0
    first_day: dt.date | None = None


# (benchmark, the team's id, its members' user ids, the joiner's user id, now)
MergeCounter = Callable[["Benchmark", int, Sequence[int], int, dt.datetime], dict[str, MergeCounts]]
MembershipChanged = Callable[["Benchmark", "Team | None", Sequence[int]], None]

_counters: list[MergeCounter] = []
_changed: list[MembershipChanged] = []


def merge_counts_register(counter: MergeCounter) -> None:
    if counter not in _counters:
        _counters.append(counter)


def membership_register(changed: MembershipChanged) -> None:
    if changed not in _changed:
        _changed.append(changed)


def merge_counts(
    benchmark: Benchmark, team_id: int, member_ids: Sequence[int], joiner_id: int, now: dt.datetime
) -> dict[str, MergeCounts]:
    """Each kind's :class:`MergeCounts` (``official``, ``practice``), summed over the apps
    (the earliest first day of any)."""
    total: dict[str, MergeCounts] = {}
    for counter in _counters:
        for kind, found in counter(benchmark, team_id, member_ids, joiner_id, now).items():
            seen = total.get(kind, MergeCounts())
            days = [day for day in (seen.first_day, found.first_day) if day is not None]
            total[kind] = MergeCounts(
                team_today=seen.team_today + found.team_today,
                own_today=seen.own_today + found.own_today,
                both_today=seen.both_today + found.both_today,
                both_before=seen.both_before + found.both_before,
                first_day=min(days, default=None),
            )
    return total


def membership_changed(benchmark: Benchmark, team: Team | None, user_ids: Sequence[int]) -> None:
    """``team``: the team that changed (None once deleted); ``user_ids``: who left it or
    now stands alone."""
    for changed in _changed:
        changed(benchmark, team, user_ids)
