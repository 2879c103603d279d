"""``podium benchmarks``, ``podium leaderboard`` and ``podium quota``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from portal.contests.models import Cohort, LeaderboardEntry
from portal.submissions.models import Run, Submission
from tests import factories
from tests.cli.conftest import Podium


def test_benchmarks_lists_each_with_its_status_and_window(
    server: str, benchmark: Any, podium: Podium
) -> None:
    now = timezone.now()
    factories.BenchmarkFactory(
        slug="next-year",
        title="Next year's",
        opens_at=now + dt.timedelta(days=300),
        closes_at=now + dt.timedelta(days=310),
    )

    result = podium("--url", server, "benchmarks")  # public: no sign-in needed

    assert result.code == 0, result.err
    header, *rows = result.out.splitlines()
    assert header.split() == ["SLUG", "TITLE", "STATUS", "OPENS", "CLOSES"]
    by_slug = {row.split()[0]: row for row in rows}
    assert set(by_slug) == {benchmark.slug, "next-year"}
    assert " open " in by_slug[benchmark.slug]
    assert " upcoming " in by_slug["next-year"]
    assert benchmark.opens_at.astimezone().strftime("%Y-%m-%d %H:%M") in by_slug[benchmark.slug]


def test_an_empty_leaderboard_says_so(server: str, benchmark: Any, podium: Podium) -> None:
    result = podium("--url", server, "leaderboard", benchmark.slug)

    assert result.code == 0, result.err
    assert result.out == f"No passing official runs on {benchmark.slug} yet.\n"


def test_the_leaderboard_ranks_entrants_with_wall_time_and_matches(
    server: str,
    benchmark: Any,
    alice: Any,
    bob: Any,
    podium: Podium,
    ready_environment: Callable[..., Any],
) -> None:
    cohort = Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    for rank, (user, wall_time_ns) in enumerate([(bob, 2_500_000), (alice, 9_123_456_789)], 1):
        submission = Submission.objects.create(
            entrant=user,
            benchmark=benchmark,
            environment=ready_environment(user, benchmark),
            status=Submission.PASSED,
            submitted_at=timezone.now(),
            source_name="kit.tar.gz",
            source_format="tar.gz",
            source_sha256="a" * 64,
            source_bytes=10,
        )
        run = Run.objects.create(
            submission=submission,
            cohort=cohort,
            status=Run.FINISHED,
            passed=True,
            wall_time_ns=wall_time_ns,
            matches=24 - rank,
            total=24,
        )
        LeaderboardEntry.objects.create(
            benchmark=benchmark,
            entrant=user,
            submission=submission,
            run=run,
            wall_time_ns=wall_time_ns,
            matches=24 - rank,
            total=24,
            submitted_at=submission.submitted_at,
        )

    result = podium("--url", server, "leaderboard", benchmark.slug)

    assert result.code == 0, result.err
    header, first, second = result.out.splitlines()
    assert header.split() == ["RANK", "ENTRANT", "WALL", "TIME", "MATCHES", "SUBMITTED"]
    assert first.split()[:5] == ["1", "bob", "2.500000", "ms", "23/24"]
    assert second.split()[:5] == ["2", "alice", "9123.456789", "ms", "22/24"]


def test_quota_shows_used_and_left_of_both_kinds(
    server: str,
    benchmark: Any,
    alice: Any,
    podium: Podium,
    sign_in: Callable[[Any], str],
    ready_environment: Callable[..., Any],
    kit: Any,
) -> None:
    sign_in(alice)
    environment = ready_environment(alice, benchmark)
    assert podium("submit", benchmark.slug, "--env", str(environment.pk), str(kit)).code == 0

    result = podium("quota", benchmark.slug)

    assert result.code == 0, result.err
    header, official, practice, zone = result.out.splitlines()
    assert header.split()[:4] == ["KIND", "USED", "TODAY", "LEFT"]
    assert official.split()[:5] == ["official", "1", "of", "2", "1"]
    assert practice.split()[:5] == ["practice", "0", "of", "10", "10"]
    assert zone == "Days are counted in Asia/Seoul."
