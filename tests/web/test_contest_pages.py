"""The hub, a contest's page (phases as a timeline, facts, announcements) and its Atom
feed, as a visitor reads them."""

from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.contests.announcements import announcement_post
from tests import factories

DAY = dt.timedelta(days=1)
ATOM = "{http://www.w3.org/2005/Atom}"


@pytest.fixture
def contest(db):
    now = timezone.now()
    contest = factories.phased_contest(
        (now - 9 * DAY, now - 5 * DAY),
        (now - DAY, now + DAY),
        (now + 5 * DAY, now + 9 * DAY),
        slug="vision",
        title="Vision Challenge",
        summary="Fastest *exact* inference.",
        prizes="1. **5,000 USD**\n2. 2,000 USD",
        timeline="Results are announced a week after the last phase.",
        final_ranking="The final rerun of each team's two best decides. <script>x()</script>",
    )
    contest.phases.filter(phase_order=1).update(phase_name="Warm-up", title="Warm-up round")
    return contest


def _post(contest, staff, title, days_ago, body="b"):
    return announcement_post(
        contest=contest,
        actor=staff,
        title=title,
        body=body,
        now=timezone.now() - dt.timedelta(days=days_ago),
    )


def test_the_contest_page_shows_the_phases_in_order_with_their_status(client, contest):
    page = client.get("/contests/vision/").content.decode()

    timeline = page[page.index('id="timeline"') : page.index('id="facts"')]
    slugs = re.findall(r'href="/b/(vision-p\d)/"', timeline)
    assert slugs == ["vision-p1", "vision-p2", "vision-p3"]
    assert re.findall(r'class="phase phase-(\w+)"', timeline) == ["closed", "open", "upcoming"]
    assert "Warm-up: Warm-up round" in timeline
    assert "Phase 2: Benchmark vision-p2" in timeline


def test_the_contest_page_shows_the_facts_sanitised(client, contest):
    page = client.get("/contests/vision/").content.decode()

    facts = page[page.index('id="facts"') : page.index('id="announcements"')]
    assert "<li><strong>5,000 USD</strong></li>" in facts
    assert "Results are announced a week after the last phase." in facts
    assert "The final rerun of each team's two best decides." in facts
    assert "<script>" not in page.replace('<script src="/static/podium.js" defer></script>', "")
    assert "<em>exact</em>" in page


def test_the_contest_page_shows_announcements_newest_first(client, contest, staff):
    _post(contest, staff, "Warm-up results", 3)
    _post(
        contest, staff, "Phase 2 opens", 1, body='[rules](javascript:alert(1)) <b onclick="x">b</b>'
    )
    _post(contest, staff, "Limits raised", 2)

    page = client.get("/contests/vision/").content.decode()

    titles = re.findall(
        r'<article id="announcement-\d+" class="announcement">\s*<h3>([^<]+)</h3>', page
    )
    assert titles == ["Phase 2 opens", "Limits raised", "Warm-up results"]
    assert "javascript:" not in page and "onclick" not in page


def test_an_unknown_contest_is_a_404(client, db):
    assert client.get("/contests/nope/").status_code == 404
    assert client.get("/contests/nope/announcements.atom").status_code == 404


def test_the_hub_lists_contests_lone_benchmarks_and_the_latest_announcements(
    client, contest, staff
):
    lone = factories.BenchmarkFactory(slug="lone", title="Lone benchmark")
    for days in range(7):
        _post(contest, staff, f"news {days}", days)

    page = client.get("/").content.decode()

    assert 'href="/contests/vision/">Vision Challenge</a>' in page
    assert f'href="/b/{lone.slug}/">Lone benchmark</a>' in page
    assert page.count('href="/b/vision-p') == 3  # the phases, under their contest
    section = page[page.index('id="announcements"') :]
    assert re.findall(r">(news \d)</a>", section) == [f"news {d}" for d in range(5)]


def test_a_phase_page_links_to_its_contest(client, contest):
    page = client.get("/b/vision-p2/").content.decode()

    assert 'Phase 2 of <a href="/contests/vision/">Vision Challenge</a>' in page


def test_a_lone_benchmark_page_names_no_contest(client, benchmark):
    assert "/contests/" not in client.get(f"/b/{benchmark.slug}/").content.decode()


def test_the_atom_feed_parses_with_entries_newest_first(client, contest, staff):
    _post(contest, staff, "older", 2, body="**old** <script>alert(1)</script>")
    newest = _post(contest, staff, "newest", 0)
    _post(contest, staff, "middle", 1)

    response = client.get("/contests/vision/announcements.atom")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/atom+xml")
    feed = ET.fromstring(response.content)  # noqa: S314 (our own feed)
    assert feed.tag == f"{ATOM}feed"
    assert feed.findtext(f"{ATOM}title") == "Vision Challenge: announcements"
    entries = feed.findall(f"{ATOM}entry")
    assert [entry.findtext(f"{ATOM}title") for entry in entries] == ["newest", "middle", "older"]
    first = entries[0]
    assert (
        first.find(f"{ATOM}link")
        .get("href")
        .endswith(f"/contests/vision/#announcement-{newest.pk}")
    )
    published = dt.datetime.fromisoformat(first.findtext(f"{ATOM}published"))
    assert published == newest.posted_at
    older_html = entries[2].findtext(f"{ATOM}summary") or ""
    assert "<strong>old</strong>" in older_html and "<script" not in older_html


def test_the_contest_page_points_to_its_feed(client, contest):
    page = client.get("/contests/vision/").content.decode()

    assert 'type="application/atom+xml"' in page
    assert 'href="/contests/vision/announcements.atom"' in page


def test_the_pages_cost_the_same_queries_however_many_phases_and_announcements(client, staff):
    now = timezone.now()
    small = factories.phased_contest((now - DAY, now + DAY), slug="small")
    large = factories.phased_contest(*[(now + n * DAY, now + (n + 1) * DAY) for n in range(6)])
    for n in range(8):
        _post(large, staff, f"news {n}", n)
    _post(small, staff, "one", 0)

    counts = []
    for url in ("/contests/small/", f"/contests/{large.slug}/"):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(url).status_code == 200
        counts.append(len(queries))
    with CaptureQueriesContext(connection) as hub_small:
        client.get("/")
    factories.phased_contest(*[(now + n * DAY, now + (n + 1) * DAY) for n in range(4)])
    with CaptureQueriesContext(connection) as hub_large:
        client.get("/")

    assert counts[0] == counts[1]
    assert len(hub_small) == len(hub_large)
