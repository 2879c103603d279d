"""Holding a scoring host (docs/architecture.md, "The scored run", steps 1 and 2): its
machine lock (the lease rows of ``portal.hosts.leases``), its build freezer
(``scoring.host.freezer``) and its health gates (``scoring.host.health`` measures,
``scoring.host.gates`` decides).

One score at a time per scoring host (per Docker Engine), across any number of scoring
worker processes:

- **The lock** is a lease row (``MachineLease``, one per Docker Engine: keyed by the
  engine's own ID, see :func:`machine_key`, never by a host's name) taken with a conditional
  UPDATE (free, or its holder's lease expired), kept alive by a heartbeat thread every
  ``PODIUM_LEASE_S / 3`` seconds, and released (conditionally on the holder) on exit.
  The heartbeat renews the scored run's own lease too, so a worker that dies is found
  by the reaper within ``PODIUM_LEASE_S`` plus its one-minute period. A holder whose
  heartbeat finds the lock gone (it could not renew in time and it was taken over)
  kills its run's container: the run ends as a platform failure, never a verdict
  timed beside another score.
- **Everything else on the host is frozen** while the lock is held: every running
  container is paused with ``docker pause`` except the scored container itself (spared
  by id: the runner calls :meth:`Session.spare` after creating it, before starting it)
  and the deployment's own service containers, named in ``PODIUM_FREEZE_EXEMPT``
  (PostgreSQL, Redis, the web and the workers). What a container *is* decides, never
  its labels: an entrant sets any label in their own Dockerfile, but chooses neither a
  container's id nor its name (the builder's step containers and Podium's build.sh
  containers are created without a name: the engine picks a random ``adjective_name``).
  An engine event stream pauses any container that starts or is unpaused during the
  score. At release every paused container on the host is unpaused, except the exempt
  ones: on a scoring host nothing but this module pauses containers, so whatever is
  paused there was paused by a score (possibly one whose worker died). What a score
  freezes is an engine, so the lock is the engine's: two ``PODIUM_HOST_NAME`` names
  registered on one engine take turns on its one lock instead of freezing (and the
  reaper of one thawing) the other's score. Build workers start no new step while the
  lock of their engine is held, and count their cap only over time it was not
  (:func:`builds_frozen`, :func:`wait_while_frozen`).
- **Health gates** (``scoring.host.gates`` decides; this module measures): pinned engine,
  kernel, supervisor and GPU driver, memory and disk reserves, CPU idleness after the
  freeze, GPU idle and temperature where configured. A failing gate (or an engine that
  does not answer) releases the lock and reschedules the score with backoff (5 minutes
  doubling to an hour); the submission stays ``queued`` with a timeline note.

Only the scoring worker calls :func:`hold` (through ``scoring.run.runner.machine``) and
:meth:`Session.spare` (for its scored container, before starting it); build workers
call :func:`builds_frozen` and :func:`wait_while_frozen`; the reaper calls :func:`reap`
and :func:`frozen_seconds`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Q
from django.utils import timezone

from portal.hosts.leases import (
    machine_held,
    machine_lease_acquire,
    machine_lease_free_expired,
    machine_lease_holder,
    machine_lease_release,
    machine_lease_renew,
)
from portal.submissions.models import Run
from portal.submissions.runs import run_record_infra_failure, submission_wait_for_machine
from scoring import engine
from scoring.host import gates
from scoring.host.freezer import BuildFreezer, thaw
from scoring.host.gates import Reading
from scoring.host.health import limits, measure
from scoring.host.heartbeat import Heartbeat

log = logging.getLogger(__name__)

# Labels are bookkeeping, never what the freezer goes by: an entrant can forge any of them.
RUN_LABEL = "podium.run"  # on scoring containers: their run (the reaper finds them by it)
HOST_LABEL = "podium.host"  # on scoring containers: the host whose lock they ran under
LOCK_POLL_S = 1.0


class MachineWaiting(Exception):
    """The machine was not ready; the score was rescheduled and nothing was claimed."""


# The host and its builds -----------------------------------------------------------


@cache
def _engine_host() -> str:
    name = engine.host_name()
    if not name:
        raise engine.EngineError("the engine reported no name")
    return name


def scoring_host() -> str:
    """This worker's scoring host: ``PODIUM_HOST_NAME``, else the engine's own name.

    Raises :class:`engine.EngineError` when it must ask the engine and cannot.
    """
    name = str(settings.PODIUM_HOST_NAME) or _engine_host()
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)[:100]


@cache
def _engine_id() -> str:
    """The engine's identity: its ID, with its machine's name and its data root.

    The ID alone is not enough: an engine of this generation derives it from its
    configuration folder's key, so two engines on one machine (a second ``dockerd``
    with a data root of its own) report the same ID, and so do machines cloned from one
    disk image. Together with the machine's name and the data root (``docker info``'s
    ``Name`` and ``DockerRootDir``) it names one engine; every client of one engine
    still reads the same three.
    """
    info = engine.info()
    found = str(info.get("ID") or "")
    if not found:
        raise engine.EngineError("the engine reported no ID")
    parts = (found, str(info.get("Name") or ""), str(info.get("DockerRootDir") or ""))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def machine_key() -> str:
    """The machine lock's key: ``engine:`` and the identity of the engine this worker
    drives (:func:`_engine_id`, from ``docker info``), asked once per process.

    A score freezes every container of its engine, so the engine is what it must hold
    alone: however many host names are registered on one engine, they share this one
    lock and take turns. Raises :class:`engine.EngineError` when the engine cannot be
    asked.
    """
    return "engine:" + re.sub(r"[^A-Za-z0-9_.:-]", "-", _engine_id())[:93]


def builds_frozen(host: str) -> bool:
    """Whether a live score holds the lock of this worker's engine (:func:`machine_key`),
    so its builds are paused meanwhile; ``host`` (the scoring host's name) only names it
    in the log.

    A database error, or an engine that cannot say its ID, reads as "not frozen": a
    build then counts the time, which errs on the side of the cap.
    """
    try:
        return machine_held(machine_key())
    except (DatabaseError, engine.EngineError):
        log.warning("could not read the machine lock of %s", host, exc_info=True)
        return False


def wait_while_frozen(host: str) -> float:
    """Block while a score holds the lock of this worker's engine; the seconds waited.

    Build workers call this before they start a step, so no build step starts while a
    score runs. A dead holder stops blocking builds once its lease expires.
    """
    started = time.monotonic()
    while builds_frozen(host):
        time.sleep(LOCK_POLL_S)
    return time.monotonic() - started


def frozen_seconds(since: dt.datetime, now: dt.datetime) -> float:
    """Seconds between ``since`` and ``now`` during which scored runs were in progress.

    The reaper adds this to a build's cap, as the build itself does not count frozen
    time. Runs of every host count (only ever more lenient).
    """
    total = 0.0
    runs = Run.objects.filter(started_at__isnull=False, started_at__lt=now).filter(
        Q(finished_at__isnull=True) | Q(finished_at__gt=since)
    )
    for started, finished in runs.values_list("started_at", "finished_at"):
        if started is None:
            continue
        start = max(started, since)
        end = min(finished or now, now)
        total += max(0.0, (end - start).total_seconds())
    return total


# The lock ----------------------------------------------------------------------------


class LockHeartbeat(Heartbeat):
    """Renews the holder's lock (keyed ``lock``, see :func:`machine_key`; and its run's
    lease) every ``lease_s / 3`` seconds (``scoring.host.heartbeat``).

    Stops at :meth:`stop`, or when a renewal finds the lock gone; then ``lost`` is set
    and ``on_lost(run_id)`` called. A renewal that fails on a database error is tried
    again at the next beat (the lease is still good until it expires). Uses its own
    database connection, closed when it ends.
    """

    def __init__(
        self, *, lock: str, holder: str, lease_s: float, on_lost: Callable[[int | None], None]
    ) -> None:
        super().__init__(
            name=f"machine-heartbeat-{lock}",
            interval_s=max(0.2, lease_s / 3),
            failure=f"could not renew the machine lock of {lock}",
        )
        self.lock = lock
        self.holder = holder
        self.lease_s = lease_s
        self.on_lost = on_lost
        self.run_id: int | None = None

    def beat(self) -> None:
        kept = machine_lease_renew(
            host=self.lock, holder=self.holder, lease_s=self.lease_s, run_id=self.run_id
        )
        if not kept and not self.stopping:
            log.error("lost the machine lock of %s (holder %s)", self.lock, self.holder)
            self.lost.set()
            self.on_lost(self.run_id)


@dataclass
class Session:
    """What a score holding the machine gets: the scoring host's name, the gate readings,
    its heartbeat (which holds the engine's lock, ``heartbeat.lock``) and the freezer that
    keeps everything else on the engine paused."""

    host: str
    holder: str
    readings: dict[str, Any]
    heartbeat: LockHeartbeat = field(repr=False)
    freezer: BuildFreezer | None = field(default=None, repr=False)
    # How long taking the machine took, by phase ("lock", "freeze", "gates"), in ms; the
    # claim adds its own ("calibration", "reference", "claim") and the run keeps them in
    # overhead_ms.
    phases_ms: dict[str, float] = field(default_factory=dict)

    def spare(self, container_id: str) -> None:
        """Keep the scored container running: call after creating it, before starting it
        (the freezer would pause it otherwise, as any other container that starts)."""
        if self.freezer is not None:
            self.freezer.spare(container_id)

    def attach(self, run_id: int) -> None:
        """From now on the heartbeat renews ``run_id``'s lease too (renewed once at once)."""
        self.heartbeat.run_id = run_id
        machine_lease_renew(
            host=self.heartbeat.lock,
            holder=self.holder,
            lease_s=self.heartbeat.lease_s,
            run_id=run_id,
        )


class Phases:
    """Times consecutive phases: :meth:`done` closes the phase that began at the last
    call (or at creation) under ``name``, in milliseconds, in :attr:`ms`."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._since = time.perf_counter_ns()

    def done(self, name: str) -> None:
        now = time.perf_counter_ns()
        self.ms[name] = round((now - self._since) / 1e6, 3)
        self._since = now


def _holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _acquire(lock: str, holder: str, lease_s: float, wait_s: float) -> bool:
    """Take the lock keyed ``lock``, waiting up to ``wait_s``; a lock taken over from a
    dead holder first has that holder's run stopped (its container may still be running)."""
    deadline = time.monotonic() + wait_s
    while True:
        before, before_run = machine_lease_holder(lock)
        if machine_lease_acquire(host=lock, holder=holder, lease_s=lease_s):
            break
        if time.monotonic() >= deadline:
            return False
        time.sleep(LOCK_POLL_S)
    if before and before_run:
        log.warning("took over the machine lock of %s from %s", lock, before)
        settle_dead_run(before_run)
    return True


def remove_run_containers(run_id: int, container_id: str = "") -> None:
    """Kill and remove a run's scoring container(s): the one recorded on the run and any
    labelled with the run and this host (a worker may die before recording it; the host
    label keeps another database's run of the same id, on a shared engine, out of it).
    Engine errors are logged."""
    ids = {container_id} if container_id else set()
    try:
        labels = [f"{RUN_LABEL}={run_id}", f"{HOST_LABEL}={scoring_host()}"]
        ids |= {str(c["Id"]) for c in engine.list_containers(labels)}
    except engine.EngineError:
        log.exception("could not list the containers of run %s", run_id)
    for found in ids:
        try:
            engine.kill(found)
            engine.remove_container(found)
        except engine.EngineError:
            log.exception("could not remove container %s of run %s", found[:12], run_id)


def settle_dead_run(run_id: int, now: dt.datetime | None = None) -> bool:
    """A run whose worker stopped heartbeating: stop its container and, once its lease
    has expired, record the platform failure (requeued once, then refunded).

    Shared by the reaper and a score taking over a dead holder's lock; conditional
    updates make it safe for both to try.
    """
    now = now or timezone.now()
    run = Run.objects.filter(pk=run_id).values("container_id", "status", "lease_expires_at").first()
    if run is None or run["status"] not in (Run.STAGING, Run.RUNNING):
        return False
    expires = run["lease_expires_at"]
    if expires is not None and expires >= now:
        return False
    remove_run_containers(run_id, run["container_id"])
    return run_record_infra_failure(run_id=run_id, reason="the scoring worker stopped answering")


def _kill_lost_run(run_id: int | None) -> None:
    """The lock was lost mid-score: this run may no longer be timed alone, so stop it."""
    if run_id is None:
        return
    try:
        container_id = Run.objects.filter(pk=run_id).values_list("container_id", flat=True).first()
    except DatabaseError:
        log.exception("run %s: could not read its container after losing the lock", run_id)
        return
    if container_id:
        engine.kill(container_id)


def retry_delay_s(waits: int) -> float:
    """How long a score waits for the machine on its ``waits``-th try (backoff)."""
    return gates.retry_delay_s(
        waits, settings.PODIUM_GATE_RETRY_S, settings.PODIUM_GATE_RETRY_MAX_S
    )


def wait_reason(reason: str, retry_in_s: float) -> str:
    minutes = max(1, round(retry_in_s / 60))
    return f"{reason} (next try in {minutes} minute{'s' if minutes != 1 else ''})"


def _reschedule(submission_id: int, waits: int, reason: str) -> None:
    retry_in_s = retry_delay_s(waits + 1)
    submission_wait_for_machine(
        submission_id=submission_id,
        reason=wait_reason(reason, retry_in_s),
        retry_in_s=retry_in_s,
        waits=waits + 1,
    )


@contextmanager
def hold(
    *,
    submission_id: int | None = None,
    waits: int = 0,
    reschedule: Callable[[str], None] | None = None,
) -> Iterator[Session]:
    """Hold the scoring host's machine for one score: lock, freeze the host, pass the gates.

    Order: take the lock of the host's engine (:func:`machine_key`, shared by every host
    name on that engine), waiting up to ``PODIUM_LOCK_WAIT_S`` for another score),
    start the heartbeat, freeze every container on the host (builds and anything else,
    except the ``PODIUM_FREEZE_EXEMPT`` services; see :class:`BuildFreezer`), measure
    the gates. When all pass, the body runs with a :class:`Session`; the body must
    :meth:`Session.spare` its scored container before starting it, or the freezer
    pauses it too. Afterwards (also on an exception) the heartbeat stops, the host's
    paused containers are unpaused and the lock is released, in that order.

    When the lock cannot be had, the engine does not answer or a gate fails, nothing
    is claimed: the lock is released, ``reschedule(reason)`` is called and
    :class:`MachineWaiting` is raised instead of running the body. By default (a score
    of ``submission_id``) the submission gets a "waiting for the scoring machine"
    timeline note and its score is enqueued again with backoff.
    """
    if reschedule is None:
        if submission_id is None:
            raise ValueError("hold() needs a submission_id or a reschedule")
        wanted = submission_id

        def reschedule(reason: str) -> None:
            _reschedule(wanted, waits, reason)

    try:
        host = scoring_host()
        lock = machine_key()
    except engine.EngineError as exc:
        log.error("cannot name the scoring host or its engine: %s", exc)
        reschedule("the container engine did not answer")
        raise MachineWaiting("engine") from exc
    holder = _holder_name()
    lease_s = float(settings.PODIUM_LEASE_S)
    phases = Phases()
    if not _acquire(lock, holder, lease_s, float(settings.PODIUM_LOCK_WAIT_S)):
        reschedule("another score is using it")
        raise MachineWaiting("busy")
    phases.done("lock")
    heartbeat = LockHeartbeat(lock=lock, holder=holder, lease_s=lease_s, on_lost=_kill_lost_run)
    heartbeat.start()
    freezer = BuildFreezer(lock)
    failed: list[Reading] = []
    try:
        readings: list[Reading] = []
        try:
            freezer.start()
        except engine.EngineError as exc:
            log.error("could not freeze the containers of %s: %s", host, exc)
            failed = [gates.probe_failed("build_freezer", type(exc).__name__)]
        phases.done("freeze")
        if not failed:
            readings = measure(limits(), host)
            failed = gates.failing(readings)
            phases.done("gates")
        if not failed:
            log.info(
                "machine %s (%s) held by %s (%d containers paused)",
                host,
                lock,
                holder,
                len(freezer.paused),
            )
            yield Session(host, holder, gates.as_json(readings), heartbeat, freezer, phases.ms)
    finally:
        heartbeat.stop()
        try:
            freezer.stop()
        except engine.EngineError:
            log.exception("could not unpause the containers of %s; the reaper will", host)
        machine_lease_release(host=lock, holder=holder)
    if failed:
        for reading in failed:
            log.warning("gate %s failed: %s (%s)", reading.name, reading.value, reading.detail)
        reschedule(gates.failed_text(failed))
        raise MachineWaiting(", ".join(r.name for r in failed))


def reap(now: dt.datetime | None = None) -> None:
    """The reaper's part: free this engine's lock if its holder died, and unpause the
    containers left paused while nobody holds it (see :func:`thaw`).

    A holder that died mid-score left the engine's containers paused; they run again once
    its lease expired. While a score of any host name on this engine holds the lock,
    nothing is unpaused. Engine errors are logged (the reaper tries again next minute).
    """
    now = now or timezone.now()
    try:
        lock = machine_key()
    except engine.EngineError:
        log.exception("reaper: cannot ask the engine for its ID")
        return
    dead = machine_lease_free_expired(host=lock, now=now)
    if dead:
        log.warning("reaper: freed the machine lock of %s from %s (no heartbeat)", lock, dead)
    if machine_held(lock, now):
        return
    try:
        thawed = thaw(lock)
    except engine.EngineError:
        log.exception("reaper: could not unpause the containers of %s", lock)
        return
    if thawed:
        log.warning("reaper: unpaused %d containers of %s", thawed, lock)
