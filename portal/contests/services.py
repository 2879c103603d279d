"""Writes that keep the stored leaderboard equal to a from-scratch computation."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction

from portal.contests import rules
from portal.contests.models import Benchmark, LeaderboardEntry


def leaderboard_candidates(
    benchmark: Benchmark, entrant_id: int | None = None
) -> list[rules.Candidate]:
    """Every passing official scored run of non-disqualified submissions (optionally one
    entrant's). Verification runs never rank by themselves, and a submission that is being
    verified or failed its verification ranks with none of its runs."""
    from portal.submissions.models import Run, Submission

    runs = Run.objects.filter(
        submission__benchmark=benchmark,
        submission__kind=Submission.OFFICIAL,
        submission__disqualified_at__isnull=True,
        status=Run.FINISHED,
        purpose=Run.SCORE,
        passed=True,
        wall_time_ns__isnull=False,
    ).exclude(
        submission__status__in=[
            Submission.CANCELLED,
            Submission.VERIFYING,
            Submission.REJECTED_VERIFICATION,
        ]
    )
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

    Call inside the transaction that records a verdict, a disqualification or a
    cancellation, so the board never disagrees with the runs.

    Locking: the entrant's user row is locked first, so two such transactions for one
    entrant (a verdict while staff disqualify another of their runs) recompute one after
    the other; the later one then reads what the earlier one committed. Without it each
    would compute from a snapshot missing the other's change, and the last writer could
    put a disqualified run back on the board. ``FOR NO KEY UPDATE``: rows that merely
    reference the entrant (a ledger row written earlier in the same transaction) take
    key-share locks, which it does not wait for.
    """
    from portal.submissions.models import Run

    with transaction.atomic():
        list(
            get_user_model()
            .objects.select_for_update(no_key=True)
            .filter(pk=entrant_id)
            .values_list("pk", flat=True)
        )
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
