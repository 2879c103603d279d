"""The contest pages: one contest's phases as a timeline, its facts and announcements, and
the Atom feed of its announcements."""

from __future__ import annotations

import datetime as dt

from django.contrib.syndication.views import Feed
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.feedgenerator import Atom1Feed

from portal.contests.markup import markdown_html
from portal.contests.models import Announcement, Contest
from portal.contests.phases import PAGE_ANNOUNCEMENTS, announcements_of, contest_view

FEED_ENTRIES = 50


def contest_detail(request: HttpRequest, slug: str) -> HttpResponse:
    """Phases in order (window, status, link), facts, announcements newest first. Three
    queries whatever the number of phases."""
    contest = get_object_or_404(Contest, slug=slug)
    context = {
        "contest": contest,
        "view": contest_view(contest, timezone.now()),
        "announcements": list(announcements_of(contest)[:PAGE_ANNOUNCEMENTS]),
    }
    return render(request, "contests/contest_detail.html", context)


class AnnouncementFeed(Feed[Announcement, Contest]):
    """``/contests/<slug>/announcements.atom``: the contest's announcements, newest first,
    each with its sanitised HTML as the entry's content."""

    feed_type = Atom1Feed

    def get_object(self, request: HttpRequest, slug: str) -> Contest:
        return get_object_or_404(Contest, slug=slug)

    def title(self, obj: Contest) -> str:
        return f"{obj.title}: announcements"

    def link(self, obj: Contest) -> str:
        return reverse("contests:contest_detail", args=[obj.slug])

    def subtitle(self, obj: Contest) -> str:
        return f"Announcements of {obj.title} on Podium, newest first."

    def items(self, obj: Contest) -> list[Announcement]:
        return list(announcements_of(obj)[:FEED_ENTRIES])

    def item_title(self, item: Announcement) -> str:
        return item.title

    def item_description(self, item: Announcement) -> str:
        return markdown_html(item.body)

    def item_link(self, item: Announcement) -> str:
        url = reverse("contests:contest_detail", args=[item.contest.slug])
        return f"{url}#announcement-{item.pk}"

    def item_guid(self, item: Announcement) -> str:
        return f"tag:podium,{item.posted_at:%Y-%m-%d}:announcement:{item.pk}"

    item_guid_is_permalink = False

    def item_pubdate(self, item: Announcement) -> dt.datetime:
        return item.posted_at

    def item_updateddate(self, item: Announcement) -> dt.datetime:
        return item.posted_at
