"""The progress chart: each top entrant's best time as it improved, drawn as plain SVG."""

from __future__ import annotations

import datetime as dt
import re

from django.utils import timezone

from portal.contests.models import LeaderboardEntry
from portal.submissions.models import Submission
from portal.submissions.progress import progress_series
from portal.web.chart import progress_chart, render_progress_svg
from tests import factories
from tests.web.boards import official_run

MS = 1_000_000


def test_a_series_holds_only_the_runs_that_beat_the_entrants_earlier_best(benchmark, alice):
    start = timezone.now() - dt.timedelta(days=3)
    for hours, wall_ms in ((0, 900), (5, 950), (10, 800), (20, 800), (30, 700)):
        official_run(benchmark, alice, wall_ms * MS, at=start + dt.timedelta(hours=hours))

    (series,) = progress_series(benchmark)

    assert series.entrant == "alice" and series.rank == 1
    assert [step.wall_time_ns // MS for step in series.improvements] == [900, 800, 700]
    assert [step.at for step in series.improvements] == [
        start,
        start + dt.timedelta(hours=10),
        start + dt.timedelta(hours=30),
    ]


def test_runs_the_board_ignores_are_not_drawn(benchmark, alice):
    start = timezone.now() - dt.timedelta(days=2)
    official_run(benchmark, alice, 900 * MS, at=start)
    official_run(benchmark, alice, 100 * MS, at=start + dt.timedelta(hours=1), passed=False)
    official_run(benchmark, alice, 200 * MS, at=start + dt.timedelta(hours=2), kind="practice")
    official_run(
        benchmark,
        alice,
        300 * MS,
        at=start + dt.timedelta(hours=3),
        disqualified_at=timezone.now(),
    )
    official_run(
        benchmark, alice, 400 * MS, at=start + dt.timedelta(hours=4), status=Submission.CANCELLED
    )

    (series,) = progress_series(benchmark)

    assert [step.wall_time_ns // MS for step in series.improvements] == [900]
    assert series.best_ns == LeaderboardEntry.objects.get(entrant=alice).wall_time_ns


def test_only_the_top_entrants_in_board_order(benchmark):
    for index in range(10):
        official_run(benchmark, factories.UserFactory(username=f"r{index}"), (100 - index) * MS)

    series = progress_series(benchmark, top=3)

    assert [(s.rank, s.entrant) for s in series] == [(1, "r9"), (2, "r8"), (3, "r7")]


def test_the_svg_needs_no_script_and_no_other_site(benchmark, alice, bob):
    start = timezone.now() - dt.timedelta(days=4)
    official_run(benchmark, alice, 1_500 * MS, at=start)
    official_run(benchmark, alice, 1_234_567_891, at=start + dt.timedelta(days=1))
    official_run(benchmark, bob, 2_000 * MS, at=start + dt.timedelta(days=2))

    svg = render_progress_svg(
        progress_series(benchmark), zone="Asia/Seoul", start=start, end=timezone.now()
    )

    assert svg.startswith('<svg role="img"')
    assert "<title>Best wall time of the top entrants</title>" in svg
    assert "leading: alice at 1,234.568 ms" in svg  # the description
    assert "<script" not in svg and "<!--" not in svg
    assert not re.search(r"https?://", svg)
    assert "upload accepted (KST)" in svg
    assert "1. alice" in svg and "2. bob" in svg
    # One native tooltip per improvement, with the exact time and the upload's moment in KST.
    tooltips = re.findall(r"<title>(\w+): ([\d,.]+ ms), uploaded ([^<]+)</title>", svg)
    assert [(name, shown) for name, shown, _ in tooltips] == [
        ("alice", "1,500.000 ms"),
        ("alice", "1,234.568 ms"),
        ("bob", "2,000.000 ms"),
    ]
    assert all("KST" in moment and "UTC" in moment for _, _, moment in tooltips)


def test_the_chart_is_cached_until_the_board_changes(benchmark, alice, bob):
    now = timezone.now()
    official_run(benchmark, alice, 900 * MS)
    first = progress_chart(benchmark, now=now)
    assert progress_chart(benchmark, now=now) == first

    official_run(benchmark, bob, 800 * MS)

    again = progress_chart(benchmark, now=now)
    assert again.key != first.key
    assert [s.entrant for s in again.series] == ["bob", "alice"]


def test_an_empty_board_draws_nothing(benchmark):
    chart = progress_chart(benchmark, now=timezone.now())

    assert chart.svg == "" and chart.series == []
