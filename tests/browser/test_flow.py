"""An entrant's whole contest in a real browser, on real workers and the real Docker Engine:
sign up, build an environment and watch its log grow, upload the starter kit, watch the
submission pass without reloading, and find themselves on the leaderboard and the chart."""

from __future__ import annotations

import datetime as dt
import re
import tarfile
import time
import uuid
from pathlib import Path

import pytest
from django.core import mail
from django.utils import timezone

from portal.contests.cohorts import cohort_import
from portal.contests.democohort import generate
from tests import factories
from tests.browser.conftest import mark_page, not_reloaded, screenshot, unlabelled_controls
from tests.e2e.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

STARTER_KIT = REPO / "examples" / "starter-kit"
COHORT_SIZE = 24
# The starter kit's Dockerfile, plus a slow step that prints as it goes, so the page has a
# log that visibly grows while the build runs (a fresh nonce each time: never from cache).
SLOW_STEP = (
    'RUN echo "nonce {nonce}"; '
    'for step in 1 2 3 4 5 6; do echo "warming up $step of 6"; sleep 1; done\n'
)
PASSWORD = "a long and unusual passphrase"


@pytest.fixture
def demo(transactional_db, data_dir: Path, tmp_path: Path):
    """An open benchmark with a tiny generated official cohort and 2 attempts a day."""
    now = timezone.now()
    benchmark = factories.BenchmarkFactory(
        slug="demo-browser",
        title="Demo in the browser",
        opens_at=now - dt.timedelta(minutes=1),
        closes_at=now + dt.timedelta(days=1),
        cohort_size=COHORT_SIZE,
        pass_min_matches=COHORT_SIZE - 1,
        build_timeout_s=300,
        score_timeout_s=120,
    )
    images = tmp_path / "cohort"
    answers = generate(images, COHORT_SIZE, seed=11)
    cohort_import(benchmark=benchmark, kind="official", images_dir=images, answers=answers)
    return benchmark


def starter_kit_archive(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for member in sorted(STARTER_KIT.iterdir()):
            archive.add(member, arcname=member.name)
    return path


def log_text(page) -> str:
    return page.inner_text("[data-field=build_log]")


def test_an_entrant_goes_from_sign_up_to_the_leaderboard(
    celery_workers, live_server, page, demo, tmp_path
):
    # Sign up, by keyboard alone, in the fields' own order.
    page.goto(f"{live_server.url}/accounts/signup/")
    assert unlabelled_controls(page) == []
    page.locator("#id_username").focus()
    fields = ["id_username", "id_email", "id_password1", "id_password2"]
    values = ["carol", "carol@example.com", PASSWORD, PASSWORD]
    for index, (field, value) in enumerate(zip(fields, values, strict=True)):
        assert page.evaluate("document.activeElement.id") == field
        page.keyboard.type(value)
        page.keyboard.press("Enter" if index == len(fields) - 1 else "Tab")

    # Uploads need a verified address: follow the link mailed at signup, and confirm.
    page.wait_for_url(f"{live_server.url}/accounts/confirm-email/")
    [message] = mail.outbox
    link = re.search(r"https?://\S+/accounts/confirm-email/\S+/", message.body)
    assert link is not None, message.body
    page.goto(link[0])
    page.click("button:text('Confirm')")
    page.wait_for_url(f"{live_server.url}/")
    assert "Signed in as carol" in page.inner_text("header")

    # The benchmark, then a new environment from a pasted Dockerfile.
    page.click(f"text={demo.title}")
    page.click("text=Your environments")
    dockerfile = (STARTER_KIT / "Dockerfile").read_text() + SLOW_STEP.format(nonce=uuid.uuid4())
    page.fill("#id_name", "starter")
    page.fill("#id_dockerfile_text", dockerfile)
    page.click("button:text('Check and build')")
    page.wait_for_url(re.compile(r"/environments/\d+/$"))
    mark_page(page)

    # Its log tail grows while it builds, without a reload.
    seen: list[str] = []
    deadline = time.monotonic() + 240
    while page.inner_text("[data-field=status]") in ("queued", "building"):
        text = log_text(page)
        if not seen or text != seen[-1]:
            seen.append(text)
            if "warming up 3 of 6" in text and "warming up 6 of 6" not in text:
                screenshot(page, "05b-environment-build-log-growing")
        assert time.monotonic() < deadline, seen[-1:]
        time.sleep(0.25)
    assert page.inner_text("[data-field=status]") == "ready", log_text(page)
    partial = [text for text in seen if "warming up 1 of 6" in text and "6 of 6" not in text]
    assert partial, seen  # the page showed the log part-way through the build
    assert "warming up 6 of 6" in log_text(page)
    assert not_reloaded(page)
    screenshot(page, "05c-environment-ready")

    # Upload the starter kit as an official attempt, the quota stated first.
    page.click("text=Upload a submission on this environment")
    quota = page.locator("#quota li").first
    assert quota.inner_text().startswith("2 of 2 official attempts left today")
    page.set_input_files("#id_source", str(starter_kit_archive(tmp_path / "starter-kit.tar.gz")))
    page.click("button:text('Upload')")
    page.wait_for_url(re.compile(r"/submissions/\d+/$"))
    mark_page(page)
    screenshot(page, "08-submission-in-progress")

    # The timeline fills in and the status reaches passed, without a reload.
    page.wait_for_selector("[data-field=status]:text('passed')", timeout=240_000)
    assert not_reloaded(page)
    statuses = page.locator("[data-timeline] tr td:first-child").all_inner_texts()
    assert statuses == ["accepted", "building", "queued", "staging", "running", "passed"]
    agreement = page.inner_text("[data-field=agreement]")
    assert agreement == f"{COHORT_SIZE} / {COHORT_SIZE} top-1 matches"
    assert re.fullmatch(r"[\d,]+\.\d{3} ms \(\d+ ns\)", page.inner_text("[data-field=wall_time]"))
    assert page.inner_text("[data-field=outcome]").startswith("Passed")
    assert page.inner_text("[data-field=digest_output]").startswith("sha256:")
    assert "build.sh: ready" in page.inner_text("[data-field=build_log]")
    screenshot(page, "09-submission-passed")

    # The entrant is on the leaderboard and on the chart.
    page.click(f"text={demo.title}")
    board = page.locator("table.leaderboard tbody tr")
    assert board.count() == 1
    assert "carol" in board.first.inner_text()
    assert "1. carol" in (page.locator("#progress svg").text_content() or "")
    assert "You are rank 1 of 1" in page.inner_text("#mine")
    assert "1 of 2 official attempts left today; the next one at 00:00 KST" in page.inner_text(
        "#mine"
    )
    screenshot(page, "03c-benchmark-after-passing")
