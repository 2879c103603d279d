"""Every graded official attempt of a benchmark: what the every-attempt chart and the
attempts API draw from.

A *graded* attempt is an official submission that finished scoring with a verdict on
accuracy: its status is ``passed`` or ``failed`` and its latest score run finished with
a wall time. Submissions that never ran (build failures, infrastructure errors, runs
that crashed), cancelled or disqualified ones, and those still held for verification
are left out, as the board leaves them out. Failed attempts are kept (the chart draws
them apart); they never rank.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass

from django.core.cache import cache
from django.db.models import Count, F, FilteredRelation, Max, Q, QuerySet, Sum

from portal.contests.models import Benchmark
from portal.submissions.models import Run, Submission

# How long a fingerprint of the attempts is reused before it is read again.
FRESH_S = 30


@dataclass(frozen=True)
class Attempt:
    submission_id: int
    entrant_id: int
    entrant: str  # the uploader's username
    submitted_at: dt.datetime
    wall_time_ns: int
    passed: bool
    team: str = ""  # the uploader's team on the benchmark, "" when on their own

    @property
    def label(self) -> str:
        """The name the board shows for the attempt's entrant: the team's, or theirs."""
        return self.team or self.entrant


def _graded_runs(benchmark: Benchmark) -> QuerySet[Run]:
    return Run.objects.filter(
        submission__benchmark=benchmark,
        submission__kind=Submission.OFFICIAL,
        submission__status__in=Submission.GRADED,
        submission__disqualified_at__isnull=True,
        purpose=Run.SCORE,
        status=Run.FINISHED,
        passed__isnull=False,
        wall_time_ns__isnull=False,
    ).annotate(
        # The uploader's membership on this benchmark (at most one): a LEFT JOIN.
        membership=FilteredRelation(
            "submission__entrant__team_memberships",
            condition=Q(submission__entrant__team_memberships__benchmark_id=benchmark.pk),
        )
    )


def attempts_fingerprint(benchmark: Benchmark) -> str:
    """A fingerprint of the graded attempts: moves with a new graded attempt, a new score
    try, a disqualification or a change of status, and with a change of team of anyone
    who has a graded attempt (joining, leaving, a team dissolved and formed again: the
    names the attempts carry). One aggregate query over all of them."""
    seen = _graded_runs(benchmark).aggregate(
        runs=Count("id"),
        last=Max("id"),
        ids=Sum("submission_id"),
        times=Sum("wall_time_ns"),
        teamed=Count("membership__id"),
        teams=Sum("membership__team_id"),
    )
    return "{runs}-{last}-{ids}-{times}-{teamed}-{teams}".format(**seen)


def attempts_version(benchmark: Benchmark, board_key: str) -> str:
    """What the drawings of the attempts are cached by: the board's version (``board_key``,
    so a change of the board shows at once) and the attempts' fingerprint, itself cached
    for :data:`FRESH_S` (so an attempt that changes no row of the board, a failed one or a
    slower pass, shows within that). No query while the fingerprint is cached."""
    key = f"podium:attempts-fingerprint:{benchmark.pk}"
    now = time.time()
    cached: tuple[float, str] | None = cache.get(key)
    if cached is not None and 0 <= now - cached[0] < FRESH_S:
        return f"{board_key}:{cached[1]}"
    # Stale or missing: one request reads it again while the others go on with the stale
    # one (no stampede of aggregate queries when it expires under load).
    if cached is not None and not cache.add(f"{key}:reading", 1, FRESH_S):
        return f"{board_key}:{cached[1]}"
    fingerprint = attempts_fingerprint(benchmark)
    cache.set(key, (now, fingerprint), FRESH_S * 20)
    cache.delete(f"{key}:reading")
    return f"{board_key}:{fingerprint}"


def graded_attempts(
    benchmark: Benchmark, entrant_ids: Sequence[int] | None = None
) -> list[Attempt]:
    """Every graded official attempt (optionally only those of ``entrant_ids``: one
    entrant, or a team's members), in upload order, one per submission (its latest score
    try), with the uploader's team. One query, only the columns drawn."""
    runs = _graded_runs(benchmark)
    if entrant_ids is not None:
        runs = runs.filter(submission__entrant_id__in=list(entrant_ids))
    rows = runs.order_by("submission__submitted_at", "submission_id", "-try_number").values_list(
        "submission_id",
        "submission__entrant_id",
        "submission__entrant__username",
        "submission__submitted_at",
        "wall_time_ns",
        "passed",
        F("membership__team__name"),  # the FilteredRelation's alias, as an expression
    )
    attempts: list[Attempt] = []
    last_submission = None
    for submission_id, entrant_id, username, submitted_at, wall_time_ns, passed, team in rows:
        if submission_id == last_submission:
            continue  # an earlier try of the same submission
        last_submission = submission_id
        attempts.append(
            Attempt(
                submission_id=submission_id,
                entrant_id=entrant_id,
                entrant=username,
                submitted_at=submitted_at,
                wall_time_ns=int(wall_time_ns or 0),
                passed=bool(passed),
                team=team or "",
            )
        )
    return attempts
