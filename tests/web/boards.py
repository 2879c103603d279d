"""Rows for the leaderboard tests: official runs and the stored board, as the services keep it."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from portal.contests.models import Cohort, LeaderboardEntry
from portal.submissions.leaderboard import leaderboard_refresh_entrant
from portal.submissions.models import Run, Submission
from tests import factories


def official_run(
    benchmark,
    entrant,
    wall_time_ns: int,
    *,
    at: dt.datetime | None = None,
    passed: bool = True,
    matches: int = 9950,
    kind: str = Submission.OFFICIAL,
    **submission_fields,
) -> Run:
    """A finished run of a new submission of ``entrant``; the board is refreshed as the
    verdict service does."""
    environment = factories.EnvironmentFactory(owner=entrant, benchmark=benchmark)
    cohort_kind = Cohort.PRACTICE if kind == Submission.PRACTICE else Cohort.OFFICIAL
    cohort, _ = Cohort.objects.get_or_create(benchmark=benchmark, kind=cohort_kind)
    values = {
        "entrant": entrant,
        "benchmark": benchmark,
        "environment": environment,
        "kind": kind,
        "status": Submission.PASSED if passed else Submission.FAILED,
        "submitted_at": at or timezone.now() - dt.timedelta(hours=1),
        "source_name": "src.tar.gz",
        "source_format": "tar.gz",
        "source_sha256": "a" * 64,
        "source_bytes": 100,
    }
    submission = Submission.objects.create(**{**values, **submission_fields})
    run = Run.objects.create(
        submission=submission,
        cohort=cohort,
        status=Run.FINISHED,
        verdict="passed" if passed else "failed",
        wall_time_ns=wall_time_ns,
        matches=matches,
        total=10000,
        passed=passed,
    )
    leaderboard_refresh_entrant(benchmark=benchmark, entrant_id=entrant.pk)
    return run


def board_entry(benchmark, entrant, wall_time_ns: int, matches: int = 9950) -> LeaderboardEntry:
    """A passing official run of ``entrant`` on the stored leaderboard."""
    official_run(benchmark, entrant, wall_time_ns, matches=matches)
    return LeaderboardEntry.objects.get(benchmark=benchmark, entrant=entrant)
