"""Public pages: the benchmark list, one benchmark (rules, board, chart) and the full board."""

from __future__ import annotations

import functools

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from portal.contests import rules
from portal.contests.hardware import class_hardware
from portal.contests.models import Benchmark
from portal.contests.phases import HUB_ANNOUNCEMENTS, announcements_of, hub_entries
from portal.contests.selectors import (
    LeaderboardRow,
    benchmark_stamp,
    leaderboard_page,
    leaderboard_standing,
    leaderboard_version,
    practice_cohort,
    schedule_at,
    verification_canaries,
)
from portal.environments.selectors import build_network_state
from portal.standings.selectors import board_state, final_outline
from portal.standings.writeups import public_writeups
from portal.submissions.attempts import quotas_for
from portal.submissions.leaderboard import verifying_rows
from portal.teams.selectors import shown_identity, shown_teammate_ids
from portal.web.attempts_chart import attempts_chart
from portal.web.chart import progress_chart
from portal.web.estimation import benchmark_page as estimation_page

BOARD_PREVIEW_ROWS = 20
BOARD_PAGE_ROWS = 100
# The rules are cached per version of the benchmark's row (an edit shows at once); what
# they say of the hosts (hardware, pins, noise band, reference spread, CPUs) and of the
# build network's last check may be this much older than the page.
RULES_CACHE_S = 60


def benchmark_list(request: HttpRequest) -> HttpResponse:
    """The hub: every contest with its phases and every benchmark of no contest (open
    first), and the latest announcements of all contests."""
    context = {
        "entries": hub_entries(timezone.now()),
        "announcements": list(announcements_of()[:HUB_ANNOUNCEMENTS]),
    }
    return render(request, "contests/benchmark_list.html", context)


def benchmark_detail(request: HttpRequest, slug: str) -> HttpResponse:
    """Rules, the top of the board, the progress chart, and the viewer's own standing.

    A fixed number of queries whatever the size of the board (tests hold it to that).
    What every viewer sees is cached: the board's rendering and the chart per version of
    the board, the rules per version of the benchmark's row for ``RULES_CACHE_S`` (what
    they read of the hosts and the build network is passed in as callables, called only
    when the cached fragment is drawn again).
    """
    benchmark = get_object_or_404(Benchmark.objects.select_related("contest"), slug=slug)
    if benchmark.kind == Benchmark.ESTIMATION:  # its own page (portal/web/estimation.py)
        return estimation_page(request, benchmark)
    now = timezone.now()
    version = leaderboard_version(benchmark)
    quotas = []
    standing = None
    members: list[int] = []
    if request.user.is_authenticated:
        identity = shown_identity(benchmark.pk, request.user.pk)
        members = identity.member_ids
        quotas = quotas_for(request.user, benchmark, now, identity=identity)
        standing = leaderboard_standing(benchmark, request.user, teammates=members, version=version)
    practice = practice_cohort(benchmark)
    show_all = request.GET.get("show") == "all"
    context = {
        "benchmark": benchmark,
        "rules_key": benchmark_stamp(benchmark),
        "rules_cache_s": RULES_CACHE_S,
        "schedule": schedule_at(benchmark, now),
        "board_state": board_state(benchmark, now),
        "board": leaderboard_page(benchmark, page=1, per_page=BOARD_PREVIEW_ROWS, version=version),
        "writeups": public_writeups(benchmark),
        "standing": standing,
        "standing_page": _page_of(standing, BOARD_PAGE_ROWS),
        "show_all": show_all,
        "chart": None if show_all else progress_chart(benchmark, now=now, version=version),
        "attempts": (
            attempts_chart(
                benchmark,
                now=now,
                board_key=version.key,
                viewer_id=request.user.pk if request.user.is_authenticated else None,
                teammates=members,
            )
            if show_all
            else None
        ),
        "quotas": quotas,
        "practice_size": practice[0] if practice else None,
        "practice_seed": practice[1] if practice else "",
        "next_reset": rules.next_reset(now, benchmark.attempt_timezone),
        "pass_percent": _percent(benchmark.pass_min_matches, benchmark.cohort_size),
        "build_network": functools.cache(lambda: build_network_state(now=now)),
        "hardware": functools.cache(lambda: class_hardware(benchmark.hardware_class_id)),
        "final_outline": functools.cache(lambda: final_outline(benchmark)),
        "verify_max_runs": settings.PODIUM_VERIFY_MAX_RUNS,
        "verify_noise_factor": settings.PODIUM_VERIFY_NOISE_FACTOR,
        "verify_slack_ms": settings.PODIUM_VERIFY_SLACK_MS,
        "psnr_floor_db": rules.VERIFY_PSNR_FLOOR_DB,
        "canaries": functools.cache(lambda: verification_canaries(benchmark)),
        "canary_share_pct": rules.CANARY_SHARE_PCT,
    }
    return render(request, "contests/benchmark_detail.html", context)


def leaderboard(request: HttpRequest, slug: str) -> HttpResponse:
    """The whole board, a hundred rows a page (``?page=N``)."""
    benchmark = get_object_or_404(Benchmark, slug=slug)
    try:
        page = int(request.GET.get("page", "1"))
    except ValueError:
        page = 1
    version = leaderboard_version(benchmark)
    standing = (
        leaderboard_standing(
            benchmark,
            request.user,
            teammates=shown_teammate_ids(benchmark.pk, request.user.pk),
            version=version,
        )
        if request.user.is_authenticated
        else None
    )
    context = {
        "benchmark": benchmark,
        "schedule": schedule_at(benchmark, timezone.now()),
        "board_state": board_state(benchmark),
        "board": leaderboard_page(benchmark, page=page, per_page=BOARD_PAGE_ROWS, version=version),
        "writeups": public_writeups(benchmark),
        "verifying": verifying_rows(benchmark),
        "standing": standing,
        "standing_page": _page_of(standing, BOARD_PAGE_ROWS),
    }
    return render(request, "contests/leaderboard.html", context)


def _page_of(row: LeaderboardRow | None, per_page: int) -> int | None:
    return None if row is None else (row.rank - 1) // per_page + 1


def _percent(part: int, whole: int) -> str:
    """9900 of 10000 -> "99"; keeps up to two decimals when the ratio is not whole."""
    if not whole:
        return "0"
    return f"{part * 100 / whole:.2f}".rstrip("0").rstrip(".")
