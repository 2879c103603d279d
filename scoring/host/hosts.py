"""This machine as a scoring host: its facts, its registration and its heartbeat.

A Celery worker that consumes a scoring queue (``scoring``, or a class queue
``scoring.<class>``) registers its host when it is ready (``scoring.worker.on_worker_ready``,
connected in ``scoring/tasks.py``) and heartbeats from a daemon thread of the worker's
main process every ``PODIUM_HOST_HEARTBEAT_S`` (:class:`HostHeartbeat`). Registration and
heartbeats happen in that thread, never in the signal handler, so a slow engine, a
missing ``nvidia-smi`` or a database outage never holds up or crashes the worker:
failures are logged and tried again at the next beat.

Before a host takes a run or a round it asks :func:`accepts_work`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from portal.contests.hardware import class_platform, hardware_class
from portal.core import cpus
from portal.hosts.models import ScoringHost
from portal.hosts.services import host_accepts_work, host_heartbeat, host_register
from scoring import engine
from scoring.host import gpus as gpu_devices
from scoring.host.heartbeat import Heartbeat
from scoring.host.machine import scoring_host
from scoring.images.platforms import platform_problem

log = logging.getLogger(__name__)

GPU_LIST_TIMEOUT_S = 10
# nvidia-smi -L: "GPU 0: NVIDIA H200 (UUID: GPU-5d0e...)"; its MIG device lines are skipped.
GPU_LINE = re.compile(r"GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)")
# How often the heartbeat collects what dead workers left on this host's engine (its
# ``collect``: ``scoring.upkeep.reaper.collect_leftovers``) and records the engine's disk
# use (``docker system df``) on the row. The minute reaper runs on the builds side and
# so collects on its own engine; a scoring host with an engine of its own is kept clean
# by this.
DISK_REPORT_S = 600.0


# Facts --------------------------------------------------------------------------------


def cpu_model(cpuinfo: str) -> str:
    """The CPU's model from a ``/proc/cpuinfo`` text (x86 ``model name``; Arm kernels
    say ``Model`` or ``Hardware``, or nothing: then "")."""
    found: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            found.setdefault(key.strip().lower(), value.strip())
    for key in ("model name", "model", "hardware", "cpu model"):
        if key in found:
            return found[key]
    return ""


def mem_total_bytes(meminfo: str) -> int:
    """``MemTotal`` of a ``/proc/meminfo`` text, in bytes (0 when absent)."""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                return int(fields[1]) * 1024
    return 0


def parse_gpu_list(text: str) -> list[dict[str, Any]]:
    """The GPUs of an ``nvidia-smi -L`` listing: ``[{"index", "name", "uuid"}]``."""
    return [
        {"index": int(match["index"]), "name": match["name"], "uuid": match["uuid"]}
        for line in text.splitlines()
        if (match := GPU_LINE.fullmatch(line.strip()))
    ]


def gpus() -> list[dict[str, Any]]:
    """This machine's GPUs (``PODIUM_GPU_QUERY_COMMAND -L``); ``[]`` when there is no such
    command, it fails or it hangs. Never raises."""
    command = [*str(settings.PODIUM_GPU_QUERY_COMMAND).split(), "-L"]
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=GPU_LIST_TIMEOUT_S, check=True
        )
    except (OSError, subprocess.SubprocessError, ValueError):  # ValueError: not UTF-8
        return []
    return parse_gpu_list(completed.stdout)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _docker_version() -> str:
    try:
        return engine.version()
    except engine.EngineError as exc:
        log.warning("the Docker Engine's version could not be read: %s", exc)
        return ""


def _supervisor_sha256() -> str:
    try:
        with Path(settings.PODIUM_SUPERVISOR).open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError as exc:
        log.warning("the supervisor could not be read: %s", exc)
        return ""


def _cpu_isolation() -> dict[str, Any]:
    try:
        return cpus.configured().as_fact()
    except cpus.CpuListError as exc:
        log.warning("the scoring CPUs could not be decided: %s", exc)
        return cpus.CpuIsolation(frozenset(), frozenset(), str(exc)).as_fact()


def machine_facts() -> dict[str, Any]:
    """What this machine is, for its ``ScoringHost`` row. Never raises: a fact that cannot
    be read is empty (``""``, 0 or ``[]``) and the reason is logged."""
    return {
        "architecture": platform.machine(),
        "cpu_model": cpu_model(_read("/proc/cpuinfo")),
        "cpu_cores": os.cpu_count() or 0,
        "memory_bytes": mem_total_bytes(_read("/proc/meminfo")),
        "gpus": gpus(),
        "docker_version": _docker_version(),
        "kernel_version": platform.release(),
        "supervisor_sha256": _supervisor_sha256(),
        "cpu_isolation": _cpu_isolation(),
    }


# Host tools ---------------------------------------------------------------------------


def missing_tools() -> dict[str, str]:
    """The host tools a scored run or its verification needs that this machine lacks:
    each one's name, with what it is for and how to install it ({} when none). Looked up
    as the run looks it up: the supervisor at ``PODIUM_SUPERVISOR`` (every run's trusted
    timer, ``scoring.run.runner.create``). Not ``jpegtran``: verification sets are re-encoded
    on the builds side (``scoring.cohort.verifysets``, checked by :func:`on_builds_worker_ready`)
    and a scoring host only copies one, so refusing a host without it would take an
    honest host out of its class."""
    missing: dict[str, str] = {}
    supervisor = Path(settings.PODIUM_SUPERVISOR)
    if not supervisor.is_file():
        missing["supervisor"] = f"every run's timer, {supervisor}: make supervisor"
    return missing


def tools_problem(missing: dict[str, str]) -> str:
    """One line naming every missing tool (``missing_tools()``); "" when none."""
    if not missing:
        return ""
    listed = "; ".join(f"{name} ({why})" for name, why in sorted(missing.items()))
    return f"missing host tools: {listed}"


# Registration and heartbeat -----------------------------------------------------------


class HostRefused(Exception):
    """This host cannot serve its hardware class, or lacks a host tool its runs need (the
    message says why, in one line)."""


def class_problem() -> str:
    """Why this host cannot serve its hardware class ("" when it can): another
    architecture than the class's platform (``scoring.images.platforms.platform_problem``), or
    GPUs it cannot give a scored container (``scoring.host.gpus.registration_problem``)."""
    problem = platform_problem(class_platform(settings.PODIUM_HARDWARE_CLASS))
    if problem:
        return problem
    row = hardware_class(settings.PODIUM_HARDWARE_CLASS)
    if row is None or not row.gpus:
        return ""
    try:
        runtimes = engine.info().get("Runtimes") or {}
    except engine.EngineError:
        return "the Docker Engine did not answer"
    return gpu_devices.registration_problem(
        gpus_in_class=row.gpus,
        devices=list(settings.PODIUM_GPU_DEVICES),
        runtimes=runtimes,
        cdi=bool(settings.PODIUM_GPU_CDI),
        listed=gpus(),
    )


def register() -> ScoringHost:
    """Register (or refresh) this host (``machine.scoring_host()``: ``PODIUM_HOST_NAME``,
    else its engine's name) as of ``PODIUM_HARDWARE_CLASS`` with its current facts. A
    draining or retired host keeps its status.

    A host that cannot serve its class (another architecture, or a GPU class whose GPUs
    it cannot give a scored container) refuses: it raises :class:`HostRefused` and logs
    why in one line, and never takes a run it would fail. So does a host that lacks a
    host tool (:func:`missing_tools`), after recording which on its row (the admin and
    ``GET /api/v1/hosts/`` show them; it takes no work until a registration finds them).
    """
    problem = class_problem()
    if problem:
        _log_refusal(problem)
        raise HostRefused(problem)
    missing = missing_tools()
    host = host_register(
        name=scoring_host(),
        hardware_class=settings.PODIUM_HARDWARE_CLASS,
        facts=machine_facts(),
        missing_tools=list(missing),
    )
    if missing:
        problem = tools_problem(missing)
        _log_refusal(problem)
        raise HostRefused(problem)
    log.info("scoring host %s registered (%s, %s)", host.name, host.hardware_class_id, host.status)
    return host


def _log_refusal(problem: str) -> None:
    log.error(
        "scoring host %s refuses to register for %s: %s",
        scoring_host(),
        settings.PODIUM_HARDWARE_CLASS,
        problem,
    )


def record_disk(name: str) -> dict[str, Any]:
    """Record this engine's disk use (``engine.disk_usage``, with the time as ``at``) on
    host ``name``'s row, for the hosts admin; what was recorded ({} when the engine did not
    answer: the last report stays). Never raises on an engine error."""
    try:
        report: dict[str, Any] = {"at": timezone.now().isoformat(), **engine.disk_usage()}
    except engine.EngineError as exc:
        log.warning("the Docker Engine's disk use could not be read: %s", exc)
        return {}
    ScoringHost.objects.filter(name=name).update(disk=report)
    return report


class HostHeartbeat(Heartbeat):
    """Registers this host, then records a heartbeat every ``interval_s`` until
    :meth:`stop` (``scoring.host.heartbeat``: it beats once at its start, and reopens a
    connection the database dropped before each beat). A beat that fails (database down,
    say) is logged and the next one tries again, registering first if the host was never
    registered or its row is gone. Uses its own database connection, closed when it ends.

    ``on_registered`` is called once, after the first registration; ``collect`` before
    each disk report but the first, every ``DISK_REPORT_S`` (the worker gives them, as
    they belong to floors above this one: ``scoring.worker``).
    """

    def __init__(
        self,
        interval_s: float | None = None,
        on_registered: Callable[[], threading.Thread | None] | None = None,
        collect: Callable[[], object] | None = None,
    ) -> None:
        super().__init__(
            name="scoring-host-heartbeat",
            interval_s=float(
                settings.PODIUM_HOST_HEARTBEAT_S if interval_s is None else interval_s
            ),
            failure="scoring host: heartbeat failed",
            at_start=True,
            reconnect=True,
        )
        # Called once, after the first registration: the host's calibration at start.
        self.on_registered = on_registered
        # Called before each later disk report: what dead workers left is collected.
        self.collect = collect
        self.join_s = self.interval_s + 30
        self.registered = False
        # Set once the first registration and ``on_registered`` are done; what that
        # returned (the start's calibration thread) is kept in ``after_registration``.
        self.started = threading.Event()
        self.after_registration: threading.Thread | None = None
        self._disk_at = -DISK_REPORT_S  # time.monotonic() of the last disk report

    def beat(self) -> None:
        """One beat: register when needed, else record the heartbeat. Never raises."""
        try:
            if not self.registered or not host_heartbeat(scoring_host()):
                register()
                first, self.registered = not self.registered, True
                if first:
                    try:
                        if self.on_registered is not None:
                            self.after_registration = self.on_registered()
                    finally:
                        self.started.set()
                self._report_disk()  # after what the start collected
            elif self._disk_due():
                if self.collect is not None:
                    self.collect()  # never raises
                self._report_disk()
        except HostRefused:
            pass  # register() said why, in one line; the next beat tries again
        except Exception:
            # Whatever failed, the thread must live on: a silent host is taken offline.
            log.exception("scoring host: heartbeat failed")

    def _disk_due(self) -> bool:
        return time.monotonic() - self._disk_at >= DISK_REPORT_S

    def _report_disk(self) -> None:
        """Record the engine's disk use (at registration and every ``DISK_REPORT_S``)."""
        record_disk(scoring_host())
        self._disk_at = time.monotonic()

    def wait_started(self, timeout_s: float) -> bool:
        """Wait until the host registered and what follows its registration finished
        (its calibration at start, when ``on_registered`` returned that thread), for at
        most ``timeout_s``; whether it did."""
        deadline = time.monotonic() + timeout_s
        if not self.started.wait(timeout_s):
            return False
        follow_up = self.after_registration
        if follow_up is None:
            return True
        follow_up.join(max(0.0, deadline - time.monotonic()))
        return not follow_up.is_alive()


def accepts_work(name: str) -> bool:
    """Whether this host (``name``) takes a new run: registered (now, when its first beat
    has not landed yet), neither draining nor retired, (on a GPU class) still able to
    give the run its GPUs, and with every host tool its runs need. A host whose row lacks
    a tool, or that lacks one now, registers again: that records what it lacks now and
    refuses while anything is missing."""
    try:
        recorded = ScoringHost.objects.filter(name=name).values_list("missing_tools", flat=True)
        row = recorded.first()
        if row is None:
            register()
        elif problem := class_problem():
            log.error("scoring host %s takes no run: %s", name, problem)
            return False
        elif row or missing_tools():
            register()
    except HostRefused:
        return False
    return host_accepts_work(name)
