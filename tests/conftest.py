"""Shared fixtures: named users (alice, bob the rival, staff), an open benchmark, the data folder.

Docker tests carry ``@pytest.mark.docker``: they skip when no engine answers, unless
``REQUIRE_DOCKER=1`` (set by CI), which turns the skip into a failure.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.core.servers.basehttp import ThreadedWSGIServer
from django.test.testcases import LiveServerThread
from django.utils import timezone

from portal.core import jobs
from tests import factories


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """Each test run has a test database of its own (``test_<name>_<pid>``), so two runs
    side by side on one machine never drop each other's."""
    from django.conf import settings

    for database in settings.DATABASES.values():
        test = database.setdefault("TEST", {})
        if database["ENGINE"] != "django.db.backends.sqlite3" or test.get("NAME"):
            name = test.get("NAME") or f"test_{database['NAME']}"
            test["NAME"] = f"{name}_{os.getpid()}"


@cache
def docker_available() -> bool:
    if shutil.which("docker") is None and not Path("/var/run/docker.sock").exists():
        return False
    from scoring import engine

    return engine.available()


@cache
def build_network_problems() -> tuple[str, ...]:
    """Install the build network and its rules once per session (builds refuse to start
    without them); what could not be put in place."""
    from django.conf import settings

    from scoring.build import buildnet

    if "PODIUM_BUILD_EGRESS_ALLOW" not in os.environ:
        # As `make test` sets it: the rules are one per host, so every test session
        # (and the workers it starts) must ask for the same allow-list.
        found = subprocess.run(
            [str(Path(__file__).resolve().parents[1] / "scripts" / "mirror-allowlist")],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        os.environ["PODIUM_BUILD_EGRESS_ALLOW"] = found
        settings.PODIUM_BUILD_EGRESS_ALLOW = found
    try:
        return tuple(buildnet.apply().problems)
    except Exception as exc:  # not root, no iptables: said once, as the reason to skip
        return (f"{type(exc).__name__}: {exc}",)


def pytest_runtest_setup(item: pytest.Item) -> None:
    needs_docker = item.get_closest_marker("docker") or item.get_closest_marker("e2e")
    if not needs_docker:
        return
    required = os.environ.get("REQUIRE_DOCKER") == "1"
    if not docker_available():
        if required:
            pytest.fail("REQUIRE_DOCKER=1 but no Docker Engine answers here")
        pytest.skip("no Docker Engine here")
    problems = build_network_problems()
    if problems:
        message = f"the build network cannot be put in place: {'; '.join(problems)}"
        if required:
            pytest.fail(message)
        pytest.skip(message)


class _WideBacklogServer(ThreadedWSGIServer):
    # Django's test server listens with a backlog of 10: more simultaneous connections
    # overflow the kernel's accept queue and are dropped or reset there, never reaching
    # the portal a test is about.
    request_queue_size = 128


class _CrowdServerThread(LiveServerThread):
    server_class = _WideBacklogServer


@pytest.fixture
def crowd_server(transactional_db: None, settings) -> Iterator[str]:
    """A live server (its URL) for tests that send it many simultaneous requests."""
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "127.0.0.1"]
    thread = _CrowdServerThread("127.0.0.1", StaticFilesHandler)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait()
    if thread.error:
        raise thread.error
    yield f"http://127.0.0.1:{thread.port}"
    thread.terminate()


@pytest.fixture(autouse=True)
def data_dir(settings, tmp_path: Path) -> Path:
    """Every test gets its own storage root."""
    path = tmp_path / "data"
    path.mkdir()
    settings.PODIUM_DATA_DIR = path
    return path


@pytest.fixture(autouse=True)
def quiet_machine_gates(settings) -> None:
    """Scores in tests run on a busy test machine: the CPU gate's decisions are tested with
    fakes (tests/scoring/test_gates.py), not by waiting for this machine to be idle. Each
    test process holds its own machine lock, apart from any other suite on this engine."""
    settings.PODIUM_GATE_CPU_BUSY_MAX = 1024.0
    settings.PODIUM_GATE_CPU_SAMPLE_S = 0.1
    settings.PODIUM_HOST_NAME = f"test-{os.getpid()}"
    # Calibration has its own tests (tests/*/test_calibration.py), which turn it on.
    settings.PODIUM_CALIBRATION = False
    # So does the host-speed probe (tests/scoring/test_host_speed.py): on a busy test
    # machine it would mark runs and requeue their submissions at random.
    settings.PODIUM_HOST_SPEED_PROBE = False
    # So has the reference kit's spread (tests/submissions/test_reference_spread.py).
    settings.PODIUM_REFERENCE_EVERY_S = 0


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """Every task the code under test enqueued, as (name, args), instead of a broker."""
    calls: list[tuple[str, tuple[Any, ...]]] = []

    def send_task(name: str, args: Any = (), **options: Any) -> None:
        calls.append((name, tuple(args or ())))

    monkeypatch.setattr(jobs.app, "send_task", send_task)
    return calls


@pytest.fixture
def alice(db):
    return factories.UserFactory(username="alice")


@pytest.fixture
def bob(db):
    return factories.UserFactory(username="bob")


@pytest.fixture
def staff(db):
    return factories.UserFactory(username="staff", is_staff=True, is_superuser=True)


@pytest.fixture
def benchmark(db):
    """An open benchmark with the default rules."""
    now = timezone.now()
    return factories.BenchmarkFactory(
        opens_at=now - dt.timedelta(days=1), closes_at=now + dt.timedelta(days=10)
    )


@pytest.fixture(scope="session", autouse=True)
def shared_cache_of_this_process() -> Iterator[None]:
    """``make test`` runs the Docker-free tests in several processes (pytest-xdist): each
    gets a shared cache of its own (the next Redis database, or its own folder), so one
    process emptying its cache between tests never empties another's mid-test."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        yield
        return
    from django.conf import settings
    from django.test import override_settings

    index = int(worker.removeprefix("gw"))
    cache = dict(settings.CACHES["default"])
    if "redis" in cache["BACKEND"].lower():
        parts = urlsplit(cache["LOCATION"])
        database = (int(parts.path.strip("/") or 0) + 1 + index) % 16
        cache["LOCATION"] = urlunsplit(parts._replace(path=f"/{database}"))
    else:
        cache["LOCATION"] = f"{cache['LOCATION']}-{worker}"
    with override_settings(CACHES={**settings.CACHES, "default": cache}):
        yield


@pytest.fixture(autouse=True)
def empty_shared_cache() -> None:
    """Throttle and failed sign-in counts live in the shared cache (files under the test data
    folder, or Redis), which outlives each test: no test inherits another's counts, nor
    the drawings a page kept in this process."""
    from django.core.cache import cache

    from portal.web.attempts_chart import forget_local

    cache.clear()
    forget_local()


@pytest.fixture(scope="session")
def grader_image() -> str:
    """The grader image, made or remade by scripts/base-images when missing or stale."""
    from scoring.estimation.grade import GRADER_IMAGE, check_image

    subprocess.run(
        [str(Path(__file__).resolve().parents[1] / "scripts" / "base-images"), "whest-grader"],
        check=True,
    )
    check_image(GRADER_IMAGE)
    return GRADER_IMAGE
