"""The every-attempt chart (``?show=all`` on the benchmark page) and the attempts API."""

from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET

import pytest
import time_machine
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.submissions.every_attempt import FRESH_S
from portal.submissions.models import Submission
from portal.teams import services as teams
from portal.web import attempts_chart
from tests import factories
from tests.web.boards import official_run

MS = 1_000_000


def _svg(html: str) -> ET.Element:
    match = re.search(
        r'<svg role="img" aria-labelledby="attempts-chart-title".*?</svg>', html, re.S
    )
    assert match, "no every-attempt chart on the page"
    return ET.fromstring(match.group(0))  # noqa: S314 (the page under test)


def _dot_count(svg: ET.Element, kind: str) -> int:
    path = svg.find(f".//path[@class='attempts-{kind}']")
    return 0 if path is None else path.attrib["d"].count("h0")


def _own_titles(svg: ET.Element) -> list[str]:
    layer = svg.find(".//g[@class='attempts-own']")
    return [] if layer is None else [t.text or "" for t in layer.iter("title")]


@pytest.fixture
def contest(benchmark, alice, bob):
    """Alice: three graded attempts (one failed); Bob: two; plus attempts that are not graded."""
    start = benchmark.opens_at + dt.timedelta(minutes=30)
    hour = dt.timedelta(hours=1)
    runs = {
        "alice": [
            official_run(benchmark, alice, 900 * MS, at=start),
            official_run(benchmark, alice, 400 * MS, at=start + 4 * hour, passed=False),
            official_run(benchmark, alice, 700 * MS, at=start + 8 * hour),
        ],
        "bob": [
            official_run(benchmark, bob, 1_200 * MS, at=start + 2 * hour),
            official_run(benchmark, bob, 600 * MS, at=start + 10 * hour),
        ],
    }
    # Not graded: practice, cancelled, disqualified.
    official_run(benchmark, bob, 100 * MS, at=start + 3 * hour, kind=Submission.PRACTICE)
    official_run(
        benchmark, bob, 150 * MS, at=start + 5 * hour, status=Submission.CANCELLED, passed=True
    )
    official_run(benchmark, alice, 200 * MS, at=start + 6 * hour, disqualified_at=timezone.now())
    return runs


def test_the_chart_plots_every_graded_attempt_and_rings_each_best(client, benchmark, contest):
    html = client.get(f"/b/{benchmark.slug}/?show=all").content.decode()
    svg = _svg(html)

    assert _dot_count(svg, "passed") == 4
    assert _dot_count(svg, "failed") == 1
    bests = [t.text or "" for t in svg.iterfind(".//g[@class='attempts-bests']/circle/title")]
    assert [b.split(",")[0] for b in bests] == [
        "1. bob: best 600.000 ms",
        "2. alice: best 700.000 ms",
    ]
    assert "5 graded official attempts by 2 entrants (1 failed on accuracy)" in (
        svg.findtext("desc") or ""
    )


def test_the_signed_in_entrant_sees_only_their_own_points_highlighted(
    client, benchmark, contest, alice
):
    client.force_login(alice)
    html = client.get(f"/b/{benchmark.slug}/?show=all").content.decode()

    titles = _own_titles(_svg(html))
    expected = [run.submission_id for run in contest["alice"]]
    assert [int(re.match(r"Your submission (\d+)", t).group(1)) for t in titles] == expected
    assert "(failed): 400.000 ms" in titles[1]
    assert "your attempts" in html  # the legend names the highlight
    # And a table of the same attempts beside the chart.
    assert f"Your attempts on the chart ({len(expected)})" in html
    for submission_id in expected:
        assert f"#{submission_id}</a>" in html


def test_another_entrant_sees_their_points_not_alices(client, benchmark, contest, bob):
    client.force_login(bob)
    html = client.get(f"/b/{benchmark.slug}/?show=all").content.decode()

    titles = _own_titles(_svg(html))
    assert [int(re.match(r"Your submission (\d+)", t).group(1)) for t in titles] == [
        run.submission_id for run in contest["bob"]
    ]


def test_anonymous_visitors_see_no_highlight(client, benchmark, contest):
    html = client.get(f"/b/{benchmark.slug}/?show=all").content.decode()

    svg = _svg(html)
    assert _own_titles(svg) == []
    assert "your attempts" not in html and "Your attempts on the chart" not in html


def test_the_modes_are_plain_links_and_the_chart_needs_no_script(client, benchmark, contest):
    default = client.get(f"/b/{benchmark.slug}/").content.decode()
    assert '<a href="?show=all#progress">Every attempt</a>' in default
    assert "attempts-chart" not in default  # the default stays the top entrants' bests

    html = client.get(f"/b/{benchmark.slug}/?show=all").content.decode()
    chart = re.search(r"<svg.*?</svg>", html, re.S).group(0)
    assert "<script" not in chart and not re.search(r"https?://", chart)
    assert '<a href="?#progress">Top entrants&#x27; bests</a>' in html or (
        '<a href="?#progress">Top entrants\' bests</a>' in html
    )


def test_a_new_best_shows_at_once_and_a_failed_attempt_within_the_refresh(
    client, benchmark, contest, alice, bob
):
    url = f"/b/{benchmark.slug}/?show=all"
    later = benchmark.opens_at + dt.timedelta(hours=14)
    now = timezone.now()
    with time_machine.travel(now, tick=False):
        first = _svg(client.get(url).content.decode())
        official_run(benchmark, bob, 500 * MS, at=later)  # bob's new best: the board changes
        best = _svg(client.get(url).content.decode())
        official_run(benchmark, alice, 300 * MS, at=later, passed=False)  # the board does not
    with time_machine.travel(now + dt.timedelta(seconds=FRESH_S + 1), tick=False):
        failed = _svg(client.get(url).content.decode())

    assert [_dot_count(svg, "passed") for svg in (first, best)] == [4, 5]
    assert [_dot_count(svg, "failed") for svg in (first, failed)] == [1, 2]


def test_nothing_graded_draws_nothing(client, benchmark):
    html = client.get(f"/b/{benchmark.slug}/?show=all").content.decode()

    assert "<svg" not in html
    assert "The chart appears with the first graded official attempt." in html


@pytest.mark.parametrize("viewer", ["anonymous", "signed_in", "in_a_team"])
def test_the_chart_reads_a_fixed_number_of_queries(client, benchmark, alice, viewer):
    if viewer != "anonymous":
        client.force_login(alice)
    if viewer == "in_a_team":
        _team(benchmark, "Fast Cats", alice, factories.UserFactory())
    counts = []
    for entrants in (3, 30):
        for index in range(entrants):
            user = factories.UserFactory()
            official_run(benchmark, user, (500 + index) * MS, passed=index % 4 != 0)
            if index % 3 == 0:  # every third of them in a team of two
                _team(benchmark, f"Team {user.pk}", user, factories.UserFactory())
        official_run(benchmark, alice, 450 * MS)
        with time_machine.travel(timezone.now(), tick=False):
            cache.clear()
            with CaptureQueriesContext(connection) as cold:
                client.get(f"/b/{benchmark.slug}/?show=all")
            with CaptureQueriesContext(connection) as warm:
                client.get(f"/b/{benchmark.slug}/?show=all")
        counts.append((len(cold.captured_queries), len(warm.captured_queries)))

    assert counts[0] == counts[1]
    assert counts[0][1] < counts[0][0]  # the shared drawing is cached


def test_the_api_lists_every_graded_attempt(client, benchmark, contest):
    body = client.get(f"/api/v1/benchmarks/{benchmark.slug}/attempts/").json()

    assert body["count"] == 5
    listed = [
        (a["entrant"], a["team"], a["wall_time_ns"] // MS, a["passed"]) for a in body["attempts"]
    ]
    assert listed == [
        ("alice", False, 900, True),
        ("bob", False, 1_200, True),
        ("alice", False, 400, False),
        ("alice", False, 700, True),
        ("bob", False, 600, True),
    ]
    assert body["attempts"][0]["submission_id"] == contest["alice"][0].submission_id
    assert body["attempts"][0]["submitted_at"].endswith("+00:00")


def test_the_api_answers_404_for_an_unknown_benchmark(client, db):
    response = client.get("/api/v1/benchmarks/nope/attempts/")

    assert response.status_code == 404 and response.json()["code"] == "not_found"


# Teams: a team is one identity on the board, and on the chart.


def _team(benchmark, name, captain, *members):
    team = teams.team_create(user=captain, benchmark=benchmark, name=name)
    for member in members:
        invitation = teams.team_invite(
            user=captain, benchmark=benchmark, username=member.get_username()
        )
        teams.invitation_accept(user=member, invitation_id=invitation.pk)
    return team


@pytest.fixture
def carol(db):
    return factories.UserFactory(username="carol")


@pytest.fixture
def team_contest(benchmark, contest, alice, carol):
    """Alice and Carol are the team "Fast Cats"; Carol's 650 ms beats Alice's 700 ms."""
    start = benchmark.opens_at + dt.timedelta(minutes=30)
    carols = official_run(benchmark, carol, 650 * MS, at=start + 9 * dt.timedelta(hours=1))
    _team(benchmark, "Fast Cats", alice, carol)
    return {**contest, "carol": [carols]}


def test_a_teams_attempts_carry_its_name_and_its_best_is_ringed_once(
    client, benchmark, team_contest
):
    svg = _svg(client.get(f"/b/{benchmark.slug}/?show=all").content.decode())
    board = client.get(f"/api/v1/benchmarks/{benchmark.slug}/leaderboard/").json()["rows"]

    bests = [t.text or "" for t in svg.iterfind(".//g[@class='attempts-bests']/circle/title")]
    assert [b.split(",")[0] for b in bests] == [
        "1. bob: best 600.000 ms",
        "2. Fast Cats: best 650.000 ms",
    ]
    # The rings are the board's rows, name for name.
    assert [(row["rank"], row["entrant"]) for row in board] == [(1, "bob"), (2, "Fast Cats")]
    assert "6 graded official attempts by 2 entrants" in (svg.findtext("desc") or "")
    assert "best of each entrant or team" in ET.tostring(svg, encoding="unicode")


def test_the_api_names_a_members_attempts_by_their_team(client, benchmark, team_contest):
    body = client.get(f"/api/v1/benchmarks/{benchmark.slug}/attempts/").json()

    listed = [(a["entrant"], a["team"], a["wall_time_ns"] // MS) for a in body["attempts"]]
    assert listed == [
        ("Fast Cats", True, 900),
        ("bob", False, 1_200),
        ("Fast Cats", True, 400),
        ("Fast Cats", True, 700),
        ("Fast Cats", True, 650),
        ("bob", False, 600),
    ]
    assert not any(a["entrant"] in ("alice", "carol") for a in body["attempts"])


def test_a_member_sees_their_teams_points_highlighted_and_their_own_marked(
    client, benchmark, team_contest, alice
):
    client.force_login(alice)
    html = client.get(f"/b/{benchmark.slug}/?show=all").content.decode()

    titles = _own_titles(_svg(html))
    carols = team_contest["carol"][0].submission_id
    assert [t.split(" (")[0] for t in titles] == [
        f"Your team's submission {carols} by carol",
        *(f"Your submission {run.submission_id}" for run in team_contest["alice"]),
    ]
    assert "your teammates&#x27;" in html or "your teammates'" in html
    # The table lists the team's four attempts in upload order, saying whose each is.
    assert "Your team&#x27;s attempts on the chart (4)" in html or (
        "Your team's attempts on the chart (4)" in html
    )
    uploaders = re.findall(r'<tr><th scope="row"><a [^>]*>#(\d+)</a></th><td>(.*?)</td>', html)
    assert [(int(pk), who) for pk, who in uploaders] == [
        (team_contest["alice"][0].submission_id, "<strong>you</strong>"),
        (team_contest["alice"][1].submission_id, "<strong>you</strong>"),
        (team_contest["alice"][2].submission_id, "<strong>you</strong>"),
        (carols, "carol"),
    ]


def test_someone_outside_the_team_sees_only_their_own(client, benchmark, team_contest, bob):
    client.force_login(bob)
    html = client.get(f"/b/{benchmark.slug}/?show=all").content.decode()

    titles = _own_titles(_svg(html))
    assert [t.split(" (")[0] for t in titles] == [
        f"Your submission {run.submission_id}" for run in team_contest["bob"]
    ]
    assert "your teammates" not in html and "Your attempts on the chart (2)" in html


def test_a_join_that_changes_no_board_row_renames_the_attempts_within_the_refresh(
    client, benchmark, team_contest, alice
):
    """Dave's only attempt failed: his joining changes no row of the board, yet his
    attempt is the team's within the refresh, on the chart's viewer layer at once."""
    dave = factories.UserFactory(username="dave")
    failed = official_run(benchmark, dave, 300 * MS, passed=False)
    api = f"/api/v1/benchmarks/{benchmark.slug}/attempts/"
    now = timezone.now()
    with time_machine.travel(now, tick=False):
        before = {a["submission_id"]: a["entrant"] for a in client.get(api).json()["attempts"]}
        board = client.get(f"/api/v1/benchmarks/{benchmark.slug}/leaderboard/").json()
        invitation = teams.team_invite(user=alice, benchmark=benchmark, username="dave")
        teams.invitation_accept(user=dave, invitation_id=invitation.pk)
        assert client.get(f"/api/v1/benchmarks/{benchmark.slug}/leaderboard/").json() == board
        client.force_login(alice)
        titles = _own_titles(_svg(client.get(f"/b/{benchmark.slug}/?show=all").content.decode()))
    with time_machine.travel(now + dt.timedelta(seconds=FRESH_S + 1), tick=False):
        after = {a["submission_id"]: a["entrant"] for a in client.get(api).json()["attempts"]}

    assert before[failed.submission_id] == "dave"
    assert after[failed.submission_id] == "Fast Cats"
    assert f"Your team's submission {failed.submission_id} by dave" in " ".join(titles)


def test_a_stand_in_drawing_is_not_kept_in_place_of_the_new_one(
    client, benchmark, contest, bob, monkeypatch
):
    """While another request draws a new version, a page shows the benchmark's latest
    drawing; once drawn, the next page shows the new one, not the stand-in it kept."""
    url = f"/b/{benchmark.slug}/?show=all"
    later = benchmark.opens_at + dt.timedelta(hours=14)

    class SomeoneElseDraws:
        """The shared cache, with every drawing lock already held by another request."""

        def add(self, *args: object, **kwargs: object) -> bool:
            return False

        def __getattr__(self, name: str) -> object:
            return getattr(cache, name)

    with time_machine.travel(timezone.now(), tick=False):
        first = _svg(client.get(url).content.decode())
        official_run(benchmark, bob, 500 * MS, at=later)  # the board changes: a new version
        with monkeypatch.context() as patch:
            patch.setattr(attempts_chart, "cache", SomeoneElseDraws())
            stand_in = _svg(client.get(url).content.decode())
        new = _svg(client.get(url).content.decode())
        again = _svg(client.get(url).content.decode())

    assert [_dot_count(svg, "passed") for svg in (first, stand_in, new, again)] == [4, 4, 5, 5]
