"""Writes that keep the stored leaderboard equal to a from-scratch computation."""

from __future__ import annotations

from django.db import transaction

from portal.contests import rules
from portal.contests.models import Benchmark, LeaderboardEntry


def leaderboard_candidates(
    benchmark: Benchmark, entrant_id: int | None = None
) -> list[rules.Candidate]:
    """Every passing official run of non-disqualified submissions (optionally one entrant's)."""
    from portal.submissions.models import Run, Submission

    runs = Run.objects.filter(
        submission__benchmark=benchmark,
        submission__kind=Submission.OFFICIAL,
        submission__disqualified_at__isnull=True,
        status=Run.FINISHED,
        passed=True,
        wall_time_ns__isnull=False,
    ).exclude(submission__status=Submission.CANCELLED)
    if entrant_id is not None:
        runs = runs.filter(submission__entrant_id=entrant_id)
    return [
        rules.Candidate(
            entrant_id=row["submission__entrant_id"],
            run_id=row["id"],
            submission_id=row["submission_id"],
            wall_time_ns=row["wall_time_ns"] or 0,
            submitted_at=row["submission__submitted_at"],
        )
        for row in runs.values(
            "id",
            "submission_id",
            "submission__entrant_id",
            "submission__submitted_at",
            "wall_time_ns",
        )
    ]


def leaderboard_refresh_entrant(*, benchmark: Benchmark, entrant_id: int) -> None:
    """Recompute one entrant's row from all their runs.

    Call inside the transaction that records a verdict or a disqualification, so the
    board never disagrees with the runs.
    """
    from portal.submissions.models import Run

    with transaction.atomic():
        best = rules.best_per_entrant(leaderboard_candidates(benchmark, entrant_id))
        if not best:
            LeaderboardEntry.objects.filter(benchmark=benchmark, entrant_id=entrant_id).delete()
            return
        top = best[0]
        run = Run.objects.get(pk=top.run_id)
        LeaderboardEntry.objects.update_or_create(
            benchmark=benchmark,
            entrant_id=entrant_id,
            defaults={
                "submission_id": top.submission_id,
                "run_id": top.run_id,
                "wall_time_ns": top.wall_time_ns,
                "matches": run.matches or 0,
                "total": run.total or 0,
                "submitted_at": top.submitted_at,
            },
        )
