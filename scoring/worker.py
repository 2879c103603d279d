"""A worker of the worker side: its start, and a scoring host's wake-up.

This module composes the rooms below it (docs/architecture.md, "The worker side's rooms"):
each of them does one thing, and what a worker does in which order is said here once.

- **A worker's start** (``celery.signals.worker_ready``, connected in
  ``scoring/tasks.py``). A worker that consumes a scoring queue (``scoring``, or a class
  queue ``scoring.<class>``) starts its host's heartbeat (``scoring.host.hosts``:
  registration, then a heartbeat every ``PODIUM_HOST_HEARTBEAT_S``); once the host is
  registered it collects what dead workers left on its engine
  (``scoring.upkeep.reaper.collect_leftovers``, again before each disk report) and then
  calibrates (``scoring.run.calibration.start_at_registration``): :func:`on_worker_ready`,
  :func:`on_host_registered`. A worker that consumes ``builds`` checks it has
  ``jpegtran`` (:func:`on_builds_worker_ready`).
- **A scoring host's wake-up** (the Celery task ``scoring.score_next``):
  :func:`score_next` asks whether its host takes work (``scoring.host.hosts.accepts_work``),
  holds the machine (``scoring.host.machine.hold``), keeps the host calibrated
  (``scoring.run.calibration.keep_calibrated``), claims the next waiting run and scores
  it (``scoring.run.runner.execute``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from portal.submissions.runs import run_add_overhead, run_claim_next, submission_wait_for_machine
from portal.submissions.waiting import next_waiting_id, wake_taken
from portal.submissions.wakeups import score_wake
from scoring import engine
from scoring.cohort import rewrite
from scoring.host import hosts
from scoring.host import machine as machine_lock
from scoring.host.hosts import HostHeartbeat
from scoring.run import calibration, reference, runner
from scoring.upkeep import reaper

log = logging.getLogger(__name__)

SCORING_QUEUE = "scoring"
BUILDS_QUEUE = "builds"


# A worker's start -----------------------------------------------------------------------


def on_host_registered() -> threading.Thread | None:
    """What a scoring host does once its worker registered it: collect what dead workers
    left on its engine (``reaper.collect_leftovers``: calibration and slice containers,
    pulled images), then calibrate (``calibration.start_at_registration``; its thread is
    returned, None when calibration is off). Collection comes first, so the calibration's
    own containers are never among what it removes."""
    reaper.collect_leftovers()
    return calibration.start_at_registration()


def consumes_scoring(queue_names: Iterable[str]) -> bool:
    """Whether a worker consuming ``queue_names`` scores: ``scoring`` or ``scoring.<class>``."""
    prefix = f"{SCORING_QUEUE}."
    return any(
        name == SCORING_QUEUE or (name.startswith(prefix) and len(name) > len(prefix))
        for name in queue_names
    )


_heartbeat: HostHeartbeat | None = None


def _consumed_queues(sender: Any) -> list[str]:
    """The queues of the worker that sent ``worker_ready`` (its consumer's app knows them)."""
    return list(sender.app.amqp.queues.consume_from) if sender is not None else []


def on_builds_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    """``celery.signals.worker_ready``: a worker that consumes ``builds`` prepares the
    verification sets (``scoring.cohort.verifysets``), which needs ``jpegtran``; without it,
    one error line says so and how to install it. The worker still starts: its builds
    and sweeps need no ``jpegtran``, and a fill that runs without it fails and is
    retried by the next one. Other workers (scoring only) do nothing."""
    if BUILDS_QUEUE not in _consumed_queues(sender):
        return
    try:
        rewrite.find_jpegtran()
    except rewrite.JpegtranMissing:
        log.error(
            "this builds worker has no %s on PATH: verification sets cannot be prepared, "
            "so verifications wait; install it with apt-get install %s",
            rewrite.JPEGTRAN,
            rewrite.PACKAGE,
        )


def on_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    """``celery.signals.worker_ready``: a worker that consumes a scoring queue starts the
    heartbeat thread (once per process), which registers the host, records its engine's
    disk use, collects what dead workers left on its engine and then has it calibrated
    (:func:`on_host_registered`). Other workers (builds) do nothing.

    It returns only once that is done (at most ``PODIUM_HOST_READY_WAIT_S``): the worker
    sends the signal before its event loop starts, and the loop is what fetches messages,
    so a host takes no wake-up before it is ready. Another host of the class takes it
    meanwhile, and no run waits for a start's calibration."""
    global _heartbeat
    queue_names = _consumed_queues(sender)
    if not consumes_scoring(queue_names):
        return
    for name in queue_names:
        if name.startswith(f"{SCORING_QUEUE}.") and name != (
            f"{SCORING_QUEUE}.{settings.PODIUM_HARDWARE_CLASS}"
        ):
            log.warning(
                "this worker consumes %s but its host registers as hardware class %s",
                name,
                settings.PODIUM_HARDWARE_CLASS,
            )
    if _heartbeat is None or not _heartbeat.is_alive():
        _heartbeat = HostHeartbeat()
        _heartbeat.on_registered = on_host_registered
        _heartbeat.collect = reaper.collect_leftovers
        _heartbeat.start()
    wait_s = float(settings.PODIUM_HOST_READY_WAIT_S)
    if not _heartbeat.wait_started(wait_s):
        log.warning(
            "scoring host %s: not registered and calibrated after %g s; taking work anyway",
            settings.PODIUM_HOST_NAME or "(the engine's name)",
            wait_s,
        )


# A scoring host's wake-up ---------------------------------------------------------------


def score_next(hardware_class: str, waits: int = 0) -> None:
    """A scoring host's wake-up: claim the next waiting run of its class, score it.

    The message names no submission: each waiting submission was sent one wake-up to
    its benchmark's class queue, and whichever host of the class takes one claims, in
    the fair order (``portal.submissions.dispatch``), from the database, so two hosts
    never claim one run and a lost or doubled message loses or doubles no run.

    A host that is draining or retired takes nothing: it sends the wake-up back to the
    class queue for another host. A machine that is not ready (lock, engine, health
    gates) notes the wait on the next waiting submission's timeline and sends the
    wake-up again with backoff (``waits`` counts the tries). Holding the machine, before
    it claims, a host calibrates when due (``scoring.run.calibration.keep_calibrated``); one
    that its calibration drained claims nothing and sends the wake-up back too. Then it
    measures the next waiting run's reference kit when due
    (``scoring.run.reference.keep_measured``).

    A waiting submission that no host could run (``run_claim_next``: its cohort is gone,
    say) is ended and refunded there, and the next one is claimed in the same wake-up.
    Taking the wake-up clears the class's in-flight marker (``waiting.wake_taken``), so
    the minute sweep replaces a wake-up that then comes to nothing.
    """
    wake_taken(hardware_class)
    try:
        host = machine_lock.scoring_host()
    except engine.EngineError as exc:
        log.error("cannot name the scoring host: %s", exc)
        _wake_later(hardware_class, waits + 1, "the container engine did not answer")
        return
    if not hosts.accepts_work(host):
        log.info("host %s takes no new run: the wake-up goes back to its queue", host)
        score_wake(hardware_class=hardware_class, countdown=settings.PODIUM_DRAIN_REQUEUE_S)
        return
    if next_waiting_id(hardware_class=hardware_class) is None:
        return  # another host took it, or a duplicate message

    def reschedule(reason: str) -> None:
        _wake_later(hardware_class, waits + 1, reason)

    lease_s = int(settings.PODIUM_LEASE_S)
    try:
        with machine_lock.hold(reschedule=reschedule) as session:
            phases = machine_lock.Phases()
            if not calibration.keep_calibrated(session):
                log.info("host %s was drained by its calibration: the wake-up goes back", host)
                score_wake(hardware_class=hardware_class, countdown=settings.PODIUM_DRAIN_REQUEUE_S)
                return
            phases.done("calibration")
            waiting = next_waiting_id(hardware_class=hardware_class)
            if waiting is not None and reference.keep_measured(session, waiting) is not None:
                phases.done("reference")
            run = run_claim_next(hardware_class=hardware_class, lease_s=lease_s, host=host)
            if run is None:
                return
            phases.done("claim")
            session.attach(int(run.pk))
            measured = runner.execute(
                run,
                run.submission,
                lease_s=lease_s,
                readings=session.readings,
                host=session.host,
                spare=session.spare,
                phases_ms=session.phases_ms | phases.ms,
            )
    except machine_lock.MachineWaiting as waiting:
        log.info("class %s waits for host %s: %s", hardware_class, host, waiting)
        return
    if measured.published_ns is not None:  # cleaning up and giving the machine back
        run_add_overhead(int(run.pk), release=runner.elapsed_ms(measured.published_ns))


def _wake_later(hardware_class: str, waits: int, reason: str) -> None:
    """This host is not ready: the next waiting submission's timeline says why, and a
    host of the class is woken again with backoff (try ``waits``)."""
    retry_in_s = machine_lock.retry_delay_s(waits)
    next_id = next_waiting_id(hardware_class=hardware_class)
    if next_id is None or not submission_wait_for_machine(
        submission_id=next_id,
        reason=machine_lock.wait_reason(reason, retry_in_s),
        retry_in_s=retry_in_s,
        waits=waits,
    ):
        score_wake(hardware_class=hardware_class, waits=waits, countdown=retry_in_s)
