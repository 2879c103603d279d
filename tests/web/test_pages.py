"""The public pages: the benchmark list and a benchmark's rules, leaderboard and quota."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal.contests import rules
from portal.contests.models import Cohort, LeaderboardEntry
from portal.submissions.models import AttemptLedger, Run, Submission
from tests import factories

KST = ZoneInfo("Asia/Seoul")


def board_entry(benchmark, entrant, wall_time_ns: int, matches: int = 9950) -> LeaderboardEntry:
    """A passing official run of ``entrant`` on the stored leaderboard."""
    environment = factories.EnvironmentFactory(owner=entrant, benchmark=benchmark)
    cohort, _ = Cohort.objects.get_or_create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    submitted_at = timezone.now() - dt.timedelta(hours=1)
    submission = Submission.objects.create(
        entrant=entrant,
        benchmark=benchmark,
        environment=environment,
        status=Submission.PASSED,
        submitted_at=submitted_at,
        source_name="src.tar.gz",
        source_format="tar.gz",
        source_sha256="a" * 64,
        source_bytes=100,
    )
    run = Run.objects.create(
        submission=submission,
        cohort=cohort,
        status=Run.FINISHED,
        verdict="passed",
        wall_time_ns=wall_time_ns,
        matches=matches,
        total=10000,
        passed=True,
    )
    return LeaderboardEntry.objects.create(
        benchmark=benchmark,
        entrant=entrant,
        submission=submission,
        run=run,
        wall_time_ns=wall_time_ns,
        matches=matches,
        total=10000,
        submitted_at=submitted_at,
    )


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
    statuses = {b.slug: s for b, s in page.context["benchmarks"]}
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
    assert "<code>podium/</code>" in html


def test_rules_follow_a_changed_setting(client, benchmark):
    benchmark.pass_min_matches = 9500
    benchmark.attempts_per_day = 3
    benchmark.save(update_fields=["pass_min_matches", "attempts_per_day"])

    html = client.get(f"/b/{benchmark.slug}/").content.decode()

    assert "9,500" in html and "(95%)" in html
    assert "3 official attempts" in html


def test_leaderboard_lists_rows_in_rank_order_with_exact_ns(client, benchmark, alice, bob):
    board_entry(benchmark, bob, wall_time_ns=2_500_000_123, matches=9990)
    board_entry(benchmark, alice, wall_time_ns=1_234_567_891)

    page = client.get(f"/b/{benchmark.slug}/")

    html = page.content.decode()
    assert [row.entrant for row in page.context["rows"]] == ["alice", "bob"]
    assert 'title="1234567891 ns"' in html
    assert "1,234.568 ms" in html
    assert "2,500.000 ms" in html
    assert "9,990 / 10,000" in html
    assert html.index("alice") < html.index("bob", html.index('id="leaderboard"'))


def test_leaderboard_uses_the_same_number_of_queries_for_5_and_50_rows(
    client, benchmark, alice, django_assert_max_num_queries
):
    client.force_login(alice)

    def add_rows(count: int) -> None:
        start = LeaderboardEntry.objects.count()
        for index in range(start, start + count):
            user = factories.UserFactory(username=f"racer{index}")
            board_entry(benchmark, user, wall_time_ns=1_000_000 + index)

    add_rows(5)
    with CaptureQueriesContext(connection) as five:
        assert len(client.get(f"/b/{benchmark.slug}/").context["rows"]) == 5
    add_rows(45)
    with django_assert_max_num_queries(len(five.captured_queries)):
        page = client.get(f"/b/{benchmark.slug}/")
    assert len(page.context["rows"]) == 50


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

    assert "1 of 2 official attempts left today" in html
    assert "10 of 10 practice attempts left today" in html
    assert "next reset 00:00 KST" in html
    assert "2026-08-13 00:00 KST (2026-08-12 15:00 UTC)" in html
    assert reverse("environments:list", kwargs={"slug": benchmark.slug}) in html
    assert reverse("submissions:list", kwargs={"slug": benchmark.slug}) in html
    assert reverse("api:practice-download", kwargs={"slug": benchmark.slug}) in html


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
