"""Restarting Redis while work is queued loses nothing.

Production runs ``redis-server --appendonly yes`` (compose.yaml), so every message is in
the append-only file before a restart. The test starts a Redis of its own the same way
(on a free loopback port, never the suite's shared broker, which CI runs without
persistence), queues builds while no worker runs, restarts Redis, and then lets a real
build worker process every one of them.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml

from portal.environments.models import Environment
from scoring import engine
from tests import factories
from tests.recovery.test_worker_crash import poll, sender, start_worker, stop_worker

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateRedis:
    """A redis-server of the test's own, persisting the way compose.yaml's does."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> None:
        assert REDIS_SERVER is not None
        self.process = subprocess.Popen(
            [
                REDIS_SERVER,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--dir",
                str(self.folder),
                "--appendonly",
                "yes",
                "--save",
                "",
            ],
            stdout=(self.folder / "redis.log").open("ab"),
            stderr=subprocess.STDOUT,
        )
        poll(self._ping, bool, timeout_s=10)

    def _ping(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        """SHUTDOWN, as a restart or an upgrade does; the process exits."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(redis.ConnectionError):  # it closes the connection as it goes
            self.client().shutdown()
        self.process.wait(timeout=10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    folder = tmp_path / "redis"
    folder.mkdir()
    server = PrivateRedis(folder)
    server.start()
    yield server
    server.stop()
    if server.process is not None and server.process.poll() is None:
        server.process.kill()


def test_production_redis_persists_its_queues():
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    command = compose["services"]["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(volume.endswith(":/data") for volume in compose["services"]["redis"]["volumes"])


def test_queued_builds_survive_a_redis_restart(alice, benchmark, data_dir, private_redis):
    environments = [
        factories.EnvironmentFactory(
            owner=alice,
            benchmark=benchmark,
            status=Environment.QUEUED,
            image_tag="",
            dockerfile="FROM localhost/podium/busybox:1\n",
        )
        for _ in range(3)
    ]
    app = sender(private_redis.url)
    for index, environment in enumerate(environments):
        # One of them delayed, as a rescheduled score is: delayed messages persist too.
        app.send_task(
            "scoring.build_environment", args=(environment.pk,), countdown=2 if index else None
        )
    assert private_redis.client().llen("builds") == 3

    private_redis.stop()
    private_redis.start()
    assert private_redis.client().llen("builds") == 3

    log_path = data_dir / "builds-worker.log"
    worker = start_worker(
        queue="builds",
        concurrency=2,
        broker_url=private_redis.url,
        data_dir=data_dir,
        host=f"test-redis-{uuid.uuid4().hex[:8]}",
        log_path=log_path,
    )
    try:
        statuses = poll(
            lambda: sorted(
                Environment.objects.filter(pk__in=[e.pk for e in environments]).values_list(
                    "status", flat=True
                )
            ),
            lambda found: found == [Environment.READY] * 3,
            timeout_s=90,
            interval_s=0.25,
        )
        assert statuses == [Environment.READY] * 3
        time.sleep(0.5)  # acknowledgements reach Redis
        assert private_redis.client().llen("builds") == 0
    finally:
        stop_worker(worker, log_path)
        tags = Environment.objects.filter(pk__in=[e.pk for e in environments]).values_list(
            "image_tag", flat=True
        )
        for tag in tags:
            if tag:
                engine.remove_image(tag)
