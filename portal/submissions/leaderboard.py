"""The board as submissions and runs make it: the writes that keep the stored leaderboard
(``contests.LeaderboardEntry``) equal to a from-scratch computation, and the official
submissions held off it while they are verified."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from portal.contests import rules
from portal.contests.models import Benchmark, LeaderboardEntry
from portal.submissions.models import Run, Submission
from portal.teams.models import Team
from portal.teams.selectors import member_ids


def leaderboard_candidates(
    benchmark: Benchmark, entrant_ids: Sequence[int] | None = None
) -> list[rules.Candidate]:
    """Every passing official scored run of non-disqualified submissions (optionally only
    those of ``entrant_ids``). Verification runs never rank by themselves, and a submission
    that is being verified or failed its verification ranks with none of its runs."""
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
    if entrant_ids is not None:
        runs = runs.filter(submission__entrant_id__in=list(entrant_ids))
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
    """Recompute the row of the entrant's board identity (their team's, or their own)
    from all its runs.

    Call inside the transaction that records a verdict, a disqualification or a
    cancellation, so the board never disagrees with the runs.

    Locking: the entrant's user row is locked first, then their team's row when they
    are in one, so two such transactions for one identity (a verdict while staff
    disqualify another of their runs; two teammates' verdicts) recompute one after the
    other; the later one then reads what the earlier one committed. Without it each
    would compute from a snapshot missing the other's change, and the last writer could
    put a disqualified run back on the board. ``FOR NO KEY UPDATE``: rows that merely
    reference the entrant (a ledger row written earlier in the same transaction) take
    key-share locks, which it does not wait for. The order (user, then team) is the one
    uploads and changes of membership take (``teams.locks``).
    """
    with transaction.atomic():
        list(
            get_user_model()
            .objects.select_for_update(no_key=True)
            .filter(pk=entrant_id)
            .values_list("pk", flat=True)
        )
        team = (
            Team.objects.select_for_update(no_key=True)
            .filter(benchmark=benchmark, members__user_id=entrant_id)
            .first()
        )
        _refresh_identity(benchmark, team, [entrant_id] if team is None else member_ids(team))


def leaderboard_refresh_team(
    benchmark: Benchmark, team: Team | None, user_ids: Sequence[int]
) -> None:
    """After a change of membership (``portal.teams.hooks``, holding the locks of the
    team and of ``user_ids``): the team's row from its members' runs, and the own row of
    each of ``user_ids`` no longer in it."""
    members = [] if team is None else member_ids(team)
    if team is not None:
        _refresh_identity(benchmark, team, members)
    for user_id in user_ids:
        if user_id not in members:
            _refresh_identity(benchmark, None, [user_id])


def _refresh_identity(benchmark: Benchmark, team: Team | None, entrant_ids: Sequence[int]) -> None:
    """One board row for ``entrant_ids`` (a team's members, or one entrant): the best of
    their runs, on the row of the member whose run it is; no other row of theirs."""
    candidates = leaderboard_candidates(benchmark, entrant_ids)
    top = min(candidates, key=lambda c: (rules.rank_key(c), c.entrant_id), default=None)
    LeaderboardEntry.objects.filter(benchmark=benchmark, entrant_id__in=list(entrant_ids)).exclude(
        entrant_id=None if top is None else top.entrant_id
    ).delete()
    if top is None:
        return
    run = Run.objects.get(pk=top.run_id)
    LeaderboardEntry.objects.update_or_create(
        benchmark=benchmark,
        entrant_id=top.entrant_id,
        defaults={
            "submission_id": top.submission_id,
            "run_id": top.run_id,
            "wall_time_ns": top.wall_time_ns,
            "matches": run.matches or 0,
            "total": run.total or 0,
            "submitted_at": top.submitted_at,
            "team_name": "" if team is None else team.name,
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
