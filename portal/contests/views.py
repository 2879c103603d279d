"""Public pages: the benchmark list and one benchmark's rules, leaderboard and quota."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from portal.contests import rules
from portal.contests.models import Benchmark
from portal.contests.selectors import leaderboard_rows, quota_for
from portal.submissions.models import Submission


def benchmark_list(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    benchmarks = [(benchmark, benchmark.status_at(now)) for benchmark in Benchmark.objects.all()]
    return render(request, "contests/benchmark_list.html", {"benchmarks": benchmarks})


def benchmark_detail(request: HttpRequest, slug: str) -> HttpResponse:
    benchmark = get_object_or_404(Benchmark, slug=slug)
    now = timezone.now()
    quotas = []
    if request.user.is_authenticated:
        quotas = [
            quota_for(request.user, benchmark, kind, now)
            for kind in (Submission.OFFICIAL, Submission.PRACTICE)
        ]
    context = {
        "benchmark": benchmark,
        "status": benchmark.status_at(now),
        "rows": leaderboard_rows(benchmark),
        "quotas": quotas,
        "next_reset": rules.next_reset(now, benchmark.attempt_timezone),
        "pass_percent": _percent(benchmark.pass_min_matches, benchmark.cohort_size),
    }
    return render(request, "contests/benchmark_detail.html", context)


def _percent(part: int, whole: int) -> str:
    """9900 of 10000 -> "99"; keeps up to two decimals when the ratio is not whole."""
    if not whole:
        return "0"
    return f"{part * 100 / whole:.2f}".rstrip("0").rstrip(".")
