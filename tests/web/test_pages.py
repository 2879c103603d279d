"""The public pages: the benchmark list and a benchmark's rules, leaderboard and quota."""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from portal.contests import rules
from portal.contests.models import Cohort, CohortItem, LeaderboardEntry
from portal.submissions.models import AttemptLedger, Submission
from tests import factories
from tests.web.boards import board_entry

KST = ZoneInfo("Asia/Seoul")


def visible_text(html: str) -> str:
    """The page's text as a reader sees it: tags dropped, whitespace collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def test_list_shows_each_benchmark_with_status_and_times_in_kst_and_utc(client, db):
    now = timezone.now()
    factories.BenchmarkFactory(
        slug="eva02-imagenet1k-v3",
        title="EVA-02 on ImageNet-1k",
        opens_at=dt.datetime(2026, 8, 10, 0, 0, tzinfo=KST),
        closes_at=dt.datetime(2026, 8, 31, 18, 0, tzinfo=KST),
    )
    factories.BenchmarkFactory(
        slug="running-now",
        opens_at=now - dt.timedelta(days=1),
        closes_at=now + dt.timedelta(days=1),
    )
    factories.BenchmarkFactory(
        slug="long-gone",
        opens_at=now - dt.timedelta(days=9),
        closes_at=now - dt.timedelta(days=2),
    )

    page = client.get("/")

    assert page.status_code == 200
    html = page.content.decode()
    assert "EVA-02 on ImageNet-1k" in html
    assert reverse("contests:benchmark_detail", kwargs={"slug": "eva02-imagenet1k-v3"}) in html
    assert "2026-08-10 00:00 KST (2026-08-09 15:00 UTC)" in html
    assert "2026-08-31 18:00 KST (2026-08-31 09:00 UTC)" in html
    statuses = {e.benchmark.slug: e.status for e in page.context["entries"] if e.benchmark}
    assert statuses["running-now"] == "open"
    assert statuses["long-gone"] == "closed"
    if now < dt.datetime(2026, 8, 10, tzinfo=KST):
        assert statuses["eva02-imagenet1k-v3"] == "upcoming"


def test_benchmark_page_states_the_rules_from_its_settings(client, benchmark):
    page = client.get(f"/b/{benchmark.slug}/")

    assert page.status_code == 200
    html = page.content.decode()
    assert "at least 9,900 of 10,000 top-1 matches" in html
    assert "2 official attempts" in html
    assert "Asia/Seoul" in html
    assert "00:00 KST" in html and "15:00 UTC" in html
    assert "/submission/run MANIFEST IMAGE_ROOT OUTPUT" in html
    assert "CONTEST_MANIFEST=/contest/input/manifest.tsv" in html
    assert "CONTEST_IMAGE_ROOT=/contest/input/images" in html
    assert "CONTEST_OUTPUT=/contest/output/predictions.i32" in html
    assert "little-endian signed int32 in [0, 999]" in html
    assert "Not timed:" in html
    assert "16 GiB" in html
    assert "30 minutes" in html and "16 minutes" in html
    assert "<code>localhost/podium/</code>" in html


def test_rules_follow_a_changed_setting(client, benchmark):
    benchmark.pass_min_matches = 9500
    benchmark.attempts_per_day = 3
    benchmark.run_shm_bytes = 2 << 30
    benchmark.save(update_fields=["pass_min_matches", "attempts_per_day", "run_shm_bytes"])

    html = client.get(f"/b/{benchmark.slug}/").content.decode()

    assert "9,500" in html and "(95%)" in html
    assert "3 official attempts" in html
    assert "2 GiB of shared memory in" in " ".join(html.split())


def test_leaderboard_lists_rows_in_rank_order_with_exact_ns(client, benchmark, alice, bob):
    board_entry(benchmark, bob, wall_time_ns=2_500_000_123, matches=9990)
    board_entry(benchmark, alice, wall_time_ns=1_234_567_891)

    page = client.get(f"/b/{benchmark.slug}/")

    html = page.content.decode()
    assert [row.entrant for row in page.context["board"].rows] == ["alice", "bob"]
    assert 'title="1234567891 ns"' in html
    assert "1,234.568 ms" in html
    assert "2,500.000 ms" in html
    assert "9,990 / 10,000" in html
    assert html.index("alice") < html.index("bob", html.index('id="leaderboard"'))


def test_the_board_shows_gpu_energy_and_utilization_only_for_gpu_runs(
    client, benchmark, alice, bob
):
    board_entry(benchmark, alice, wall_time_ns=1_000_000_000)
    board_entry(benchmark, bob, wall_time_ns=2_000_000_000)
    cache.clear()
    cpu_board = visible_text(client.get(f"/b/{benchmark.slug}/leaderboard/").content.decode())
    gpu = {"energy_per_image_j": 0.04213, "gpu_util_mean_pct": 93.44, "samples": [[]]}
    for entry in LeaderboardEntry.objects.filter(entrant=alice):
        entry.run.resources = {"cpu_per_wall": 0.8, "gpu": gpu}
        entry.run.save(update_fields=["resources"])
    cache.clear()

    gpu_board = visible_text(client.get(f"/b/{benchmark.slug}/leaderboard/").content.decode())

    assert "GPU J/image" not in cpu_board and "GPU util." not in cpu_board
    assert "GPU J/image" in gpu_board and "GPU util." in gpu_board
    assert "alice 1,000.000 ms 9,950 / 10,000 0.80 0.0421 93.4% " in gpu_board
    assert "bob 2,000.000 ms 9,950 / 10,000 - - - " in gpu_board  # a run without figures


def test_signed_in_entrant_sees_quota_and_links(client, alice, time_machine):
    time_machine.move_to(dt.datetime(2026, 8, 12, 12, 0, tzinfo=KST), tick=False)
    benchmark = factories.BenchmarkFactory(
        opens_at=dt.datetime(2026, 8, 10, tzinfo=KST),
        closes_at=dt.datetime(2026, 8, 31, tzinfo=KST),
    )
    environment = factories.EnvironmentFactory(owner=alice, benchmark=benchmark)
    submission = Submission.objects.create(
        entrant=alice,
        benchmark=benchmark,
        environment=environment,
        submitted_at=timezone.now(),
        source_name="a.tar.gz",
        source_format="tar.gz",
        source_sha256="b" * 64,
        source_bytes=10,
    )
    AttemptLedger.objects.create(
        entrant=alice,
        benchmark=benchmark,
        submission=submission,
        kind=Submission.OFFICIAL,
        attempt_day=rules.attempt_day(timezone.now(), "Asia/Seoul"),
        delta=1,
        reason="upload accepted",
        at=timezone.now(),
    )
    client.force_login(alice)

    html = client.get(f"/b/{benchmark.slug}/").content.decode()

    text = visible_text(html)
    assert "1 of 2 official attempts left today; the next one at 00:00 KST, in 12 h 0 min" in text
    assert "10 of 10 practice attempts left today; they renew at 00:00 KST, in 12 h 0 min" in text
    assert 'title="2026-08-13 00:00 KST (2026-08-12 15:00 UTC)"' in html
    assert 'datetime="2026-08-12T15:00:00+00:00"' in html
    assert reverse("environments:list", kwargs={"slug": benchmark.slug}) in html
    assert reverse("submissions:list", kwargs={"slug": benchmark.slug}) in html


def test_anonymous_visitor_sees_no_quota_but_a_sign_in_link(client, benchmark):
    html = client.get(f"/b/{benchmark.slug}/").content.decode()

    assert "attempts left today" not in html
    assert reverse("account_login") in html


def test_unknown_benchmark_is_404(client, db):
    assert client.get("/b/no-such-thing/").status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/b/{slug}/environments/",
        "/b/{slug}/submissions/",
        "/environments/1/",
        "/submissions/1/",
        "/submissions/1/status.json",
        "/environments/1/status.json",
    ],
)
def test_entrant_pages_need_a_sign_in(client, benchmark, path):
    page = client.get(path.format(slug=benchmark.slug))

    assert page.status_code == 302
    assert page["Location"].startswith(reverse("account_login"))


def test_header_shows_admin_link_to_staff_only(client, alice, staff, db):
    client.force_login(alice)
    html = client.get("/").content.decode()
    assert "alice" in html and "sign out" in html
    assert reverse("admin:index") not in html

    client.force_login(staff)
    assert reverse("admin:index") in client.get("/").content.decode()


def test_pages_use_only_podiums_own_assets(client, benchmark):
    html = client.get(f"/b/{benchmark.slug}/").content.decode()

    assert "/static/podium.css" in html and "/static/podium.js" in html
    assert "http://" not in html and "https://" not in html


def test_list_counts_down_to_the_next_change_and_marks_times_for_the_viewers_zone(
    client, db, time_machine
):
    time_machine.move_to(dt.datetime(2026, 8, 7, 18, 48, tzinfo=KST), tick=False)
    factories.BenchmarkFactory(
        slug="soon",
        opens_at=dt.datetime(2026, 8, 10, 0, 0, tzinfo=KST),
        closes_at=dt.datetime(2026, 8, 31, 18, 0, tzinfo=KST),
    )
    factories.BenchmarkFactory(
        slug="now",
        opens_at=dt.datetime(2026, 8, 1, 0, 0, tzinfo=KST),
        closes_at=dt.datetime(2026, 8, 8, 0, 0, tzinfo=KST),
    )

    html = client.get("/").content.decode()

    text = visible_text(html)
    assert "opens in 2 d 5 h" in text
    assert "closes in 5 h 12 min" in text
    assert 'data-countdown="2026-08-09T15:00:00+00:00"' in html
    assert '<time datetime="2026-08-09T15:00:00+00:00" data-local>' in html
    assert html.index(">now<") < html.index(">soon<")  # open benchmarks first


def test_benchmark_page_counts_down_to_closing(client, db, time_machine):
    time_machine.move_to(dt.datetime(2026, 8, 31, 12, 47, 30, tzinfo=KST), tick=False)
    benchmark = factories.BenchmarkFactory(
        opens_at=dt.datetime(2026, 8, 10, tzinfo=KST),
        closes_at=dt.datetime(2026, 8, 31, 18, 0, tzinfo=KST),
    )

    text = visible_text(client.get(f"/b/{benchmark.slug}/").content.decode())

    assert "It closes in 5 h 12 min." in text


def test_full_leaderboard_pages_a_hundred_rows_with_ranks_that_continue(client, benchmark):
    for index in range(101):
        user = factories.UserFactory(username=f"racer{index:03d}")
        board_entry(benchmark, user, wall_time_ns=1_000_000_000 + index)

    first = client.get(f"/b/{benchmark.slug}/leaderboard/")
    second = client.get(f"/b/{benchmark.slug}/leaderboard/?page=2")

    assert first.status_code == second.status_code == 200
    assert "racer099" in first.content.decode() and "racer100" not in first.content.decode()
    html = second.content.decode()
    assert 'id="rank-101"' in html and "racer100" in html and "racer000" not in html
    assert "page 2 of 2" in html
    assert client.get(f"/b/{benchmark.slug}/leaderboard/?page=junk").status_code == 200


def test_benchmark_page_shows_the_top_twenty_and_links_the_full_board(client, benchmark):
    for index in range(21):
        board_entry(benchmark, factories.UserFactory(username=f"racer{index:02d}"), 10**9 + index)

    html = client.get(f"/b/{benchmark.slug}/").content.decode()

    assert "racer19" in html and "racer20" not in html
    assert "The full leaderboard (21 entrants)" in html


def test_an_entrant_sees_their_rank_and_a_link_to_their_row(client, benchmark, alice):
    for index in range(30):
        board_entry(benchmark, factories.UserFactory(username=f"racer{index:02d}"), 10**9 + index)
    board_entry(benchmark, alice, 10**9 + 25)  # ties racer25, uploaded later: ranks behind
    client.force_login(alice)

    html = client.get(f"/b/{benchmark.slug}/").content.decode()
    board_html = client.get(f"/b/{benchmark.slug}/leaderboard/").content.decode()

    assert "You are rank 27 of 31 with 1,000.000 ms." in visible_text(html)
    assert f'href="/b/{benchmark.slug}/leaderboard/?page=1#rank-27"' in html
    assert 'href="?page=1#rank-27"' in board_html
    assert '<tr id="rank-27">' in board_html


def test_an_entrants_rank_follows_the_board_at_once(client, benchmark, alice, bob):
    board_entry(benchmark, alice, wall_time_ns=2_000_000_000)
    board_entry(benchmark, bob, wall_time_ns=3_000_000_000)
    client.force_login(alice)
    assert "You are rank 1 of 2" in visible_text(
        client.get(f"/b/{benchmark.slug}/").content.decode()
    )

    board_entry(benchmark, bob, wall_time_ns=1_500_000_000)  # bob overtakes alice

    for path in (f"/b/{benchmark.slug}/", f"/b/{benchmark.slug}/leaderboard/"):
        assert "You are rank 2 " in visible_text(client.get(path).content.decode())


def test_the_board_is_fresh_after_any_change_of_a_row(client, benchmark, alice, bob):
    board_entry(benchmark, alice, wall_time_ns=2_000_000_000)
    board_entry(benchmark, bob, wall_time_ns=3_000_000_000)
    assert "2,000.000 ms" in client.get(f"/b/{benchmark.slug}/leaderboard/").content.decode()

    board_entry(benchmark, bob, wall_time_ns=1_500_000_000)  # bob's new best

    page = client.get(f"/b/{benchmark.slug}/leaderboard/")
    assert [row.entrant for row in page.context["board"].rows] == ["bob", "alice"]
    assert "1,500.000 ms" in page.content.decode()
    LeaderboardEntry.objects.filter(entrant=bob).delete()  # e.g. disqualified
    assert "1,500.000 ms" not in client.get(f"/b/{benchmark.slug}/leaderboard/").content.decode()


def test_practice_download_is_offered_to_signed_in_entrants_once_published(
    client, benchmark, alice
):
    download = reverse("api:practice-download", kwargs={"slug": benchmark.slug})
    client.force_login(alice)
    assert "not published yet" in client.get(f"/b/{benchmark.slug}/").content.decode()

    cohort = Cohort.objects.create(benchmark=benchmark, kind=Cohort.PRACTICE)
    for position in range(3):
        CohortItem.objects.create(
            cohort=cohort, position=position, canonical_name=f"{position}.jpg",
            sha256="0" * 64, reference_class=1,
        )  # fmt: skip

    html = client.get(f"/b/{benchmark.slug}/").content.decode()
    assert download in html
    assert "A public cohort of 3 images" in html
    client.logout()
    anonymous = client.get(f"/b/{benchmark.slug}/").content.decode()
    assert download not in anonymous
    assert "to download it" in anonymous


def test_benchmark_page_draws_the_progress_chart_as_svg_without_script(client, benchmark, alice):
    board_entry(benchmark, alice, wall_time_ns=1_234_567_891)

    html = client.get(f"/b/{benchmark.slug}/").content.decode()

    chart = html[html.index('id="progress"') :]
    assert '<svg role="img"' in chart
    assert "<title>Best wall time of the top entrants</title>" in chart
    assert "1. alice" in chart
    assert "<title>alice: 1,234.568 ms, uploaded" in chart  # a native tooltip per point
    assert "<script" not in html.split("</head>")[1]
    assert "The chart's numbers" in chart


def test_no_chart_before_the_first_passing_run(client, benchmark):
    html = client.get(f"/b/{benchmark.slug}/").content.decode()

    assert "<svg" not in html
    assert "The chart appears with the first passing official run." in html


def _fill_board(benchmark, count: int) -> None:
    start = LeaderboardEntry.objects.count()
    for index in range(start, start + count):
        user = factories.UserFactory(username=f"racer{index}")
        board_entry(benchmark, user, wall_time_ns=1_000_000 + index)


# Exact query counts, the same for 5 and for 50 entrants (and for a cold and a warm cache):
# the user (signed in only; the session too when the cache has lost it), the benchmark,
# the board's version, then
#   benchmark page: rows, chart (leaders, their runs), practice cohort, and for the rules
#                   build network checks, hardware class, noise band (cached), the class's
#                   CPU isolation, the cohort deciding the final standings, public
#                   write-ups (cached); the canary pool too where the benchmark verifies
#                   + signed in: team members, the day's attempts (one read), own row, rank
#   leaderboard:    rows, runs being verified, public write-ups (cached)
#                   + signed in: team members, own row, rank
# Warm, the rows, the chart, the rules, and the viewer's team, attempt day, row and rank
# are cached.
BENCHMARK_PAGE_QUERIES = {"anonymous": 12, "signed_in": 18}
LEADERBOARD_QUERIES = {"anonymous": 5, "signed_in": 10}
WARM_BENCHMARK_PAGE_QUERIES = {"anonymous": 3, "signed_in": 4}
WARM_LEADERBOARD_QUERIES = {"anonymous": 3, "signed_in": 4}


@pytest.mark.parametrize("viewer", ["anonymous", "signed_in"])
@pytest.mark.parametrize("entrants", [5, 50])
def test_the_board_pages_run_a_fixed_number_of_queries(
    client, benchmark, alice, django_assert_num_queries, viewer, entrants
):
    _fill_board(benchmark, entrants)
    board_entry(benchmark, alice, wall_time_ns=999)
    if viewer == "signed_in":
        client.force_login(alice)

    # One instant for every load: the chart's cache key moves with the clock (NOW_STEP_S).
    with time_machine.travel(timezone.now(), tick=False):
        cache.clear()
        with django_assert_num_queries(BENCHMARK_PAGE_QUERIES[viewer]):
            page = client.get(f"/b/{benchmark.slug}/")
        assert page.content.decode().count('<tr id="rank-') == min(20, entrants + 1)
        with django_assert_num_queries(WARM_BENCHMARK_PAGE_QUERIES[viewer]):
            client.get(f"/b/{benchmark.slug}/")

        cache.clear()
        with django_assert_num_queries(LEADERBOARD_QUERIES[viewer]):
            page = client.get(f"/b/{benchmark.slug}/leaderboard/")
        assert page.content.decode().count('<tr id="rank-') == entrants + 1
        with django_assert_num_queries(WARM_LEADERBOARD_QUERIES[viewer]):
            client.get(f"/b/{benchmark.slug}/leaderboard/")


def test_the_chart_reads_a_fixed_number_of_queries(benchmark, django_assert_num_queries):
    from portal.web.chart import progress_chart

    for count in (5, 45):
        _fill_board(benchmark, count)
        cache.clear()
        with django_assert_num_queries(3):  # version, leaders, their runs
            chart = progress_chart(benchmark, now=timezone.now())
        assert len(chart.series) == min(8, LeaderboardEntry.objects.count())
        with django_assert_num_queries(1):  # version; then from the cache
            progress_chart(benchmark, now=timezone.now())


# The build network, as the last live check found it -------------------------------

OLD_NETWORK_SENTENCE = "Builds reach the public internet, but not private"


def _build_network_check(host="build-1", *, enforced=True, problems=(), at=None, **policy):
    from portal.environments.services import build_network_record

    return build_network_record(
        host=host,
        enforced=enforced,
        problems=list(problems),
        policy={
            "network": "podium-build",
            "subnet": "172.29.0.0/24",
            "bridge": "br-podium",
            "blocked": ["10.0.0.0/8", "169.254.0.0/16", "fc00::/7", "198.51.100.7/32"],
            "dns": ["172.29.0.1"],
            "allowed": [],
            **policy,
        },
        now=at,
    )


def _network_item(html: str) -> str:
    """The text of the rules' build network item (up to the next heading)."""
    item = re.search(r'<li id="build-network">(.*?)<h3>', html, re.DOTALL)
    assert item is not None
    return visible_text(item.group(1)).strip()


def _age(seconds: int) -> dt.timedelta:
    return dt.timedelta(seconds=seconds)


@pytest.fixture
def no_stray_checks(db):
    """Only this test's checks: a build worker elsewhere on this machine may have recorded
    a real one in the shared test database."""
    from portal.environments.models import BuildNetworkCheck

    BuildNetworkCheck.objects.all().delete()


@pytest.fixture
def fresh_check_time(time_machine):
    """A check's time; the clock stands a minute later, well inside the stale limit."""
    at = dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC)
    time_machine.move_to(at + _age(60), tick=False)
    return at


@pytest.mark.usefixtures("no_stray_checks")
def test_benchmark_page_states_the_build_network_the_last_check_found(
    client, benchmark, fresh_check_time
):
    _build_network_check(at=fresh_check_time)

    html = client.get(f"/b/{benchmark.slug}/").content.decode()

    assert OLD_NETWORK_SENTENCE not in html
    text = _network_item(html)
    assert "Builds run on Podium's build network (172.29.0.0/24)" in text
    assert (
        "may reach the public internet, but not these ranges: 10.0.0.0/8, 169.254.0.0/16, " in text
    )
    assert "fc00::/7, 198.51.100.7/32; DNS goes only to 172.29.0.1." in text
    assert text.endswith("Checked 2026-08-12 12:00 KST (2026-08-12 03:00 UTC).")
    assert "<code>fc00::/7</code>" in html
    assert "mirror" not in text  # no allow-list, no sentence about it


@pytest.mark.usefixtures("no_stray_checks")
def test_the_allow_list_is_counted_for_everyone_and_listed_for_staff_only(
    client, benchmark, alice, staff, fresh_check_time
):
    _build_network_check(at=fresh_check_time, allowed=["203.0.113.80:443", "10.20.30.40/32"])
    url = f"/b/{benchmark.slug}/"

    for viewer in (None, alice):
        if viewer is not None:
            client.force_login(viewer)
        text = _network_item(client.get(url).content.decode())
        assert "The operator admits 2 package mirrors or proxies inside those ranges." in text
        assert "203.0.113.80:443" not in text and "10.20.30.40/32" not in text

    client.force_login(staff)
    text = _network_item(client.get(url).content.decode())
    assert "The operator admits 2 package mirrors or proxies inside those ranges" in text
    assert "203.0.113.80:443, 10.20.30.40/32" in text


@pytest.mark.usefixtures("no_stray_checks")
def test_one_admitted_entry_reads_in_the_singular(client, benchmark, fresh_check_time):
    _build_network_check(at=fresh_check_time, allowed=["203.0.113.80:443"])

    text = _network_item(client.get(f"/b/{benchmark.slug}/").content.decode())

    assert "The operator admits 1 package mirror or proxy inside those ranges." in text


@pytest.mark.usefixtures("no_stray_checks")
def test_a_failed_last_check_says_the_firewall_is_not_verified(
    client, benchmark, staff, fresh_check_time
):
    _build_network_check("build-1", at=fresh_check_time)
    _build_network_check(
        "build-2", enforced=False, problems=["rule missing: drop fc00::/7"], at=fresh_check_time
    )

    html = client.get(f"/b/{benchmark.slug}/").content.decode()
    text = _network_item(html)

    assert "The build network's firewall is not verified right now (last check " in text
    assert "2026-08-12 12:00 KST (2026-08-12 03:00 UTC)): builds wait until it is." in text
    assert "Builds run on Podium's build network" not in text
    assert "10.0.0.0/8" not in text
    assert "rule missing" not in text  # the problems are for staff

    client.force_login(staff)
    text = _network_item(client.get(f"/b/{benchmark.slug}/").content.decode())
    assert "build-2: rule missing: drop fc00::/7" in text


def test_a_stale_check_says_the_firewall_is_not_verified(client, benchmark, settings, time_machine):
    settings.PODIUM_BUILD_NETWORK_STALE_S = 600
    at = dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC)
    _build_network_check(at=at)
    url = f"/b/{benchmark.slug}/"

    time_machine.move_to(at + _age(599), tick=False)
    assert "Builds run on Podium's build network" in _network_item(client.get(url).content.decode())

    time_machine.move_to(at + _age(601), tick=False)
    cache.clear()  # the rules' facts of the hosts are cached (RULES_CACHE_S): as once it has passed
    text = _network_item(client.get(url).content.decode())
    assert "The build network's firewall is not verified right now (last check " in text
    assert "Builds run on Podium's build network" not in text


@pytest.mark.usefixtures("no_stray_checks")
def test_a_network_never_checked_says_builds_wait(client, benchmark):
    html = client.get(f"/b/{benchmark.slug}/").content.decode()

    assert OLD_NETWORK_SENTENCE not in html
    assert _network_item(html) == (
        "The build network has not been checked yet: builds wait until it is."
    )


@pytest.mark.parametrize("state", ["enforced", "failed"])
def test_the_build_network_block_passes_the_accessibility_checks(
    client, benchmark, staff, fresh_check_time, state
):
    from tests.web.test_accessibility import problems

    _build_network_check(
        enforced=state == "enforced",
        problems=[] if state == "enforced" else ["bridge missing", "rule missing: dns"],
        allowed=["203.0.113.80:443"],
        at=fresh_check_time,
    )
    client.force_login(staff)

    assert problems(client.get(f"/b/{benchmark.slug}/").content.decode()) == []


def test_the_rules_say_how_many_canaries_a_verification_carries(client, benchmark):
    benchmark.verify_top, benchmark.cohort_size, benchmark.pass_min_matches = 20, 100, 99
    benchmark.save()
    text = client.get(f"/b/{benchmark.slug}/").content.decode()
    assert "This benchmark has no canary pool yet" in text
    assert "cannot stop a lookup table" in text

    canaries = Cohort.objects.create(benchmark=benchmark, kind=Cohort.CANARY)
    for position in range(80):
        CohortItem.objects.create(
            cohort=canaries,
            position=position,
            canonical_name=f"c/{position}.JPEG",
            sha256=f"{position:064x}",
            reference_class=position,
        )
    cache.clear()
    text = client.get(f"/b/{benchmark.slug}/").content.decode()
    assert "no canary pool" not in text
    assert "50 of its images (up to 50%) are\n      <strong>canaries</strong>" in text
