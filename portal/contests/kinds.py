"""Which paths a benchmark's kind takes: the timed paths refuse a metered-estimation one.

A benchmark of kind ``estimation`` (``portal.estimation``) has no environment step and no
timed run: its entrants upload the tarball ``whest package`` makes, as an entry, and the
benchmark's own grader scores it. So every path that exists only for timed benchmarks
(leaderboards and campaigns) asks :func:`timed_path_check` before it stores anything
(the API's upload routes and the pages: before they read the body): creating or
rebuilding an environment, a timed upload (official or practice), the Dockerfile dry-run
check, the timed sandbox and its supervisor, and the timed nominations. Each refuses with
``invalid_parameter``, saying why and what to do instead, and nothing is created, queued
or charged (docs/api.md, "Metered estimation").
"""

from __future__ import annotations

from typing import Literal

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from portal.contests.models import Benchmark
from portal.core import errors

TimedPath = Literal["environment", "submission", "dockerfile_check", "sandbox", "nomination"]


def _entry_routes(slug: str) -> str:
    """Where an estimator is entered, on every client."""
    return (
        f"with the form on the benchmark's page (/b/{slug}/), `podium submit {slug} "
        f"submission.tar.gz`, or POST /api/v1/benchmarks/{slug}/estimation/entries/"
    )


def _refusal(slug: str, path: TimedPath) -> str:
    head = f"{slug} is a metered-estimation benchmark"
    enter = "upload the tarball `whest package` makes as an entry instead: " + _entry_routes(slug)
    if path == "environment":
        return f"{head}: it has no environments (nothing is built); {enter}. Nothing was charged."
    if path == "submission":
        return (
            f"{head}: it takes no timed submissions, official or practice; {enter}. "
            "Nothing was charged."
        )
    if path == "dockerfile_check":
        return (
            f"{head}: it has no environments, so no Dockerfile to check; check the tarball "
            "`whest package` makes with `podium validate submission.tar.gz` instead, then "
            f"upload it as an entry: {_entry_routes(slug)}."
        )
    if path == "sandbox":
        return (
            f"{head}: it has no timed run, so no sandbox or supervisor to hand out; its "
            f"rules are at GET /api/v1/benchmarks/{slug}/estimation/, and `podium suite "
            f"{slug} -o DIR` downloads its public suite for local runs with `whest run`."
        )
    return (
        f"{head}: it has no timed submissions to nominate; nominate a graded entry for the "
        "final rerun instead: on the entry's page, with `podium nominate ENTRY_ID`, or "
        "POST /api/v1/estimation/entries/ENTRY_ID/nomination/."
    )


def timed_path_check(benchmark: Benchmark, path: TimedPath) -> None:
    """Refuse ``path``, a timed-only path, on a metered-estimation ``benchmark``
    (``InvalidParameter``, naming the benchmark, why, and what to do instead); any other
    kind passes. Reads nothing but the benchmark's row as given: call it first."""
    if benchmark.kind == Benchmark.ESTIMATION:
        raise errors.InvalidParameter(_refusal(benchmark.slug, path))


# What each page is called, for its refusal's heading.
_PAGES: dict[TimedPath, str] = {
    "environment": "Environments",
    "submission": "Submissions",
    "dockerfile_check": "Dockerfile check",
    "sandbox": "Sandbox",
    "nomination": "Nominations",
}


def timed_path_page(
    request: HttpRequest, benchmark: Benchmark, path: TimedPath
) -> HttpResponse | None:
    """What a timed-only page answers on a metered-estimation ``benchmark`` instead of its
    form, on GET and POST alike: :func:`timed_path_check`'s refusal, word for word, with a
    link to the benchmark's page (400, nothing read from the form); None on any other kind.
    Call it before the form is read or the upload throttle counts."""
    try:
        timed_path_check(benchmark, path)
    except errors.InvalidParameter as refusal:
        context = {"benchmark": benchmark, "what": _PAGES[path], "refusal": refusal.detail}
        return render(request, "podium/timed_only.html", context, status=refusal.http_status)
    return None
