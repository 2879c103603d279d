"""The leaderboard's progress over a contest: each top entrant's best time as it improved."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from portal.contests.models import Benchmark, LeaderboardEntry
from portal.contests.selectors import RANK_ORDER
from portal.submissions.models import Run, Submission

TOP_ENTRANTS = 8


@dataclass(frozen=True)
class Improvement:
    """A passing official run that beat the entrant's earlier best (or was their first)."""

    at: dt.datetime  # when its upload was accepted
    wall_time_ns: int
    submission_id: int


@dataclass(frozen=True)
class ProgressSeries:
    rank: int
    entrant: str
    improvements: list[Improvement]

    @property
    def best_ns(self) -> int:
        return self.improvements[-1].wall_time_ns


def progress_series(benchmark: Benchmark, *, top: int = TOP_ENTRANTS) -> list[ProgressSeries]:
    """The ``top`` entrants of the board, in rank order, each with the runs that improved
    their best time, in upload order. Two queries, whatever the number of runs.

    The runs counted are exactly the board's candidates (see
    ``submissions.leaderboard.leaderboard_candidates``): passing, finished official runs of
    submissions neither disqualified nor cancelled. So each series ends at the wall
    time the board shows for that entrant.
    """
    leaders = list(
        LeaderboardEntry.objects.filter(benchmark=benchmark)
        .select_related("entrant")
        .order_by(*RANK_ORDER)[:top]
    )
    if not leaders:
        return []
    runs = (
        Run.objects.filter(
            submission__benchmark=benchmark,
            submission__kind=Submission.OFFICIAL,
            submission__disqualified_at__isnull=True,
            submission__entrant_id__in=[entry.entrant_id for entry in leaders],
            status=Run.FINISHED,
            passed=True,
            wall_time_ns__isnull=False,
        )
        .exclude(submission__status=Submission.CANCELLED)
        .order_by("submission__submitted_at", "submission_id", "id")
        .values_list(
            "submission__entrant_id", "submission__submitted_at", "submission_id", "wall_time_ns"
        )
    )
    improvements: dict[int, list[Improvement]] = {entry.entrant_id: [] for entry in leaders}
    for entrant_id, submitted_at, submission_id, wall_time_ns in runs:
        if wall_time_ns is None:  # excluded by the filter; keeps the type checker informed
            continue
        held = improvements[entrant_id]
        if not held or wall_time_ns < held[-1].wall_time_ns:
            held.append(Improvement(submitted_at, wall_time_ns, submission_id))
    return [
        ProgressSeries(rank, entry.entrant.get_username(), improvements[entry.entrant_id])
        for rank, entry in enumerate(leaders, start=1)
        if improvements[entry.entrant_id]
    ]
