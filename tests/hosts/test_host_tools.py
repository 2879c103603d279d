"""Host tools: who needs which, and what happens without them.

A scoring host that lacks a host tool its runs need (the supervisor) refuses to
register, says which in one log line, records it on its row (the admin and
``GET /api/v1/hosts/`` show it) and claims no run until a registration finds it. A
scoring host needs no ``jpegtran`` (verification sets are re-encoded on the builds
side); a builds worker does, and says so in one line when it starts without it.

No Docker here: the engine's version is a stand-in; the supervisor is a stand-in file
that a test deletes or writes, and ``jpegtran`` is looked up on a ``PATH`` made for each
test (an empty folder, or one holding a stand-in ``jpegtran``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from celery.signals import worker_ready
from django.urls import reverse
from django.utils import timezone

from portal.core import jobs
from portal.hosts.models import ScoringHost
from portal.hosts.selectors import hosts_online
from portal.submissions.models import Run, Submission
from scoring import engine, worker
from scoring.host import hosts
from tests.scoring.test_runner import FakeEngine, queued  # noqa: F401 (a fixture)

HOST = "alpha"
CLASS = "cpu-x86_64"
SUPERVISOR = b"\x7fELF trusted timer"


@pytest.fixture
def machine(settings, tmp_path, monkeypatch) -> Path:
    """A supervisor binary, a Docker Engine version, no nvidia-smi; jpegtran on PATH
    (the folder returned)."""
    built = tmp_path / "supervisor-build"
    built.mkdir()
    supervisor = built / "supervise"
    supervisor.write_bytes(SUPERVISOR)
    settings.PODIUM_SUPERVISOR = supervisor
    settings.PODIUM_GPU_QUERY_COMMAND = str(tmp_path / "no-such-nvidia-smi")
    settings.PODIUM_HOST_NAME = HOST
    settings.PODIUM_HARDWARE_CLASS = CLASS
    monkeypatch.setattr(engine, "version", lambda: "27.3.1")
    tools = tmp_path / "tools"
    tools.mkdir()
    jpegtran = tools / "jpegtran"
    jpegtran.write_text("#!/bin/sh\nexit 0\n")
    jpegtran.chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    return tools


@pytest.fixture
def no_supervisor(machine, tmp_path, settings) -> Path:
    """``PODIUM_SUPERVISOR`` names a file that is not there (``make supervisor`` never
    ran); returned, so a test can build it."""
    supervisor = tmp_path / "not-built" / "supervise"
    settings.PODIUM_SUPERVISOR = supervisor
    return supervisor


def build_supervisor(path: Path) -> None:
    """What ``make supervisor`` leaves behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(SUPERVISOR)


@pytest.fixture
def no_jpegtran(machine, tmp_path, monkeypatch) -> None:
    """PATH is a folder with nothing in it: this machine has no jpegtran."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "refuses to register" in r.getMessage()]


# A scoring host without the supervisor ------------------------------------------------


def test_a_host_without_the_supervisor_refuses_to_register_and_says_which(
    db, no_supervisor, caplog
):
    caplog.set_level(logging.INFO, logger="scoring.host.hosts")

    with pytest.raises(hosts.HostRefused, match="supervisor"):
        hosts.register()

    [line] = refusals(caplog)
    assert f"scoring host {HOST} refuses to register for {CLASS}" in line
    assert "supervisor" in line and str(no_supervisor) in line and "make supervisor" in line
    assert "jpegtran" not in line  # only what is missing
    host = ScoringHost.objects.get(name=HOST)
    assert host.missing_tools == ["supervisor"]
    assert not hosts.accepts_work(HOST)
    assert hosts_online(CLASS, timezone.now()) == 0  # not counted for its class's queue


def test_every_missing_tool_is_named_in_the_one_line():
    line = hosts.tools_problem(
        {"supervisor": "every run's timer: make supervisor", "meter": "the meter: install it"}
    )

    assert line.startswith("missing host tools: ")
    assert "supervisor (every run's timer: make supervisor)" in line
    assert "meter (the meter: install it)" in line
    assert hosts.tools_problem({}) == ""


def test_once_the_supervisor_is_built_the_host_registers_and_takes_work(db, no_supervisor):
    with pytest.raises(hosts.HostRefused):
        hosts.register()
    assert not hosts.accepts_work(HOST)

    build_supervisor(no_supervisor)

    assert hosts.accepts_work(HOST)
    host = ScoringHost.objects.get(name=HOST)
    assert host.missing_tools == [] and host.status == ScoringHost.ACTIVE
    assert hosts_online(CLASS, timezone.now()) == 1


def test_a_host_that_loses_the_supervisor_takes_no_more_runs(db, machine, settings):
    assert hosts.register().missing_tools == []
    assert hosts.accepts_work(HOST)

    Path(settings.PODIUM_SUPERVISOR).unlink()  # make clean

    assert not hosts.accepts_work(HOST)
    assert ScoringHost.objects.get(name=HOST).missing_tools == ["supervisor"]


def test_the_heartbeat_says_it_once_per_try_and_registers_once_the_tool_is_there(
    db, no_supervisor, caplog
):
    registered: list[bool] = []
    heartbeat = hosts.HostHeartbeat(interval_s=1, on_registered=lambda: registered.append(True))

    heartbeat.beat()

    assert len(refusals(caplog)) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info]
    assert not heartbeat.registered and registered == []
    build_supervisor(no_supervisor)
    heartbeat.beat()
    assert heartbeat.registered and registered == [True]
    assert ScoringHost.objects.get(name=HOST).missing_tools == []


def test_the_api_shows_what_a_host_lacks(db, no_supervisor, alice, client_for):
    with pytest.raises(hosts.HostRefused):
        hosts.register()

    [row] = client_for(alice).get("/api/v1/hosts/").json()

    assert row["name"] == HOST and row["missing_tools"] == ["supervisor"]


def test_the_admin_shows_what_a_host_lacks(db, no_supervisor, client, charlie, make_host):
    make_host("bravo")
    with pytest.raises(hosts.HostRefused):
        hosts.register()
    host = ScoringHost.objects.get(name=HOST)
    client.force_login(charlie)

    listing = client.get(reverse("admin:hosts_scoringhost_changelist")).content.decode()
    page = client.get(reverse("admin:hosts_scoringhost_change", args=[host.pk])).content.decode()

    assert "Missing tools" in listing and "supervisor" in listing
    assert "Missing tools" in page and "supervisor" in page


def test_a_host_without_the_supervisor_claims_no_run_and_wakes_another(
    db,
    queued,  # noqa: F811 (the fixture)
    no_supervisor,
    monkeypatch,
    sent,
    django_capture_on_commit_callbacks,
    settings,
):
    fake = FakeEngine().install(monkeypatch)
    hardware_class = queued.benchmark.hardware_class_id
    settings.PODIUM_HARDWARE_CLASS = hardware_class

    with django_capture_on_commit_callbacks(execute=True):
        worker.score_next(hardware_class)

    queued.refresh_from_db()
    assert queued.status == Submission.QUEUED and not queued.runs.exists()
    assert fake.calls == []
    assert sent == [(jobs.SCORE_NEXT, (hardware_class, 0))]
    # The same host, its supervisor built, scores it.
    build_supervisor(no_supervisor)
    worker.score_next(hardware_class)
    run = Run.objects.get(submission=queued)
    assert run.status == Run.FINISHED and run.host == HOST


# A scoring host without jpegtran ------------------------------------------------------


def test_a_scoring_host_without_jpegtran_registers_and_takes_work(
    db,
    queued,  # noqa: F811 (the fixture)
    no_jpegtran,
    monkeypatch,
    settings,
    caplog,
):
    FakeEngine().install(monkeypatch)
    hardware_class = queued.benchmark.hardware_class_id
    settings.PODIUM_HARDWARE_CLASS = hardware_class

    host = hosts.register()

    assert host.missing_tools == [] and host.status == ScoringHost.ACTIVE
    assert refusals(caplog) == []
    assert hosts_online(hardware_class, timezone.now()) == 1
    worker.score_next(hardware_class)
    run = Run.objects.get(submission=queued)
    assert run.status == Run.FINISHED and run.host == HOST


# A builds worker without jpegtran -----------------------------------------------------


class _Consumer:
    """What ``worker_ready`` sends: the worker's consumer (hashable, as Celery's signal
    needs), whose app knows the queues."""

    def __init__(self, *queues: str) -> None:
        consume_from = {name: object() for name in queues}
        self.app = SimpleNamespace(
            amqp=SimpleNamespace(queues=SimpleNamespace(consume_from=consume_from))
        )


@pytest.fixture
def worker_starts(monkeypatch, caplog) -> Any:
    """Start a worker on ``queues``: send ``worker_ready`` as Celery does (the handlers
    ``scoring/tasks.py`` connects; a scoring worker's heartbeat is a stand-in that never
    runs). Returns the error lines about jpegtran that were logged."""
    from scoring import tasks  # noqa: F401 (connects the handlers, as a worker's autodiscovery)

    class FakeHeartbeat:
        on_registered: Any = None

        def start(self) -> None:
            pass

        def is_alive(self) -> bool:
            return True

        def wait_started(self, timeout_s: float) -> bool:
            return True

    monkeypatch.setattr(worker, "HostHeartbeat", FakeHeartbeat)
    monkeypatch.setattr(worker, "_heartbeat", None)

    def start(*queues: str) -> list[str]:
        caplog.clear()
        worker_ready.send(sender=_Consumer(*queues))
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.ERROR and "jpegtran" in r.getMessage()
        ]

    return start


@pytest.mark.parametrize("queues", [("builds",), ("builds", f"scoring.{CLASS}")])
def test_a_builds_worker_without_jpegtran_says_so_in_one_line(no_jpegtran, worker_starts, queues):
    [line] = worker_starts(*queues)

    assert "verification sets cannot be prepared" in line
    assert "verifications wait" in line
    assert "apt-get install libjpeg-turbo-progs" in line


def test_a_builds_worker_with_jpegtran_says_nothing(machine, worker_starts):
    assert worker_starts("builds") == []


def test_a_scoring_only_worker_without_jpegtran_says_nothing(no_jpegtran, worker_starts):
    assert worker_starts(f"scoring.{CLASS}") == []
    assert worker_starts("scoring") == []
