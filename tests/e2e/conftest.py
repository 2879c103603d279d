"""Real Celery workers (separate processes) on the test database, broker and data folder."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from portal.core import jobs
from portal.environments.models import Environment
from portal.submissions.models import Submission
from scoring import engine

REPO = Path(__file__).resolve().parents[2]


def worker_command(queue: str, concurrency: int) -> list[str]:
    """The command line of a real Celery worker on one queue, as the Procfile starts it."""
    return [
        sys.executable, "-m", "celery", "-A", "portal", "worker",
        "--queues", queue, "--concurrency", str(concurrency),
        "--hostname", f"{queue}-{uuid.uuid4().hex[:8]}@%h", "--loglevel", "INFO",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip


def database_url() -> str:
    """The URL of the database this test runs on, for the worker processes."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    return (
        f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or 'localhost'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}"
    )


@pytest.fixture
def worker_env() -> dict[str, str]:
    """More environment for the workers (a test module overrides this fixture)."""
    return {}


@pytest.fixture
def celery_workers(transactional_db, data_dir: Path, worker_env: dict[str, str]) -> Iterator[None]:
    """A build worker (concurrency 2) and a scoring worker (concurrency 1), as `make run` starts."""
    env = {
        **os.environ,
        **worker_env,
        "DATABASE_URL": database_url(),
        "PODIUM_DATA_DIR": str(data_dir),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "PODIUM_BROKER_DIR": str(
            Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("data_folder_in", data_dir)).parent
        ),
        "PYTHONUNBUFFERED": "1",
        "PODIUM_GATE_CPU_BUSY_MAX": str(settings.PODIUM_GATE_CPU_BUSY_MAX),
        "PODIUM_GATE_CPU_SAMPLE_S": str(settings.PODIUM_GATE_CPU_SAMPLE_S),
        "PODIUM_HOST_NAME": settings.PODIUM_HOST_NAME,
        "PODIUM_CALIBRATION": "0",
        "PODIUM_HOST_SPEED_PROBE": "0",
        "PODIUM_HARDWARE_CLASS": settings.PODIUM_HARDWARE_CLASS,
    }
    logs = data_dir / "worker-logs"
    logs.mkdir()
    workers = []
    scoring = jobs.scoring_queue(settings.PODIUM_HARDWARE_CLASS)
    for queue, concurrency in (("builds", 2), (scoring, 1)):
        log = (logs / f"{queue}.log").open("wb")
        workers.append(
            (
                subprocess.Popen(
                    worker_command(queue, concurrency),
                    cwd=REPO,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                ),
                log,
            )
        )
    try:
        yield
    finally:
        for process, _log in workers:
            process.terminate()
        for process, log in workers:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
            log.close()
        for path in logs.iterdir():  # shown by pytest when a test failed
            sys.stderr.write(f"--- {path.name} (tail) ---\n{path.read_text()[-4000:]}\n")
        remove_built_images()


def remove_built_images() -> None:
    """Remove the images the workers built for this test's rows (the engine outlives it)."""
    tags = {
        *Environment.objects.exclude(image_tag="").values_list("image_tag", flat=True),
        *Submission.objects.exclude(image_tag="").values_list("image_tag", flat=True),
    }
    for tag in sorted(tags):
        if tag.startswith(
            ("podium-entrant/env-", "podium-entrant/sub-")
        ):  # never a shared base image
            engine.remove_image(tag)


def wait_for(fetch, done, timeout_s: float, interval_s: float = 0.5):
    """Poll ``fetch()`` until ``done(value)``; return the last value (fail on timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting; last value: {value}")
        time.sleep(interval_s)
