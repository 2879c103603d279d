"""Calibration: this host runs a fixed workload, timed exactly as a scored run, so that the
hosts of a hardware class stay comparable (docs/architecture.md, "Past one machine").

The workload is ``scoring/calibrate/calibrate`` (a static C program built by ``make
calibrate``; ``PODIUM_CALIBRATION_WORKLOAD``): about a second of one dependency chain of
integer work on 4 KiB, no system call, with a checksum written as its output. Each
repetition is one scored-run sandbox (``runner.container_spec``: the same limits on
privileges, network, filesystem, PIDs and memory, ``PODIUM_CALIBRATION_IMAGE`` as the
image, the workload mounted read-only as ``/submission/run``) with the trusted supervisor
as PID 1, started and checked by the runner's own ``supervise`` and
``parse_supervisor_line``: the wall time is the supervisor's, from its fork until every
descendant is reaped, inside the host's own interval. ``PODIUM_CALIBRATION_REPETITIONS``
repetitions (7) make one calibration, about 10 seconds in all.

When (``portal.hosts.noise.calibration_due``): when a scoring worker starts
(:func:`start_at_registration`, after its host row exists) and, before a host claims a
run, when it never calibrated, its last calibration was not good, or
``PODIUM_CALIBRATE_EVERY_RUNS`` runs or ``PODIUM_CALIBRATE_EVERY_S`` seconds passed
(:func:`keep_calibrated`, called by ``scoring.worker.score_next``). Always under the machine
hold (``scoring.host.machine.hold``): the lock, every other container paused, the health
gates passed, so nothing else runs beside it.

What a result does is ``portal.hosts.calibrations.calibration_record``'s: the first good
calibration of a class sets its reference; a median more than
``PODIUM_CALIBRATION_DRIFT_PCT`` off it drains the host and flags its runs since its last
good calibration. A calibration that could not be measured (an engine or supervisor
fault, a wrong checksum, a lost lock) is recorded as not ``ok`` and drains nothing.

GPU classes: :func:`gpu_calibration` is the hook for a GPU-bound workload. None is
shipped yet (no GPU on the machines this was written on), so a GPU class is calibrated
on its CPU only, and the hook says so in the worker's log.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connections
from django.utils import timezone

from portal.contests import rules
from portal.contests.hardware import hardware_class
from portal.contests.models import Benchmark
from portal.hosts.calibrations import calibration_record
from portal.hosts.models import HostCalibration
from portal.hosts.selectors import calibration_due
from portal.hosts.services import host_accepts_work
from scoring import engine
from scoring.cohort import staging
from scoring.cohort.staging import StagedRun
from scoring.host import machine
from scoring.run import runner

log = logging.getLogger(__name__)

# The workload's checksum (calibrate.c): a run that did not do the work never passes.
CHECKSUM = 0xFEAD457D
CHECKSUM_BYTES = CHECKSUM.to_bytes(4, "little")
LABEL = "podium.calibration"  # on calibration containers: the host calibrated
# One repetition takes about a second; the supervisor stops it well before this.
REPETITION_TIMEOUT_S = 60
SANDBOX_MEMORY_BYTES = 256 << 20
SANDBOX_PIDS = 64
SANDBOX_TMPFS_BYTES = 16 << 20
SANDBOX_OUTPUT_BYTES = 1 << 20
SLOWED_CPU_SHARES = 2  # the engine's minimum (cgroup v2: cpu.weight 1)


class CalibrationError(Exception):
    """The workload could not be measured (the message goes on the calibration row)."""


@dataclass(frozen=True)
class Measurement:
    wall_ns: list[int] = field(default_factory=list)
    workload_sha256: str = ""


def sandbox_limits() -> Benchmark:
    """The limits of a calibration's sandbox, as a benchmark's (never saved). The workload
    needs little, so they are small; the sandbox itself is a scored run's."""
    return Benchmark(
        hardware_class_id=settings.PODIUM_HARDWARE_CLASS,
        score_timeout_s=REPETITION_TIMEOUT_S,
        run_memory_bytes=SANDBOX_MEMORY_BYTES,
        run_pids_limit=SANDBOX_PIDS,
        run_tmpfs_bytes=SANDBOX_TMPFS_BYTES,
        run_output_tmpfs_bytes=SANDBOX_OUTPUT_BYTES,
    )


@contextmanager
def staged_input() -> Iterator[StagedRun]:
    """An empty input folder (an empty manifest, no image) under the data folder, where the
    engine can bind-mount it as a scored run's; removed afterwards."""
    root = Path(settings.PODIUM_DATA_DIR) / "calibration" / secrets.token_hex(8)
    input_dir = root / staging.INPUT
    (input_dir / staging.IMAGES).mkdir(parents=True)
    manifest = input_dir / staging.MANIFEST
    manifest.write_bytes(b"")
    for path in (root, input_dir, input_dir / staging.IMAGES):
        path.chmod(0o755)
    manifest.chmod(0o644)
    try:
        yield StagedRun(
            run_id=0,
            root=root,
            input_dir=input_dir,
            manifest=manifest,
            rows=1,
            references=[],
            request_ids=[],
            staged_names=[],
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def container_spec(
    *, staged: StagedRun, host: str, workload: Path, supervisor: Path, cpus: float | None = None
) -> dict[str, Any]:
    """A scored run's container (``runner.container_spec``) running the workload as
    ``/submission/run``. Labelled as a calibration of ``host``, never as a run, so the
    reaper's run bookkeeping never mistakes it. ``cpus`` (``PODIUM_CALIBRATION_CPUS``,
    tests only) slows it on purpose: a CPU quota and the lowest CPU weight."""
    spec = runner.container_spec(
        image=str(settings.PODIUM_CALIBRATION_IMAGE),
        staged=staged,
        benchmark=sandbox_limits(),
        supervisor=supervisor,
        expect_bytes=len(CHECKSUM_BYTES),
    )
    spec["labels"] = {LABEL: host, machine.HOST_LABEL: host}
    spec["mounts"] = [
        *spec["mounts"],
        {"Type": "bind", "Source": str(workload), "Target": rules.RUN_ENTRYPOINT, "ReadOnly": True},
    ]
    if cpus is not None:
        # Slowed on purpose (tests): a quota, and the lowest weight so that on a busy
        # machine it also yields to everything else instead of merely sharing.
        spec["nano_cpus"] = int(cpus * 1e9)
        spec["cpu_shares"] = SLOWED_CPU_SHARES
    return spec


def repetition(
    spec: dict[str, Any], *, supervisor_sha256: str, spare: Callable[[str], None]
) -> int:
    """One run of the workload in its sandbox: the supervisor's trusted wall time (ns).

    Raises :class:`CalibrationError` (or ``engine.EngineError``, ``runner.SupervisorError``)
    when it cannot be trusted: no clean supervisor exit, a host interval that does not
    contain the trusted one, a workload that failed or wrote the wrong checksum.
    """
    limits = sandbox_limits()
    container_id = engine.create_container(**spec)
    try:
        spare(container_id)  # before it starts: the freezer pauses any other container
        container = runner.Container(id=container_id, supervisor_sha256=supervisor_sha256)
        supervised = runner.supervise(container, limits, runner.Measured())
        if supervised.status_code is None:
            raise CalibrationError(f"a repetition ran past {limits.score_timeout_s} s")
        if supervised.status_code != 0:
            raise CalibrationError(f"the supervisor exited with status {supervised.status_code}")
        result = runner.parse_supervisor_line(engine.logs(container_id, stdout=True, stderr=False))
        if not (
            supervised.host_start_ns <= result.start_ns <= result.end_ns <= supervised.host_end_ns
        ):
            raise CalibrationError("the host clock did not contain the trusted interval")
        if result.killed or result.exit_code != 0:
            raise CalibrationError(
                f"the workload ended with exit code {result.exit_code}, signal {result.signal}"
            )
        if result.output != CHECKSUM_BYTES:
            raise CalibrationError("the workload's checksum is wrong")
        return result.wall_ns
    finally:
        try:
            engine.remove_container(container_id)
        except engine.EngineError:
            log.exception("could not remove calibration container %s", container_id[:12])


def measure(session: machine.Session, repetitions: int) -> Measurement:
    """``repetitions`` runs of the workload on the held machine (then the GPU hook)."""
    workload = Path(settings.PODIUM_CALIBRATION_WORKLOAD)
    supervisor = Path(settings.PODIUM_SUPERVISOR)
    try:
        workload_sha256 = hashlib.sha256(workload.read_bytes()).hexdigest()
        supervisor_sha256 = hashlib.sha256(supervisor.read_bytes()).hexdigest()
    except OSError as exc:
        raise CalibrationError(f"cannot read the workload or the supervisor: {exc}") from exc
    cpus = getattr(settings, "PODIUM_CALIBRATION_CPUS", None)
    walls: list[int] = []
    with staged_input() as staged:
        spec = container_spec(
            staged=staged, host=session.host, workload=workload, supervisor=supervisor, cpus=cpus
        )
        for _ in range(max(1, repetitions)):
            walls.append(repetition(spec, supervisor_sha256=supervisor_sha256, spare=session.spare))
            if session.heartbeat.lost.is_set():
                raise CalibrationError("the machine lock was lost during the calibration")
    row = hardware_class(str(settings.PODIUM_HARDWARE_CLASS))
    if row is not None and row.gpus > 0:
        gpu_calibration(session, gpus=row.gpus)
    return Measurement(wall_ns=walls, workload_sha256=workload_sha256)


def gpu_calibration(session: machine.Session, *, gpus: int) -> None:
    """The hook for a GPU-bound calibration workload, on classes whose hosts have GPUs
    (``HardwareClass.gpus`` > 0); skipped on CPU classes.

    Not implemented: no GPU workload ships with Podium yet, as none could be run where
    this was written. One belongs here, run like the CPU workload (a scored container with
    the class's GPUs, ``runner.container_spec(gpu_devices=...)``) and recorded beside it.
    Until then a GPU class is calibrated on its CPU alone.
    """
    log.warning(
        "host %s: no GPU calibration workload yet; its %d GPU(s) are not calibrated",
        session.host,
        gpus,
    )


def calibrate(session: machine.Session, *, trigger: str) -> HostCalibration:
    """Calibrate the held machine now and record it (see the module doc). Never raises for
    a measurement that failed: that is a calibration that is not ``ok``."""
    started_at = timezone.now()
    error = ""
    measurement = Measurement()
    try:
        measurement = measure(session, int(settings.PODIUM_CALIBRATION_REPETITIONS))
    except (CalibrationError, runner.SupervisorError, engine.EngineError) as exc:
        log.error("host %s: calibration failed: %s", session.host, exc)
        error = f"not measured: {exc}"[:500]
    calibration = calibration_record(
        host_name=session.host,
        trigger=trigger,
        started_at=started_at,
        finished_at=timezone.now(),
        wall_ns=measurement.wall_ns,
        workload_sha256=measurement.workload_sha256,
        error=error,
    )
    log.info(
        "host %s calibrated (%s): median %s ns, noise %s %%, drift %s %%, ok %s",
        session.host,
        trigger,
        calibration.median_ns,
        calibration.noise_pct,
        calibration.drift_pct,
        calibration.ok,
    )
    return calibration


def keep_calibrated(session: machine.Session) -> bool:
    """Before a claim, holding the machine: calibrate when due; whether this host still
    takes work afterwards (a drift drains it). Off with ``PODIUM_CALIBRATION``."""
    if not settings.PODIUM_CALIBRATION:
        return True
    trigger = calibration_due(session.host, timezone.now())
    if trigger:
        calibrate(session, trigger=trigger)
        return host_accepts_work(session.host)
    return True


def calibrate_when_due() -> HostCalibration | None:
    """Hold the machine and calibrate when due (a worker's start); the calibration, or None
    when none was due or the machine was not ready (the next claim tries again)."""
    if not settings.PODIUM_CALIBRATION:
        return None
    host = machine.scoring_host()
    if not calibration_due(host, timezone.now()):
        return None

    def postponed(reason: str) -> None:
        log.info("host %s: calibration postponed: %s", host, reason)

    try:
        with machine.hold(reschedule=postponed) as session:
            trigger = calibration_due(host, timezone.now())  # another worker may have
            return calibrate(session, trigger=trigger) if trigger else None
    except machine.MachineWaiting:
        return None


def _calibrate_in_thread() -> None:
    try:
        calibrate_when_due()
    except Exception:
        log.exception("scoring host: calibration at start failed")
    finally:
        connections.close_all()


def start_at_registration() -> threading.Thread | None:
    """Called once a worker's host is registered: calibrate in a thread of its own (it may
    wait for the machine lock; the heartbeat must not). None when calibration is off."""
    if not settings.PODIUM_CALIBRATION:
        return None
    thread = threading.Thread(target=_calibrate_in_thread, daemon=True, name="calibration")
    thread.start()
    return thread
