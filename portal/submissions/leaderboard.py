"""The board as submissions and runs make it: the writes that keep the stored leaderboard
(``contests.LeaderboardEntry``) equal to a from-scratch computation, and the official
submissions held off it while they are verified."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from portal.contests import rules
from portal.contests.models import Benchmark, LeaderboardEntry
from portal.submissions.models import Run, Submission


def leaderboard_candidates(
    benchmark: Benchmark, entrant_id: int | None = None
) -> list[rules.Candidate]:
    """Every passing official scored run of non-disqualified submissions (optionally one
    entrant's). Verification runs never rank by themselves, and a submission that is being
    verified or failed its verification ranks with none of its runs."""
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


@dataclass(frozen=True)
class VerifyingRow:
    """A passing official run held off the board until its verification run confirms it."""

    entrant: str
    wall_time_ns: int
    submission_id: int
    submitted_at: dt.datetime


def verifying_rows(benchmark: Benchmark) -> list[VerifyingRow]:
    """Official submissions being verified, fastest first, with their official wall time.
    One query."""
    runs = (
        Run.objects.filter(
            submission__benchmark=benchmark,
            submission__kind=Submission.OFFICIAL,
            submission__status=Submission.VERIFYING,
            purpose=Run.SCORE,
            status=Run.FINISHED,
            passed=True,
        )
        .order_by("submission_id", "-try_number")
        .values(
            "submission_id",
            "wall_time_ns",
            "submission__submitted_at",
            "submission__entrant__username",
        )
    )
    latest: dict[int, VerifyingRow] = {}
    for run in runs:
        latest.setdefault(
            run["submission_id"],
            VerifyingRow(
                entrant=run["submission__entrant__username"],
                wall_time_ns=run["wall_time_ns"] or 0,
                submission_id=run["submission_id"],
                submitted_at=run["submission__submitted_at"],
            ),
        )
    return sorted(latest.values(), key=lambda row: (row.wall_time_ns, row.submitted_at))
