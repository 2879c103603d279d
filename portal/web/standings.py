"""The end of a contest on the site: the final standings page (public) and the
entrant's nominations page."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from portal.contests.kinds import timed_path_page
from portal.contests.models import Benchmark
from portal.core import errors
from portal.estimation.standings import published_scores
from portal.standings.nominations import nominations_of, nominations_set
from portal.standings.selectors import (
    COHORT_WORDS,
    PROVISIONAL,
    board_state,
    deciding_cohort,
    published,
)


def standings(request: HttpRequest, slug: str) -> HttpResponse:
    """The published final standings with their digest, corrections and deciding cohort,
    or what the board is until then (live; provisional, with the cohort the final rerun
    runs on). A metered-estimation phase's standings show its final scores."""
    benchmark = get_object_or_404(Benchmark, slug=slug)
    state = board_state(benchmark, timezone.now())
    if benchmark.kind == Benchmark.ESTIMATION:
        return render(
            request,
            "estimation/standings.html",
            {"benchmark": benchmark, "state": state, "published": published_scores(benchmark)},
        )
    context = {
        "benchmark": benchmark,
        "state": state,
        "published": published(benchmark),
        "deciding": COHORT_WORDS[deciding_cohort(benchmark)] if state == PROVISIONAL else "",
    }
    return render(request, "contests/standings.html", context)


@login_required
def nominations(request: HttpRequest, slug: str) -> HttpResponse:
    """The nominations of the signed-in entrant's team (or their own): shown, and replaced
    by the form's choice (any member may)."""
    benchmark = get_object_or_404(Benchmark, slug=slug)
    refused = timed_path_page(request, benchmark, "nomination")
    if refused is not None:  # a metered-estimation benchmark's entries are nominated singly
        return refused
    if request.method == "POST":
        try:
            chosen = [int(value) for value in request.POST.getlist("submission")]
            nominations_set(entrant=request.user, benchmark=benchmark, submission_ids=chosen)
        except ValueError:
            messages.error(request, "Choose submissions by their numbers.")
        except errors.PodiumError as refusal:
            messages.error(request, refusal.detail)
        else:
            messages.success(request, "The nominations are saved.")
        return redirect("contests:nominations", slug=slug)
    context = {"benchmark": benchmark, "state": nominations_of(benchmark, request.user)}
    return render(request, "contests/nominations.html", context)
