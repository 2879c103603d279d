"""The pages in a real browser, without workers: forms by keyboard and without scripts,
inline policy errors, the quota after two attempts, live updates, the viewer's time."""

from __future__ import annotations

import datetime as dt
import io
import re
import tarfile
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from portal.contests.templatetags.podium import until
from portal.core import storage
from portal.environments import services as environment_services
from portal.environments.models import Environment, EnvironmentEvent
from portal.submissions.models import AttemptLedger
from tests import factories
from tests.browser.conftest import (
    VIEWER_ZONE,
    mark_page,
    not_reloaded,
    screenshot,
    sign_in,
    unlabelled_controls,
)
from tests.web.boards import official_run


def source_archive(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for member, mode, body in (
            ("run", 0o755, b"#!/bin/sh\nexit 0\n"),
            ("build.sh", 0o644, b"#!/bin/sh\ntrue\n"),
        ):
            info = tarfile.TarInfo(member)
            info.mode, info.size = mode, len(body)
            archive.addfile(info, io.BytesIO(body))
    return path


def test_sign_in_by_keyboard_alone_in_field_order(live_server, page, alice):
    page.goto(f"{live_server.url}/accounts/login/")
    screenshot(page, "01-sign-in")

    page.keyboard.press("Tab")  # the skip link comes first
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.locator("#id_login").focus()
    page.keyboard.type("alice")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "id_password"
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    page.keyboard.type("correct horse battery")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{live_server.url}/")

    assert outline != "none"  # the focused field shows it
    assert "Signed in as alice" in page.inner_text("header")


def test_a_policy_error_is_shown_inline_with_its_line(live_server, context, page, alice, benchmark):
    sign_in(context, live_server, alice)
    page.goto(f"{live_server.url}/b/{benchmark.slug}/environments/")
    assert unlabelled_controls(page) == []

    page.fill("#id_name", "sneaky")
    page.fill("#id_dockerfile_text", "# base\nFROM evil.example.com/miner:1\nRUN true\n")
    page.locator("#id_dockerfile_text").focus()
    page.keyboard.press("Tab")  # the context archive
    page.keyboard.press("Tab")  # the button
    assert page.evaluate("document.activeElement.textContent") == "Check and build"
    page.keyboard.press("Enter")
    page.wait_for_selector("ol.listing")
    screenshot(page, "04-environment-policy-error")

    field = page.locator(".field.has-error", has=page.locator("#id_dockerfile_text"))
    assert re.search(r"line 2: FROM names `evil\.example\.com/miner:1`", field.inner_text())
    assert page.locator("ol.listing li.flagged").count() == 1
    assert page.locator("ol.listing li.flagged").get_attribute("value") == "2"
    assert page.input_value("#id_name") == "sneaky"  # what was typed is kept
    assert not Environment.objects.exists()


def test_the_quota_after_two_attempts_with_scripts_off(
    live_server, scriptless, alice, benchmark, tmp_path, sent
):
    """The upload form works without JavaScript, and states the quota before each upload."""
    factories.cohorts(benchmark)
    factories.EnvironmentFactory(owner=alice, benchmark=benchmark, name="ready-one")
    sign_in(scriptless, live_server, alice)
    page = scriptless.new_page()
    url = f"{live_server.url}/b/{benchmark.slug}/submissions/"
    quota = page.locator("#quota li").first
    page.goto(url)
    assert quota.inner_text().startswith("2 of 2 official attempts left today; they renew")
    for index in range(2):
        page.goto(url)
        page.check("input[name=kind][value=official]")
        page.set_input_files("#id_source", str(source_archive(tmp_path / f"e{index}.tar.gz")))
        page.click("button:text('Upload')")
        page.wait_for_url(re.compile(r"/submissions/\d+/$"))
    screenshot(page, "07-submission-accepted")
    page.goto(url)
    text = quota.inner_text()
    screenshot(page, "06-submissions-quota-used")

    assert re.fullmatch(
        r"0 of 2 official attempts left today; the next one at 00:00 KST, "
        r"in (\d+ h \d+ min|\d+ min \d+ s|\d+ s)",
        text,
    ), text
    page.set_input_files("#id_source", str(source_archive(tmp_path / "late.tar.gz")))
    page.click("button:text('Upload')")
    assert "You have used all 2 official attempts" in page.inner_text(".form-errors")
    assert AttemptLedger.objects.count() == 2


def test_the_environment_page_follows_a_build_without_reloading(
    live_server, context, page, alice, benchmark, data_dir
):
    environment = factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, status=Environment.QUEUED, image_tag=""
    )
    EnvironmentEvent.objects.create(environment=environment, status="queued", at=timezone.now())
    log = storage.ensure_dir(storage.environment_dir(environment.pk)) / "build.log"
    sign_in(context, live_server, alice)
    page.goto(f"{live_server.url}/environments/{environment.pk}/")
    mark_page(page)
    assert "Waiting for a build slot" in page.inner_text("[data-field=elapsed]")

    environment_services.environment_claim_build(environment.pk)
    log.write_text("Step 1/2 : FROM localhost/podium/busybox:1\n")
    page.wait_for_function(
        "document.querySelector('[data-field=build_log]').textContent.includes('Step 1/2')"
    )
    assert re.match(r"Building for \d+ s of the 30 minutes allowed\.", page.inner_text(".elapsed"))
    assert page.locator("progress.cap").is_visible()
    with log.open("a") as handle:
        handle.write("Step 2/2 : RUN true\n")
    page.wait_for_function(
        "document.querySelector('[data-field=build_log]').textContent.includes('Step 2/2')"
    )
    screenshot(page, "05-environment-building")
    environment_services.environment_finish_build(
        environment_id=environment.pk, status="ready", image_digest="sha256:" + "d" * 64
    )
    page.wait_for_selector("[data-field=status]:text('ready')")

    assert not_reloaded(page)
    assert page.locator("[data-timeline] tr").count() == 3
    assert page.inner_text("[data-field=image_digest]") == "sha256:" + "d" * 64
    assert not page.locator("progress.cap").is_visible()


def test_times_show_the_viewers_zone_and_count_down(live_server, page, db):
    opens = timezone.now() + dt.timedelta(days=2, hours=5, minutes=30)
    benchmark = factories.BenchmarkFactory(
        title="Soon", opens_at=opens, closes_at=opens + dt.timedelta(days=20)
    )
    page.goto(f"{live_server.url}/")
    screenshot(page, "02-home")

    local = page.locator("time[data-local] + .local-time").first.inner_text()
    expected = opens.astimezone(ZoneInfo(VIEWER_ZONE))
    assert local.startswith(f"{expected:%Y-%m-%d %H:%M}")
    assert local.endswith("your time")
    countdown = page.locator("[data-countdown]").first
    assert countdown.inner_text() == "in 2 d 5 h"

    # The script's durations read exactly like the server's.
    for seconds in (3 * 86_400 + 4 * 3_600 + 1_800, 5 * 3_600 + 12 * 60 + 30, -60):
        moment = timezone.now() + dt.timedelta(seconds=seconds)
        page.evaluate(
            "([iso]) => document.body.insertAdjacentHTML('beforeend',"
            " '<span id=probe data-countdown=\"' + iso + '\"></span>')",
            [moment.isoformat()],
        )
        page.wait_for_function("document.getElementById('probe').textContent !== ''")
        assert page.inner_text("#probe") == until(moment, timezone.now())
        page.evaluate("document.getElementById('probe').remove()")
    assert benchmark.slug in page.content()


def test_the_board_chart_and_rules_read_without_scripts(live_server, scriptless, alice, benchmark):
    start = timezone.now() - dt.timedelta(days=2)
    for index in range(3):
        rival = factories.UserFactory(username=f"rival{index}")
        official_run(benchmark, rival, (1_500 - 100 * index) * 1_000_000, at=start)
        official_run(
            benchmark, rival, (1_200 - 100 * index) * 1_000_000, at=start + dt.timedelta(days=1)
        )
    official_run(benchmark, alice, 1_234_567_891, at=start + dt.timedelta(hours=30))
    sign_in(scriptless, live_server, alice)
    page = scriptless.new_page()
    page.goto(f"{live_server.url}/b/{benchmark.slug}/")
    screenshot(page, "03-benchmark")

    rows = page.locator("table.leaderboard tbody tr")
    assert rows.count() == 4
    alice_row = page.locator("table.leaderboard tr", has_text="alice")
    assert alice_row.locator("abbr").get_attribute("title") == "1234567891 ns"
    chart = page.locator("#progress svg")
    assert chart.is_visible()
    box = chart.bounding_box()
    assert box and box["width"] > 600 and box["height"] > 250
    named = page.get_by_role("img", name="Best wall time of the top entrants")
    assert named.count() == 1  # the chart's accessible name comes from its <title>
    assert "1. rival2" in (chart.text_content() or "")
    assert "You are rank" in page.inner_text("#mine")
    page.click("text=/rank \\d+/")
    assert page.evaluate("location.hash").startswith("#rank-")
    page.goto(f"{live_server.url}/b/{benchmark.slug}/leaderboard/")
    screenshot(page, "03b-leaderboard")


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/accounts/signup/", "10-sign-up"),
        ("/accounts/password/reset/", "11-password-reset"),
    ],
)
def test_account_pages_for_visitors(live_server, page, db, path, name):
    page.goto(live_server.url + path)
    screenshot(page, name)

    assert unlabelled_controls(page) == []
    assert page.locator("link[href='/static/podium.css']").count() == 1


def test_api_tokens_are_created_listed_and_revoked(live_server, context, page, alice):
    sign_in(context, live_server, alice)
    page.goto(f"{live_server.url}/account/")
    page.fill("#id_label", "laptop")
    page.click("button:text('Create token')")
    key = page.input_value("#new-token-key")
    screenshot(page, "12-account-new-token")
    assert re.fullmatch(r"[0-9a-f]{40}", key)
    page.goto(f"{live_server.url}/account/")
    assert key not in page.content() and key[:6] in page.content()

    page.click("text=Revoke…")
    page.click("button:text('Yes, revoke it')")

    assert "was revoked" in page.inner_text(".messages")
    assert "You have no API tokens." in page.inner_text("main")
    for path in ("/accounts/email/", "/accounts/password/change/"):
        page.goto(live_server.url + path)
        assert unlabelled_controls(page) == []
    screenshot(page, "13-password-change")


def test_staff_see_the_admin_link_and_entrants_do_not(live_server, context, page, alice, staff):
    sign_in(context, live_server, alice)
    page.goto(f"{live_server.url}/")
    assert page.locator("header a:text('admin')").count() == 0

    sign_in(context, live_server, staff)
    page.goto(f"{live_server.url}/")
    page.click("header a:text('admin')")

    assert page.url.endswith("/admin/")
