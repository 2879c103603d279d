"""A scoring host that lacks a host tool its runs need (``jpegtran``, the supervisor)
refuses to register, says which in one log line, records them on its row (the admin and
``GET /api/v1/hosts/`` show them) and claims no run until a registration finds them.

No Docker here: the engine's version is a stand-in; ``jpegtran`` is looked up on a
``PATH`` made for each test (an empty folder, or one holding a stand-in ``jpegtran``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from portal import jobs
from portal.hosts.models import ScoringHost
from portal.hosts.selectors import hosts_online
from portal.submissions.models import Run, Submission
from scoring import engine, hosts, runner
from tests.scoring.test_runner import FakeEngine, queued  # noqa: F401 (a fixture)

HOST = "alpha"
CLASS = "cpu-x86_64"


@pytest.fixture
def machine(settings, tmp_path, monkeypatch) -> Path:
    """A supervisor binary, a Docker Engine version, no nvidia-smi; jpegtran on PATH."""
    supervisor = tmp_path / "supervise"
    supervisor.write_bytes(b"\x7fELF trusted timer")
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
def no_jpegtran(machine, tmp_path, monkeypatch) -> None:
    """PATH is a folder with nothing in it: this machine has no jpegtran."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "refuses to register" in r.getMessage()]


def test_a_host_without_jpegtran_refuses_to_register_and_says_which(
    db, no_jpegtran, caplog, monkeypatch
):
    caplog.set_level(logging.INFO, logger="scoring.hosts")

    with pytest.raises(hosts.HostRefused, match="jpegtran"):
        hosts.register()

    [line] = refusals(caplog)
    assert f"scoring host {HOST} refuses to register for {CLASS}" in line
    assert "jpegtran" in line and "apt-get install libjpeg-turbo-progs" in line
    assert "supervisor" not in line  # only what is missing
    host = ScoringHost.objects.get(name=HOST)
    assert host.missing_tools == ["jpegtran"]
    assert not hosts.accepts_work(HOST)
    assert hosts_online(CLASS, timezone.now()) == 0  # not counted for its class's queue


def test_every_missing_tool_is_named_in_the_one_line(db, no_jpegtran, settings, tmp_path, caplog):
    settings.PODIUM_SUPERVISOR = tmp_path / "not-built" / "supervise"

    with pytest.raises(hosts.HostRefused):
        hosts.register()

    [line] = refusals(caplog)
    assert "jpegtran" in line and "supervisor" in line and "make supervisor" in line
    assert ScoringHost.objects.get(name=HOST).missing_tools == ["jpegtran", "supervisor"]


def test_once_the_tool_is_installed_the_host_registers_and_takes_work(
    db, machine, no_jpegtran, monkeypatch
):
    with pytest.raises(hosts.HostRefused):
        hosts.register()
    assert not hosts.accepts_work(HOST)

    monkeypatch.setenv("PATH", str(machine))  # jpegtran installed

    assert hosts.accepts_work(HOST)
    host = ScoringHost.objects.get(name=HOST)
    assert host.missing_tools == [] and host.status == ScoringHost.ACTIVE
    assert hosts_online(CLASS, timezone.now()) == 1


def test_a_host_that_loses_jpegtran_takes_no_more_runs(db, machine, tmp_path, monkeypatch):
    assert hosts.register().missing_tools == []
    assert hosts.accepts_work(HOST)

    (machine / "jpegtran").unlink()  # apt-get remove libjpeg-turbo-progs

    assert not hosts.accepts_work(HOST)
    assert ScoringHost.objects.get(name=HOST).missing_tools == ["jpegtran"]


def test_the_heartbeat_says_it_once_per_try_and_registers_once_the_tool_is_there(
    db, machine, no_jpegtran, monkeypatch, caplog
):
    registered: list[bool] = []
    heartbeat = hosts.HostHeartbeat(interval_s=1, on_registered=lambda: registered.append(True))

    heartbeat.beat()

    assert len(refusals(caplog)) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info]
    assert not heartbeat.registered and registered == []
    monkeypatch.setenv("PATH", str(machine))
    heartbeat.beat()
    assert heartbeat.registered and registered == [True]
    assert ScoringHost.objects.get(name=HOST).missing_tools == []


def test_the_api_shows_what_a_host_lacks(db, no_jpegtran, alice, client_for):
    with pytest.raises(hosts.HostRefused):
        hosts.register()

    [row] = client_for(alice).get("/api/v1/hosts/").json()

    assert row["name"] == HOST and row["missing_tools"] == ["jpegtran"]


def test_the_admin_shows_what_a_host_lacks(db, no_jpegtran, client, charlie, make_host):
    make_host("bravo")
    with pytest.raises(hosts.HostRefused):
        hosts.register()
    host = ScoringHost.objects.get(name=HOST)
    client.force_login(charlie)

    listing = client.get(reverse("admin:hosts_scoringhost_changelist")).content.decode()
    page = client.get(reverse("admin:hosts_scoringhost_change", args=[host.pk])).content.decode()

    assert "Missing tools" in listing and "jpegtran" in listing
    assert "Missing tools" in page and "jpegtran" in page


def test_a_host_without_jpegtran_claims_no_run_and_wakes_another(
    db,
    queued,  # noqa: F811 (the fixture)
    no_jpegtran,
    monkeypatch,
    sent,
    django_capture_on_commit_callbacks,
    machine,
    settings,
):
    fake = FakeEngine().install(monkeypatch)
    hardware_class = queued.benchmark.hardware_class
    settings.PODIUM_HARDWARE_CLASS = hardware_class

    with django_capture_on_commit_callbacks(execute=True):
        runner.score_next(hardware_class)

    queued.refresh_from_db()
    assert queued.status == Submission.QUEUED and not queued.runs.exists()
    assert fake.calls == []
    assert sent == [(jobs.SCORE_NEXT, (hardware_class, 0))]
    # The same host with jpegtran scores it.
    monkeypatch.setenv("PATH", str(machine))
    runner.score_next(hardware_class)
    run = Run.objects.get(submission=queued)
    assert run.status == Run.FINISHED and run.host == HOST
