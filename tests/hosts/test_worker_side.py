"""``scoring.host.hosts``: this machine's facts, which workers register, and the heartbeat.

No Docker here: the engine's version is a stand-in, and the heartbeat's functions are
called directly (no worker is started).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import DatabaseError
from django.utils import timezone

from portal.hosts.models import ScoringHost
from scoring import engine, worker
from scoring.host import heartbeat as heartbeat_module
from scoring.host import hosts

NVIDIA_SMI_L = """\
GPU 0: NVIDIA H200 (UUID: GPU-5d0e2b3c-0000-1111-2222-333344445555)
GPU 1: NVIDIA H200 (UUID: GPU-6e1f3c4d-0000-1111-2222-333344445555)
  MIG 1g.18gb     Device  0: (UUID: MIG-0c2b7a1e-0000-1111-2222-333344445555)
"""


@pytest.fixture
def machine(settings, tmp_path, monkeypatch) -> Path:
    """A supervisor binary, a Docker Engine version, and no nvidia-smi."""
    supervisor = tmp_path / "supervise"
    supervisor.write_bytes(b"\x7fELF trusted timer")
    settings.PODIUM_SUPERVISOR = supervisor
    settings.PODIUM_GPU_QUERY_COMMAND = str(tmp_path / "no-such-nvidia-smi")
    settings.PODIUM_HOST_NAME = "alpha"
    settings.PODIUM_HARDWARE_CLASS = "cpu-x86_64"
    monkeypatch.setattr(engine, "version", lambda: "27.3.1")
    return supervisor


def _script(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


# Facts --------------------------------------------------------------------------------


def test_machine_facts_describe_this_machine(machine):
    facts = hosts.machine_facts()

    assert set(facts) == {
        "architecture",
        "cpu_model",
        "cpu_cores",
        "memory_bytes",
        "gpus",
        "docker_version",
        "kernel_version",
        "supervisor_sha256",
        "cpu_isolation",
    }
    assert facts["architecture"] and isinstance(facts["architecture"], str)
    assert isinstance(facts["cpu_model"], str)
    assert isinstance(facts["cpu_cores"], int) and facts["cpu_cores"] >= 1
    assert isinstance(facts["memory_bytes"], int)
    if Path("/proc/meminfo").exists():
        assert facts["memory_bytes"] > 64 << 20
    assert facts["gpus"] == []  # no nvidia-smi: no GPU, no failure
    assert facts["docker_version"] == "27.3.1"
    assert facts["kernel_version"]
    assert facts["supervisor_sha256"] == hashlib.sha256(machine.read_bytes()).hexdigest()


def test_facts_that_cannot_be_read_are_empty(machine, monkeypatch, caplog):
    machine.unlink()

    def unreachable() -> str:
        raise engine.EngineError("Cannot connect to the Docker daemon")

    monkeypatch.setattr(engine, "version", unreachable)

    with caplog.at_level(logging.WARNING):
        facts = hosts.machine_facts()

    assert facts["docker_version"] == ""
    assert facts["supervisor_sha256"] == ""
    assert "Cannot connect to the Docker daemon" in caplog.text


def test_gpus_come_from_nvidia_smi(machine, settings, tmp_path):
    settings.PODIUM_GPU_QUERY_COMMAND = _script(tmp_path, f"cat <<'EOF'\n{NVIDIA_SMI_L}EOF")

    assert hosts.machine_facts()["gpus"] == [
        {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-5d0e2b3c-0000-1111-2222-333344445555"},
        {"index": 1, "name": "NVIDIA H200", "uuid": "GPU-6e1f3c4d-0000-1111-2222-333344445555"},
    ]


@pytest.mark.parametrize(
    "body",
    [
        "echo 'NVIDIA-SMI has failed because it could not communicate with the driver'; exit 9",
        "sleep 30",
        "printf '\\377\\376 not text'",
    ],
    ids=["fails", "hangs", "garbage"],
)
def test_a_broken_nvidia_smi_means_no_gpu(machine, settings, tmp_path, monkeypatch, body):
    settings.PODIUM_GPU_QUERY_COMMAND = _script(tmp_path, body)
    monkeypatch.setattr(hosts, "GPU_LIST_TIMEOUT_S", 0.5)

    assert hosts.gpus() == []


def test_cpu_model_and_memory_parsing():
    x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9654\n"
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd4f\n\nHardware\t: Neoverse-V2\n"

    assert hosts.cpu_model(x86) == "AMD EPYC 9654"
    assert hosts.cpu_model(arm) == "Neoverse-V2"
    assert hosts.cpu_model("processor\t: 0\n") == ""
    assert hosts.mem_total_bytes("MemTotal:       65536 kB\nMemFree: 1 kB\n") == 65536 * 1024
    assert hosts.mem_total_bytes("") == 0


def test_parse_gpu_list_skips_mig_devices():
    assert [gpu["index"] for gpu in hosts.parse_gpu_list(NVIDIA_SMI_L)] == [0, 1]
    assert hosts.parse_gpu_list("No devices were found\n") == []


# Which workers register ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("queues", "scores"),
    [
        (["scoring"], True),
        (["scoring.gpu-h200"], True),
        (["builds", "scoring.cpu-x86_64"], True),
        (["builds"], False),
        (["celery"], False),
        (["scoring."], False),
        (["scoringx", "prescoring"], False),
        ([], False),
    ],
)
def test_consumes_scoring(queues, scores):
    assert worker.consumes_scoring(queues) is scores


def _sender(*queues: str) -> Any:
    """What ``worker_ready`` sends: the worker's consumer, whose app knows the queues."""
    consume_from = {name: object() for name in queues}
    return SimpleNamespace(
        app=SimpleNamespace(amqp=SimpleNamespace(queues=SimpleNamespace(consume_from=consume_from)))
    )


@pytest.fixture
def started(monkeypatch) -> list[str]:
    """Heartbeat threads ``on_worker_ready`` started (stand-ins: nothing runs)."""
    names: list[str] = []

    class FakeHeartbeat:
        def start(self) -> None:
            names.append("started")

        def is_alive(self) -> bool:
            return True

        def wait_started(self, timeout_s: float) -> bool:
            return True

    monkeypatch.setattr(worker, "HostHeartbeat", FakeHeartbeat)
    monkeypatch.setattr(worker, "_heartbeat", None)
    return names


def test_a_scoring_worker_starts_one_heartbeat(started):
    worker.on_worker_ready(sender=_sender("scoring"))
    worker.on_worker_ready(sender=_sender("scoring"))

    assert started == ["started"]


class StartingHost:
    """A host's start whose calibration finishes when the test says so."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calibrated = threading.Event()
        self.thread: threading.Thread | None = None
        monkeypatch.setattr(worker, "_heartbeat", None)
        monkeypatch.setattr(hosts.HostHeartbeat, "run", self.run)
        monkeypatch.setattr(worker, "on_host_registered", self.on_registered)

    @staticmethod
    def run(heartbeat: hosts.HostHeartbeat) -> None:
        """The first beat's part that matters here: registered, then its follow-up."""
        assert heartbeat.on_registered is not None
        heartbeat.after_registration = heartbeat.on_registered()
        heartbeat.started.set()

    def on_registered(self) -> threading.Thread:
        self.thread = threading.Thread(target=self.calibrated.wait, daemon=True)
        self.thread.start()
        return self.thread


def test_a_scoring_worker_is_ready_only_once_its_first_calibration_is_done(monkeypatch, settings):
    """worker_ready comes before the worker's event loop fetches any message: while the
    handler waits, no wake-up is taken by a host that is still calibrating."""
    settings.PODIUM_HOST_READY_WAIT_S = 30
    host = StartingHost(monkeypatch)
    returned = threading.Event()

    def start_worker() -> None:
        worker.on_worker_ready(sender=_sender("scoring"))
        returned.set()

    handler = threading.Thread(target=start_worker)
    handler.start()

    assert not returned.wait(0.5)  # still calibrating: the worker is not ready
    host.calibrated.set()
    assert returned.wait(5)  # done: ready at once
    handler.join()


def test_a_start_that_takes_too_long_is_said_and_the_worker_goes_on(monkeypatch, settings, caplog):
    settings.PODIUM_HOST_READY_WAIT_S = 0.3
    host = StartingHost(monkeypatch)

    worker.on_worker_ready(sender=_sender("scoring"))

    assert "not registered and calibrated after 0.3 s" in caplog.text
    host.calibrated.set()


def test_a_scoring_worker_gives_its_heartbeat_its_start_and_its_collection(monkeypatch):
    """The host room's heartbeat knows nothing of the rooms above it: the worker gives it
    what follows the first registration and what runs before each disk report."""
    made: list[Any] = []

    class FakeHeartbeat:
        on_registered: Any = None
        collect: Any = None

        def __init__(self) -> None:
            made.append(self)

        def start(self) -> None:
            pass

        def is_alive(self) -> bool:
            return True

        def wait_started(self, timeout_s: float) -> bool:
            return True

    monkeypatch.setattr(worker, "HostHeartbeat", FakeHeartbeat)
    monkeypatch.setattr(worker, "_heartbeat", None)

    worker.on_worker_ready(sender=_sender("scoring"))

    [heartbeat] = made
    assert heartbeat.on_registered is worker.on_host_registered
    assert heartbeat.collect is worker.reaper.collect_leftovers


def test_a_build_worker_does_not_register(started):
    worker.on_worker_ready(sender=_sender("builds"))

    assert started == []


def test_the_handler_is_connected_when_a_worker_loads_its_tasks():
    from celery.signals import worker_ready

    from scoring import tasks

    assert tasks.on_worker_ready is worker.on_worker_ready
    assert worker.on_worker_ready in worker_ready._live_receivers(object())


# Registration and heartbeat -----------------------------------------------------------


@pytest.mark.django_db
def test_register_and_a_heartbeat_write_the_row(machine):
    beat = hosts.HostHeartbeat(interval_s=30)

    beat.beat()  # the first beat registers
    host = ScoringHost.objects.get(name="alpha")
    assert (host.hardware_class_id, host.status, host.docker_version) == (
        "cpu-x86_64",
        "active",
        "27.3.1",
    )
    assert host.supervisor_sha256 == hashlib.sha256(machine.read_bytes()).hexdigest()
    long_ago = timezone.now() - dt.timedelta(hours=1)
    ScoringHost.objects.filter(pk=host.pk).update(last_heartbeat_at=long_ago)

    beat.beat()

    host.refresh_from_db()
    assert host.last_heartbeat_at > long_ago
    assert host.registered_at < host.last_heartbeat_at
    assert ScoringHost.objects.count() == 1


@pytest.mark.django_db
def test_every_disk_report_the_heartbeat_first_collects_what_dead_workers_left(
    machine, monkeypatch
):
    collected: list[bool] = []
    reported: list[str] = []

    def record_disk(name: str) -> dict[str, object]:
        reported.append(name)
        return {}

    monkeypatch.setattr(hosts, "record_disk", record_disk)
    # What a scoring worker gives it: reaper.collect_leftovers (see the test below).
    beat = hosts.HostHeartbeat(interval_s=30, collect=lambda: collected.append(True))
    beat.beat()  # registers and reports (on_worker_ready collects at the start)
    assert (collected, reported) == ([], ["alpha"])

    beat.beat()  # a plain heartbeat: nothing due
    assert (collected, reported) == ([], ["alpha"])

    beat._disk_at -= hosts.DISK_REPORT_S  # ten minutes on
    beat.beat()

    assert (collected, reported) == ([True], ["alpha", "alpha"])


@pytest.mark.django_db
def test_a_host_whose_row_is_gone_registers_again(machine):
    beat = hosts.HostHeartbeat(interval_s=30)
    beat.beat()
    ScoringHost.objects.all().delete()

    beat.beat()

    assert ScoringHost.objects.get(name="alpha").status == ScoringHost.ACTIVE


@pytest.mark.django_db
def test_register_keeps_a_retired_host_retired(machine):
    hosts.register()
    ScoringHost.objects.filter(name="alpha").update(status=ScoringHost.RETIRED)

    assert hosts.register().status == ScoringHost.RETIRED


def test_a_failing_beat_is_logged_and_the_next_one_tries_again(machine, monkeypatch, caplog):
    calls: list[str] = []

    def register() -> None:
        calls.append("register")
        if len(calls) == 1:
            raise DatabaseError("connection refused")

    def host_heartbeat(name: str) -> bool:
        calls.append(name)
        return True

    monkeypatch.setattr(hosts, "register", register)
    monkeypatch.setattr(hosts, "host_heartbeat", host_heartbeat)
    beat = hosts.HostHeartbeat(interval_s=30)

    with caplog.at_level(logging.ERROR):
        beat.beat()  # the database is down: logged, not raised
        beat.beat()  # registers now
        beat.beat()  # a heartbeat

    assert calls == ["register", "register", "alpha"]
    assert "heartbeat failed" in caplog.text
    assert "connection refused" in caplog.text


def test_the_thread_beats_until_stopped(machine, monkeypatch):
    beats: list[float] = []
    enough = threading.Event()

    def beat(self: hosts.HostHeartbeat) -> None:
        beats.append(1.0)
        if len(beats) >= 3:
            enough.set()

    monkeypatch.setattr(hosts.HostHeartbeat, "beat", beat)
    monkeypatch.setattr(heartbeat_module, "connections", SimpleNamespace(close_all=lambda: None))
    monkeypatch.setattr(heartbeat_module, "close_old_connections", lambda: None)
    thread = hosts.HostHeartbeat(interval_s=0.01)

    thread.start()
    assert enough.wait(5)
    thread.stop()

    assert thread.daemon
    assert not thread.is_alive()
    count = len(beats)
    enough.wait(0.05)
    assert len(beats) == count


def test_settings_default_to_this_machine():
    from django.conf import settings

    assert re.fullmatch(r"cpu-\S+", settings.PODIUM_HARDWARE_CLASS)
    assert settings.PODIUM_HOST_NAME
    assert settings.PODIUM_HOST_HEARTBEAT_S == 30
    assert settings.PODIUM_HOST_STALE_S == 90
