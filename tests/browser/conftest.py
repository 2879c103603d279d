"""Browser tests: Playwright (sync API) driving Debian's chromium against the live server.

They skip when ``/usr/bin/chromium`` is missing, unless ``REQUIRE_DOCKER=1`` (CI, which
installs chromium): then a missing browser fails them. Every test saves screenshots of
the pages it visits to ``screenshots/`` at the repository root (ignored by git):

    PODIUM_DATA_DIR=/tmp/podium-browser .venv/bin/pytest tests/browser
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import cache
from django.test import Client

from tests.e2e.conftest import celery_workers, worker_env  # noqa: F401

# Playwright's sync API runs an event loop in this thread; Django's ORM calls made by
# the tests themselves are still plain synchronous calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "screenshots"
CHROMIUM = Path(os.environ.get("PODIUM_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWER_ZONE = "Europe/Berlin"  # the browser's own zone: neither KST nor UTC


def pytest_runtest_setup(item: pytest.Item) -> None:
    if not CHROMIUM.exists():
        if os.environ.get("REQUIRE_DOCKER") == "1":
            pytest.fail(f"REQUIRE_DOCKER=1 but there is no browser at {CHROMIUM}")
        pytest.skip(f"no browser at {CHROMIUM}")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    """A fresh browser profile in Berlin time, with scripts on."""
    context = browser.new_context(viewport={"width": 1200, "height": 900}, timezone_id=VIEWER_ZONE)
    context.set_default_timeout(15_000)
    yield context
    context.close()


@pytest.fixture
def scriptless(browser: Any) -> Iterator[Any]:
    """A browser profile with JavaScript turned off: the core forms must work without it."""
    context = browser.new_context(
        java_script_enabled=False, viewport={"width": 1200, "height": 900}
    )
    context.set_default_timeout(15_000)
    yield context
    context.close()


@pytest.fixture
def page(context: Any) -> Any:
    return context.new_page()


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


def sign_in(context: Any, live_server: Any, user: Any) -> None:
    """Give the browser a signed-in session for ``user`` (the sign-in form has its own test)."""
    client = Client()
    client.force_login(user)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    context.add_cookies(
        [{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": live_server.url}]
    )


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def mark_page(page: Any) -> None:
    """Leave a mark in the page's window: it survives until the page is reloaded."""
    page.evaluate("window.podiumNotReloaded = true")


def not_reloaded(page: Any) -> bool:
    return bool(page.evaluate("window.podiumNotReloaded === true"))


# What a screen reader needs of each form control, checked in the live DOM.
UNLABELLED_CONTROLS_JS = """
() => Array.from(document.querySelectorAll("input, select, textarea"))
  .filter((el) => !["hidden", "submit", "button"].includes(el.type))
  .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute("aria-label")
                  && !el.getAttribute("aria-labelledby"))
  .map((el) => el.outerHTML)
"""


def unlabelled_controls(page: Any) -> list[str]:
    return list(page.evaluate(UNLABELLED_CONTROLS_JS))
