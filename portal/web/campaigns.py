"""Campaign pages: the crown, the queue and what the next round waits for, the rounds
with their entries, and one entry's report.

They are public, like the leaderboard: anyone reads the crown, the rounds and every
entry's arithmetic, signed in or not (as the API: ``portal.api.campaigns``). Build
logs and timelines stay their owner's (the submission pages). Every score on these pages
sits next to the round it is from: scores compare only within a round.
"""

from __future__ import annotations

import datetime as dt

from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from portal.campaigns import api_selectors, rules
from portal.campaigns.models import Campaign
from portal.campaigns.selectors import campaign_by_slug, round_entry_report

ROUNDS_SHOWN = 20  # on the campaign page; the history page has them all
ROUNDS_PER_PAGE = 50


def _campaign(slug: str) -> Campaign:
    campaign = campaign_by_slug(slug)
    if campaign is None:
        raise Http404("No such campaign.")
    return campaign


def _words(wait: dt.timedelta) -> str:
    return api_selectors.duration_words(int(wait.total_seconds()))


@require_GET
def campaign_detail(request: HttpRequest, slug: str) -> HttpResponse:
    campaign = _campaign(slug)
    page = api_selectors.campaign_page(campaign, round_limit=ROUNDS_SHOWN)
    context = {
        "campaign": campaign,
        "overview": page.overview,
        "queue": page.queue,
        "rounds": page.overview.rounds,
        "moat_percent": f"{page.overview.moat * 100:g}",
        "wait_words": api_selectors.duration_words(page.queue.trigger_wait_s),
        "capacity_first": _words(rules.CAPACITY_FIRST_WAIT),
        "capacity_max": _words(rules.CAPACITY_MAX_WAIT),
    }
    return render(request, "campaigns/campaign_detail.html", context)


@require_GET
def round_list(request: HttpRequest, slug: str) -> HttpResponse:
    """Every round, newest first (``?page=N``, fifty a page)."""
    campaign = _campaign(slug)
    paginator = Paginator(api_selectors.round_queryset(campaign), ROUNDS_PER_PAGE)
    rounds_page = paginator.get_page(request.GET.get("page"))
    context = {
        "campaign": campaign,
        "rounds_page": rounds_page,
        "rounds": api_selectors.round_rows(list(rounds_page.object_list)),
    }
    return render(request, "campaigns/round_list.html", context)


@require_GET
def entry_report(request: HttpRequest, slug: str, round_id: int, entry_id: int) -> HttpResponse:
    """One entry's arithmetic: per-slice seconds and speedups, the summary, the host."""
    campaign = _campaign(slug)
    report = round_entry_report(entry_id)
    if report is None or report.round.id != round_id or report.campaign_slug != campaign.slug:
        raise Http404("No such entry in this round.")
    context = {
        "campaign": campaign,
        "report": report,
        "environment": sorted(report.environment.items()),
    }
    return render(request, "campaigns/entry_report.html", context)
