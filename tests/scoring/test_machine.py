"""The machine lock, the build freezer and the gates' wiring (scoring/host/machine.py).

The lock and the waiting logic run on real rows; the freezer and the end-to-end
"two builds and a score" test on the real Docker Engine. Every test uses its own
scoring host name (its own lock). The freezer pauses every container on the engine,
other test runs' too, so its tests keep each freeze short and always thaw afterwards.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import re
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from portal.contests.models import HardwareClass
from portal.core import cpus, jobs, storage
from portal.environments.models import Environment
from portal.hosts.leases import (
    machine_held,
    machine_lease_acquire,
    machine_lease_release,
    machine_lease_renew,
)
from portal.hosts.models import MachineLease
from portal.submissions.intake import submission_accept
from portal.submissions.models import AttemptLedger, Run, Submission, SubmissionEvent
from portal.submissions.runs import MACHINE_WAIT_NOTE
from scoring import engine, worker
from scoring.build import builds
from scoring.host import freezer as freezer_module
from scoring.host import health, machine
from scoring.host.gates import Reading
from scoring.run import runner
from scoring.upkeep import reaper
from tests import factories
from tests.scoring.test_runner import FakeEngine, the_run
from tests.scoring.test_staging import make_cohort, make_submission

REPO = Path(__file__).resolve().parents[2]
PYTHON_BASE = "localhost/podium/python:bookworm"
BUSYBOX = "localhost/podium/busybox:1"


@pytest.fixture
def host(settings, monkeypatch) -> str:
    """A scoring host name of this test's own, on an engine that reports an ID of this
    test's own (so its own machine lock: :func:`machine.machine_key`)."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    settings.PODIUM_HOST_NAME = name
    monkeypatch.setattr(machine, "_engine_id", lambda: f"ID-{name}")
    return name


@pytest.fixture
def lock(host) -> str:
    """The machine lock of ``host``'s engine."""
    return machine.machine_key()


@pytest.fixture
def quick_gates(settings) -> None:
    """Gates that pass on a shared test machine (their decisions are tested in test_gates)."""
    settings.PODIUM_GATE_CPU_BUSY_MAX = 1024.0
    settings.PODIUM_GATE_CPU_SAMPLE_S = 0.1
    settings.PODIUM_GATE_MIN_MEMORY_BYTES = 0
    settings.PODIUM_GATE_MIN_DISK_BYTES = 0


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, tuple[Any, ...], float | None]]:
    """Tasks enqueued through portal.core.jobs: (name, args, countdown)."""
    calls: list[tuple[str, tuple[Any, ...], float | None]] = []
    monkeypatch.setattr(
        "portal.core.jobs.app.send_task",
        lambda name, args=(), countdown=None, **kw: calls.append((name, tuple(args), countdown)),
    )
    return calls


@pytest.fixture
def queued(alice, benchmark) -> Submission:
    benchmark.cohort_size = 10
    benchmark.pass_min_matches = 10
    benchmark.save()
    make_cohort(benchmark, [7] * 10)
    return make_submission(alice, benchmark)


class NoFreezer:
    """Stands in for the build freezer where a test has no builds to freeze."""

    def __init__(self, host: str) -> None:
        self.paused: set[str] = set()
        self.spared: set[str] = set()

    def spare(self, container_id: str) -> None:
        self.spared.add(container_id)

    def start(self) -> None:
        pass

    def stop(self) -> int:
        return 0


@pytest.fixture
def no_builds(monkeypatch) -> None:
    """No Docker needed: no builds to freeze, and an engine that reports its version."""
    monkeypatch.setattr(machine, "BuildFreezer", NoFreezer)
    monkeypatch.setattr(engine, "version", lambda: "20.10.24+dfsg1")


def waiting_notes(submission: Submission) -> list[str]:
    return [
        event.note
        for event in SubmissionEvent.objects.filter(submission=submission).order_by("at", "id")
        if event.note.startswith(MACHINE_WAIT_NOTE)
    ]


def in_thread(target: Callable[[], object]) -> threading.Thread:
    """Run ``target`` in a thread that closes its own database connection."""

    def body() -> None:
        try:
            target()
        finally:
            connection.close()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


# The lease ------------------------------------------------------------------------------


def test_one_holder_at_a_time_and_an_expired_lease_is_taken_over(db, host):
    assert machine_lease_acquire(host=host, holder="scorer-a", lease_s=60)
    assert not machine_lease_acquire(host=host, holder="scorer-b", lease_s=60)
    assert machine_held(host)

    # scorer-a stops heartbeating: once its lease has expired, scorer-b may take over.
    MachineLease.objects.filter(host=host).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    assert not machine_held(host)
    assert machine_lease_acquire(host=host, holder="scorer-b", lease_s=60)

    # The old holder can neither renew nor release what is no longer its own.
    assert not machine_lease_renew(host=host, holder="scorer-a", lease_s=60)
    assert not machine_lease_release(host=host, holder="scorer-a")
    assert MachineLease.objects.get(host=host).holder == "scorer-b"
    assert machine_lease_release(host=host, holder="scorer-b")
    assert not machine_held(host)


def test_locks_of_different_hosts_are_independent(db):
    assert machine_lease_acquire(host="gpu-a", holder="x", lease_s=60)
    assert machine_lease_acquire(host="gpu-b", holder="y", lease_s=60)


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_keeps_the_lock_and_the_run_alive_and_notices_losing_them(
    host, lock, queued, settings
):
    assert machine_lease_acquire(host=lock, holder="me", lease_s=0.6)
    run = Run.objects.create(
        submission=queued, cohort=queued.benchmark.cohorts.get(), status=Run.RUNNING
    )
    lost: list[int | None] = []
    heartbeat = machine.LockHeartbeat(lock=lock, holder="me", lease_s=0.6, on_lost=lost.append)
    heartbeat.run_id = run.pk
    heartbeat.start()
    try:
        time.sleep(1.5)  # well past the 0.6 s lease: only the heartbeat keeps it
        assert machine_held(lock)
        run.refresh_from_db()
        assert run.lease_expires_at is not None and run.lease_expires_at > timezone.now()

        MachineLease.objects.filter(host=lock).update(holder="someone-else")
        deadline = time.monotonic() + 5
        while not heartbeat.lost.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert heartbeat.lost.is_set()
        assert lost == [run.pk]  # the session kills this run's container
    finally:
        heartbeat.stop()


# Waiting for the machine ----------------------------------------------------------------


def failing_gate(monkeypatch) -> None:
    monkeypatch.setattr(
        machine,
        "measure",
        lambda limits, host: [
            Reading("kernel", True, "6.1", "not pinned"),
            Reading("cpu_idle", False, 1.9, "1.90 busy CPUs > 1.5"),
        ],
    )


def test_a_failing_gate_leaves_the_submission_queued_and_retries_with_backoff(
    queued, host, lock, no_builds, monkeypatch, sent, django_capture_on_commit_callbacks
):
    fake = FakeEngine().install(monkeypatch)
    failing_gate(monkeypatch)

    hardware_class = queued.benchmark.hardware_class_id
    for waits in range(6):
        with django_capture_on_commit_callbacks(execute=True):
            worker.score_next(hardware_class, waits)  # each retry, as its wake-up says

    queued.refresh_from_db()
    assert queued.status == Submission.QUEUED  # waiting, not failed
    assert not Run.objects.filter(submission=queued).exists()  # nothing claimed
    assert fake.calls == []  # no container
    assert not machine_held(lock)  # the lock was released each time
    assert [countdown for _name, _args, countdown in sent] == [300, 600, 1200, 2400, 3600, 3600]
    assert [args for _name, args, _countdown in sent] == [(hardware_class, n) for n in range(1, 7)]
    notes = waiting_notes(queued)
    assert notes[0] == (
        "waiting for the scoring machine: health check cpu_idle failed (next try in 5 minutes)"
    )
    assert notes[-1].endswith("(next try in 60 minutes)")
    assert "1.9" not in "".join(notes)  # readings are for staff, not in the entrant's timeline


def test_the_entrant_sees_queued_and_waiting_not_a_failure(
    queued, alice, host, no_builds, monkeypatch, sent
):
    FakeEngine().install(monkeypatch)
    failing_gate(monkeypatch)
    runner.score_submission(queued.pk)

    client = APIClient()
    client.force_authenticate(alice)
    data = client.get(f"/api/v1/submissions/{queued.pk}/").json()

    assert data["status"] == "queued" and not data["failure_reason"]
    assert data["timeline"][-1]["status"] == "queued"
    assert data["timeline"][-1]["note"].startswith("waiting for the scoring machine:")
    assert data["attempt"] == {"charged": True, "refunded": False}


def test_a_stale_duplicate_of_a_rescheduled_score_does_nothing(
    queued, host, no_builds, monkeypatch, sent, django_capture_on_commit_callbacks
):
    FakeEngine().install(monkeypatch)
    failing_gate(monkeypatch)
    with django_capture_on_commit_callbacks(execute=True):
        runner.score_submission(queued.pk)  # waits once: the retry carries waits=1
    assert sent == [(jobs.SCORE_NEXT, (queued.benchmark.hardware_class_id, 1), 300)]
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        runner.score_submission(queued.pk, 0)  # the original message, delivered again

    assert sent == [] and len(waiting_notes(queued)) == 1


def test_a_busy_machine_reschedules_instead_of_scoring_beside_another_score(
    queued, host, lock, no_builds, monkeypatch, sent, settings
):
    fake = FakeEngine().install(monkeypatch)
    settings.PODIUM_LOCK_WAIT_S = 0
    assert machine_lease_acquire(host=lock, holder="another-scorer", lease_s=60)

    runner.score_submission(queued.pk)

    queued.refresh_from_db()
    assert queued.status == Submission.QUEUED and fake.calls == []
    assert waiting_notes(queued) == [
        "waiting for the scoring machine: another score is using it (next try in 5 minutes)"
    ]
    assert MachineLease.objects.get(host=lock).holder == "another-scorer"


def test_an_engine_that_cannot_freeze_the_builds_is_a_wait_not_a_failure(
    queued, host, lock, monkeypatch, sent
):
    def engine_down(**kw: Any) -> engine.EventStream:
        raise engine.EngineError("connection refused")

    monkeypatch.setattr(engine, "container_events", engine_down)

    runner.score_submission(queued.pk)

    queued.refresh_from_db()
    assert queued.status == Submission.QUEUED
    assert waiting_notes(queued)[0].startswith(
        "waiting for the scoring machine: health check build_freezer failed"
    )
    assert not machine_held(lock)


def test_a_passing_score_stores_every_reading_on_its_run(
    queued, host, lock, no_builds, quick_gates, monkeypatch, sent
):
    FakeEngine().install(monkeypatch)

    runner.score_submission(queued.pk)

    run = the_run(queued)
    assert run.verdict == "passed"
    assert set(run.readings) == {
        "engine_version",
        "kernel",
        "supervisor_sha256",
        "memory_available",
        "disk_free",
        "cpu_idle",
    }
    assert all(reading["ok"] for reading in run.readings.values())
    assert run.readings["supervisor_sha256"]["value"] == run.supervisor_sha256
    assert not machine_held(lock)
    lease = MachineLease.objects.get(host=lock)
    assert lease.holder == "" and lease.run is None


@pytest.fixture
def strict_class(queued, settings) -> HardwareClass:
    """The benchmark's class made strict (at most half a CPU busy, within its noise band),
    and this host one of it; every other gate passes on a shared test machine."""
    row = HardwareClass.objects.get(name=queued.benchmark.hardware_class_id)
    row.cpu_gate_busy_max = 0.5
    row.cpu_gate_noise_band = True
    row.save()
    settings.PODIUM_HARDWARE_CLASS = row.name
    settings.PODIUM_GATE_CPU_BUSY_MAX = 1024.0  # the platform's default: lenient
    settings.PODIUM_GATE_CPU_SAMPLE_S = 0.2
    settings.PODIUM_GATE_MIN_MEMORY_BYTES = 0
    settings.PODIUM_GATE_MIN_DISK_BYTES = 0
    return row


@pytest.fixture
def busy_core() -> Iterator[None]:
    """A process that burns one core, on a CPU that times scored runs."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(
            spinner.pid, {min(cpus.configured().scoring or os.sched_getaffinity(0))}
        )
        time.sleep(0.3)
        yield
    finally:
        spinner.kill()
        spinner.wait()


def test_a_strict_class_does_not_start_a_run_while_another_process_burns_a_core(
    queued, host, lock, no_builds, strict_class, busy_core, monkeypatch, sent
):
    fake = FakeEngine().install(monkeypatch)
    charges = list(AttemptLedger.objects.filter(submission=queued).values_list("delta", flat=True))

    runner.score_submission(queued.pk)

    queued.refresh_from_db()
    assert queued.status == Submission.QUEUED  # waiting, not measured
    assert not Run.objects.filter(submission=queued).exists()  # nothing claimed
    assert fake.calls == []  # no container was created
    assert waiting_notes(queued) == [
        "waiting for the scoring machine: health check cpu_idle failed (next try in 5 minutes)"
    ]
    after = list(AttemptLedger.objects.filter(submission=queued).values_list("delta", flat=True))
    assert after == charges  # nothing charged for the wait
    assert not machine_held(lock)


def test_a_lenient_class_lets_the_same_busy_host_score(
    queued, host, no_builds, strict_class, busy_core, monkeypatch, sent
):
    FakeEngine().install(monkeypatch)
    HardwareClass.objects.filter(pk=strict_class.pk).update(
        cpu_gate_busy_max=None, cpu_gate_noise_band=False
    )

    runner.score_submission(queued.pk)

    assert the_run(queued).verdict == "passed"  # the platform's default allows 1024 CPUs


def test_a_quiet_host_passes_a_strict_class_and_a_little_work_past_its_band_does_not(
    queued, host, no_builds, strict_class, monkeypatch, sent
):
    FakeEngine().install(monkeypatch)
    monkeypatch.setattr(health, "noise_band_percent", lambda name: 2.0)
    monkeypatch.setattr(health.cpus, "configured", lambda: cpus.decide("shared", {0, 1}))
    monkeypatch.setattr(health.gates, "cpu_count", lambda proc_stat: 2)
    seen: list[float] = []

    def samples(maximum: float, sample_s: float, tries: int = 3, only: Any = None) -> list[float]:
        seen.append(maximum)
        return [busy]

    monkeypatch.setattr(health, "busy_cpu_samples", samples)
    busy = 0.2  # under the class's 0.5, but it would slow a run on both CPUs by 11 %
    runner.score_submission(queued.pk)
    queued.refresh_from_db()
    assert queued.status == Submission.QUEUED
    assert not Run.objects.filter(submission=queued).exists()
    assert seen == [pytest.approx(2 * 2.0 / 102)]

    busy = 0.02  # a quiet host
    runner.score_submission(queued.pk, 1)
    run = the_run(queued)
    assert run.verdict == "passed"
    assert run.readings["cpu_idle"]["ok"] is True
    assert "the noise band ±2 % on 2 CPUs" in run.readings["cpu_idle"]["detail"]


def test_pins_that_do_not_match_keep_the_machine_waiting(
    queued, host, no_builds, quick_gates, monkeypatch, sent, settings
):
    FakeEngine().install(monkeypatch)
    settings.PODIUM_PIN_KERNEL = "0.0.0-not-this-kernel"

    runner.score_submission(queued.pk)

    assert waiting_notes(queued)[0].startswith(
        "waiting for the scoring machine: health check kernel failed "
        f"(kernel {os.uname().release} here, pinned 0.0.0-not-this-kernel)"
    )
    assert not Run.objects.filter(submission=queued).exists()  # nothing claimed or charged
    assert queued.ledger.filter(delta=-1).count() == 0


def test_the_classs_pins_come_before_the_hosts_settings_and_say_which_pin(
    queued, host, no_builds, quick_gates, monkeypatch, sent, settings
):
    FakeEngine().install(monkeypatch)
    HardwareClass.objects.filter(name=settings.PODIUM_HARDWARE_CLASS).update(
        pin_engine_version="0.0-not-this-engine",
        pin_kernel=os.uname().release,
    )
    settings.PODIUM_PIN_KERNEL = "0.0.0-a-setting-the-class-overrides"

    runner.score_submission(queued.pk)

    note = waiting_notes(queued)[0]
    assert note.startswith("waiting for the scoring machine: health check engine_version failed (")
    assert "pinned 0.0-not-this-engine)" in note
    assert "kernel" not in note


def test_the_runs_lease_is_the_heartbeat_lease_not_the_whole_score_timeout(
    queued, host, no_builds, quick_gates, monkeypatch, sent, settings
):
    settings.PODIUM_LEASE_S = 60
    fake = FakeEngine().install(monkeypatch)
    leases: list[dt.timedelta] = []

    def start(container_id: str) -> None:
        expires = the_run(queued).lease_expires_at
        assert expires is not None
        leases.append(expires - timezone.now())
        fake.calls.append("start")
        fake.started_ns = time.monotonic_ns()

    monkeypatch.setattr(engine, "start", start)
    runner.score_submission(queued.pk)

    assert len(leases) == 1 and dt.timedelta(seconds=50) < leases[0] <= dt.timedelta(seconds=60)


def test_the_scored_container_is_spared_before_it_starts(
    queued, host, no_builds, quick_gates, monkeypatch, sent
):
    fake = FakeEngine().install(monkeypatch)
    monkeypatch.setattr(NoFreezer, "spare", lambda self, cid: fake.calls.append(f"spare {cid}"))

    runner.score_submission(queued.pk)

    # Spared after it exists and before its start event, which the freezer would act on.
    assert fake.calls[:3] == ["create", "spare c0ffee", "start"]
    assert the_run(queued).verdict == "passed"


def test_taking_over_a_dead_holders_lock_stops_its_run_first(
    queued, bob, host, lock, no_builds, quick_gates, monkeypatch, sent
):
    fake = FakeEngine().install(monkeypatch)
    monkeypatch.setattr(engine, "list_containers", lambda *a, **kw: [])
    orphaned = make_submission(bob, queued.benchmark, status=Submission.RUNNING)
    past = timezone.now() - dt.timedelta(seconds=5)
    dead_run = Run.objects.create(
        submission=orphaned,
        cohort=queued.benchmark.cohorts.get(),
        status=Run.RUNNING,
        container_id="deadbeef",
        lease_expires_at=past,
    )
    MachineLease.objects.create(host=lock, holder="dead-worker", run=dead_run, expires_at=past)

    runner.score_submission(queued.pk)

    # The dead worker's container is killed before this score creates its own.
    assert fake.calls[:3] == ["kill", "remove", "create"]
    dead_run.refresh_from_db()
    orphaned.refresh_from_db()
    assert dead_run.status == Run.INFRA_FAILED
    assert orphaned.status == Submission.QUEUED  # its try 2 comes later
    assert the_run(queued).verdict == "passed"


# One engine, one lock -----------------------------------------------------------------


def test_two_host_names_on_one_engine_take_turns_on_its_one_lock(
    queued, no_builds, quick_gates, monkeypatch, sent, settings
):
    FakeEngine().install(monkeypatch)
    monkeypatch.setattr(machine, "_engine_id", lambda: "ONE")  # both names drive engine ONE
    thawed: list[str] = []

    def thaw(lock: str, exempt: frozenset[str] | None = None) -> int:
        thawed.append(lock)
        return 0

    monkeypatch.setattr(machine, "thaw", thaw)
    settings.PODIUM_LOCK_WAIT_S = 0

    settings.PODIUM_HOST_NAME = "gpu-a"
    engine_lock = machine.machine_key()
    assert machine_lease_acquire(host=engine_lock, holder="gpu-a:score", lease_s=60)

    # A second host name registered on the same engine: same lock, so it waits its turn.
    settings.PODIUM_HOST_NAME = "gpu-b"
    assert machine.machine_key() == engine_lock
    assert machine.builds_frozen("gpu-b")  # gpu-b's builds give way to gpu-a's score too
    runner.score_submission(queued.pk)
    queued.refresh_from_db()
    assert queued.status == Submission.QUEUED and not Run.objects.filter(submission=queued)
    assert waiting_notes(queued) == [
        "waiting for the scoring machine: another score is using it (next try in 5 minutes)"
    ]
    machine.reap()  # gpu-b's reaper leaves gpu-a's score frozen around it
    assert thawed == []
    assert MachineLease.objects.get(host=engine_lock).holder == "gpu-a:score"

    # gpu-a's score ends: gpu-b's retry takes the engine's lock and scores.
    assert machine_lease_release(host=engine_lock, holder="gpu-a:score")
    runner.score_submission(queued.pk, 1)
    assert the_run(queued).verdict == "passed"
    assert not machine_held(engine_lock)


def test_the_lock_follows_the_engine_not_the_host_name(db, monkeypatch, settings):
    settings.PODIUM_HOST_NAME = "gpu-a"
    monkeypatch.setattr(machine, "_engine_id", lambda: "ONE")
    on_one = machine.machine_key()
    monkeypatch.setattr(machine, "_engine_id", lambda: "TWO")
    on_two = machine.machine_key()  # the same name, moved to another engine

    assert on_one != on_two
    assert machine_lease_acquire(host=on_one, holder="x", lease_s=60)
    assert not machine.builds_frozen("gpu-a")  # engine TWO is not held


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_two_host_names_on_the_real_engine_share_its_lock_and_its_freeze(
    quick_gates, containers, settings
):
    settings.PODIUM_LOCK_WAIT_S = 0
    settings.PODIUM_HOST_NAME = f"test-a-{uuid.uuid4().hex[:8]}"
    build = containers()  # any container on the engine: a build, say
    waited: list[str] = []

    with machine.hold(reschedule=waited.append) as session:
        assert state_of(build) == "paused"
        settings.PODIUM_HOST_NAME = f"test-b-{uuid.uuid4().hex[:8]}"  # same engine
        with pytest.raises(machine.MachineWaiting), machine.hold(reschedule=waited.append):
            pytest.fail("a second host name on the same engine scored beside the first")
        machine.reap()
        assert state_of(build) == "paused"  # neither its lock nor its reaper thawed it
        assert session.heartbeat.lock == machine.machine_key()

    assert waited == ["another score is using it"]
    assert state_of(build) == "running"
    assert not machine_held(machine.machine_key())


# Builds give way ----------------------------------------------------------------------


def test_a_build_cap_counts_only_unfrozen_time(monkeypatch):
    monkeypatch.setattr(engine, "BUILD_POLL_S", 0.05)

    def worker_thread() -> threading.Thread:
        thread = threading.Thread(target=time.sleep, args=(1.0,), daemon=True)
        thread.start()
        return thread

    # 1 s of work against a 0.6 s cap: too long, unless 0.7 s of it were frozen.
    assert not engine._join_within(worker_thread(), 0.6, lambda: False)
    started = time.monotonic()
    assert engine._join_within(worker_thread(), 0.6, lambda: time.monotonic() - started < 0.7)


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_no_environment_build_starts_while_a_score_holds_the_machine(
    alice, benchmark, host, lock, monkeypatch, settings
):
    environment = factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, status=Environment.QUEUED, image_tag=""
    )
    build_started: list[float] = []

    def build_image(**kw: Any) -> engine.BuildOutcome:
        build_started.append(time.monotonic())
        assert kw["bounds"].network == settings.PODIUM_BUILD_NETWORK  # confined, as ever
        return engine.BuildOutcome(ok=False, error="stopped by the test")

    monkeypatch.setattr(engine, "build_image", build_image)
    monkeypatch.setattr(machine, "LOCK_POLL_S", 0.05)
    assert machine_lease_acquire(host=lock, holder="a-score", lease_s=60)

    thread = in_thread(lambda: builds.build_environment(environment.pk))
    time.sleep(1.0)
    assert build_started == []  # claimed, but waiting for the score
    released = time.monotonic()
    machine_lease_release(host=lock, holder="a-score")
    thread.join(10)

    assert len(build_started) == 1 and build_started[0] >= released


# The freezer on the real engine -----------------------------------------------------


TICKING = ["sh", "-c", "while :; do sleep 0.05; done"]
FORGED = {"podium.build": "someone-else"}  # an entrant's LABEL overrides ours
LOOKS_SCORED = {"podium.run": "1"}  # an entrant's LABEL makes a build look like a score


@pytest.fixture
def containers() -> Iterator[Callable[..., str]]:
    """Create (and by default start) busybox containers that tick; all removed afterwards,
    paused or not."""
    made: list[str] = []

    def make(labels: dict[str, str] | None = None, *, name: str = "", start: bool = True) -> str:
        container_id = engine.create_container(
            image=BUSYBOX,
            entrypoint=[],
            command=TICKING,
            labels=labels or {},
            network_mode="none",  # the default bridge may be missing on a fresh machine
        )
        made.append(container_id)
        if name:  # how the deployment's own services get theirs (compose container_name)
            engine.client().api.rename(container_id, name)
        if start:
            engine.start(container_id)
        return container_id

    yield make
    for container_id in made:
        engine.remove_container(container_id)


@pytest.fixture
def freezer(host, lock, containers) -> Iterator[Callable[[], freezer_module.BuildFreezer]]:
    """Start this host's freezer; stopped (everything thawed) before the containers go."""
    started: list[freezer_module.BuildFreezer] = []

    def start() -> freezer_module.BuildFreezer:
        frozen = machine.BuildFreezer(lock)
        started.append(frozen)
        frozen.start()
        return frozen

    yield start
    for frozen in started:
        frozen.stop()


def state_of(container_id: str) -> str:
    state = engine.state(container_id)
    return "paused" if state["Paused"] else str(state["Status"])


def wait_state(container_id: str, wanted: str, timeout_s: float = 5.0) -> float:
    started = time.monotonic()
    while state_of(container_id) != wanted:
        assert time.monotonic() - started < timeout_s, f"{container_id[:12]} never {wanted}"
        time.sleep(0.01)
    return time.monotonic() - started


def events_handled(containers: Callable[..., str]) -> None:
    """Wait until the freezer has handled every start event so far: it handles them in
    order, so once a container started now is paused, every earlier one was decided."""
    wait_state(containers(), "paused")


def test_the_freeze_exempt_setting_is_a_set_of_names(settings):
    settings.PODIUM_FREEZE_EXEMPT = ["podium-db", " /podium-redis ", ""]
    assert freezer_module.freeze_exempt() == {"podium-db", "podium-redis"}
    settings.PODIUM_FREEZE_EXEMPT = "podium-db, podium-web,"  # the env var's form
    assert freezer_module.freeze_exempt() == {"podium-db", "podium-web"}
    settings.PODIUM_FREEZE_EXEMPT = []
    assert freezer_module.freeze_exempt() == frozenset()


@pytest.mark.docker
def test_the_freezer_pauses_every_container_whatever_its_labels(host, containers, freezer):
    ours = containers({"podium.build": host})
    forged = containers(FORGED)
    looks_scored = containers(LOOKS_SCORED)
    unlabelled = containers()

    frozen = freezer()
    try:
        for container_id in (ours, forged, looks_scored, unlabelled):
            assert state_of(container_id) == "paused"
        # Build steps starting mid-score, forged labels and all (the event path).
        late = [containers(FORGED), containers(LOOKS_SCORED), containers()]
        for container_id in late:
            assert wait_state(container_id, "paused") < 1.0
        engine.unpause(forged)  # anyone unpausing a container meanwhile is overruled
        wait_state(forged, "paused")
        assert {ours, forged, looks_scored, unlabelled, *late} <= frozen.paused
    finally:
        frozen.stop()
    for container_id in (ours, forged, looks_scored, unlabelled, *late):
        assert state_of(container_id) == "running"


@pytest.mark.docker
def test_the_scored_container_is_spared_and_never_paused(host, lock, containers, freezer):
    frozen = freezer()
    session = machine.Session(
        host,
        "me",
        {},
        machine.LockHeartbeat(lock=lock, holder="me", lease_s=60, on_lost=lambda run_id: None),
        frozen,
    )
    # What the runner does: create, spare, then start, after the freeze began. Labels
    # are the scored container's own, and spare nothing by themselves (see above).
    scored = containers(LOOKS_SCORED, start=False)
    session.spare(scored)
    engine.start(scored)
    events_handled(containers)

    for _ in range(20):
        assert state_of(scored) == "running"
        time.sleep(0.01)
    assert scored not in frozen.paused

    # A sweep after a broken event stream spares it too.
    frozen._sweep()
    assert state_of(scored) == "running"


@pytest.mark.docker
def test_the_deployments_own_containers_are_never_paused_nor_unpaused(
    host, containers, freezer, settings
):
    tag = uuid.uuid4().hex[:8]
    names = [f"podium-test-db-{tag}", f"podium-test-web-{tag}", f"podium-test-admin-{tag}"]
    settings.PODIUM_FREEZE_EXEMPT = ",".join(names)
    database = containers(FORGED, name=names[0])  # its labels do not matter either
    # Someone paused this service by hand: a thaw leaves it as it is.
    held_by_staff = containers(name=names[2])
    engine.pause(held_by_staff)
    # A container that claims an exempt name in a label is still paused: an event's
    # attributes carry its labels and its name side by side, the engine's name winning.
    impostor = containers({"name": names[1]})

    frozen = freezer()
    try:
        web = containers(name=names[1])  # restarted mid-score (the event path)
        late_impostor = containers({"name": names[0]})
        events_handled(containers)
        assert state_of(database) == "running" and state_of(web) == "running"
        assert state_of(impostor) == "paused" and state_of(late_impostor) == "paused"
        assert not {database, web} & frozen.paused
    finally:
        frozen.stop()
    assert state_of(impostor) == "running" and state_of(late_impostor) == "running"
    assert state_of(held_by_staff) == "paused"
    engine.unpause(held_by_staff)


@pytest.mark.docker
def test_a_broken_event_stream_is_watched_again(host, containers, freezer):
    frozen = freezer()
    broken = frozen._stream
    assert broken is not None
    broken.close()  # as when the engine drops the connection
    deadline = time.monotonic() + 5
    while frozen._stream is broken:
        assert time.monotonic() < deadline, "the freezer never subscribed again"
        time.sleep(0.01)

    assert wait_state(containers(FORGED), "paused") < 1.0


@pytest.mark.docker
def test_thaw_unpauses_what_a_dead_holder_left_paused(host, lock, containers, freezer):
    forged, looks_scored, unlabelled = containers(FORGED), containers(LOOKS_SCORED), containers()
    frozen = freezer()
    # Its worker dies: the watch ends, and nothing unpauses what it paused.
    frozen._closing.set()
    assert frozen._stream is not None and frozen._thread is not None
    frozen._stream.close()
    frozen._thread.join(10)
    for container_id in (forged, looks_scored, unlabelled):
        assert state_of(container_id) == "paused"

    assert machine.thaw(lock) >= 3

    for container_id in (forged, looks_scored, unlabelled):
        assert state_of(container_id) == "running"


@pytest.mark.docker
def test_a_build_sh_left_paused_by_a_dead_holder_resumes_by_itself(db, host, monkeypatch):
    monkeypatch.setattr(builds, "STRAY_PAUSE_S", 0.3)
    container_id = engine.create_container(
        image=BUSYBOX,
        entrypoint=[],
        command=["sh", "-c", "sleep 1; exit 3"],
        network_mode="none",
    )
    try:
        engine.start(container_id)
        engine.pause(container_id)  # and its freezer died: no lock is held

        assert builds._wait_unfrozen(container_id, 30, host) == 3
    finally:
        engine.remove_container(container_id)


@pytest.mark.docker
def test_the_reaper_frees_a_dead_holders_lock_and_unpauses_what_it_paused(
    db, host, lock, containers
):
    forged, looks_scored = containers(FORGED), containers(LOOKS_SCORED)
    engine.pause(forged)  # the dead holder's freezer paused them
    engine.pause(looks_scored)
    assert machine_lease_acquire(host=lock, holder="dead-scorer", lease_s=60)

    reaper.reap()
    assert state_of(forged) == "paused"  # still within its lease: hands off

    MachineLease.objects.filter(host=lock).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    reaper.reap()

    assert not machine_held(lock)
    assert MachineLease.objects.get(host=lock).holder == ""
    assert state_of(forged) == "running" and state_of(looks_scored) == "running"


def test_the_reaper_gives_builds_their_frozen_time(db, alice, benchmark, queued):
    benchmark.build_timeout_s = 1800
    benchmark.save()
    now = timezone.now()
    environment = factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, status=Environment.BUILDING, image_tag=""
    )
    # 40 minutes building against a 30-minute cap and 5 minutes' grace...
    Environment.objects.filter(pk=environment.pk).update(
        build_started_at=now - dt.timedelta(minutes=40)
    )
    # ...of which a score held the machine for 16 minutes.
    Run.objects.create(
        submission=queued,
        cohort=queued.benchmark.cohorts.get(),
        status=Run.FINISHED,
        started_at=now - dt.timedelta(minutes=30),
        finished_at=now - dt.timedelta(minutes=14),
    )

    reaper.reap(now)
    environment.refresh_from_db()
    assert environment.status == Environment.BUILDING

    reaper.reap(now + dt.timedelta(minutes=12))
    environment.refresh_from_db()
    assert environment.status == Environment.FAILED


# Two builds and a score together ----------------------------------------------------------

STAMPS = 250  # about 3 s of build work, stamping CLOCK_REALTIME every ~10 ms
# One static process on the small busybox base, no fork per stamp: the work takes about
# as long on a busy machine, and each layer commit stays short (on a large base they
# take seconds each with some storage drivers, which would swamp the build's own work).
STAMPER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 0;
    struct timespec pause = {0, 10 * 1000 * 1000}, now;
    for (int i = 0; i < count; i++) {
        clock_gettime(CLOCK_REALTIME, &now);
        printf("stamp %lld%09ld\n", (long long)now.tv_sec, now.tv_nsec);
        fflush(stdout);
        nanosleep(&pause, NULL);
    }
    return 0;
}
"""
STAMP_LOOP = f"stamp {STAMPS}"
# Answers right, and brackets its own work between two realtime stamps.
ENTRANT = r"""#!/bin/sh
echo "entrant-start $(date +%s%N)"
while read -r request_id path; do printf '\007\000\000\000'; done < "$1" > "$3"
sleep 16
echo "entrant-end $(date +%s%N)"
"""


def build_context(files: dict[str, tuple[bytes, int]]) -> io.BytesIO:
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    return context


def built_image(tag: str, base: str, name: str, data: bytes) -> Iterator[str]:
    """``base`` plus one executable file at ``/bin/<name>`` (or the entrant's ``run``)."""
    target = "/submission/run" if name == "run" else f"/bin/{name}"
    dockerfile = f"FROM {base}\nCOPY {name} {target}\n".encode()
    outcome = engine.build_image(
        context=build_context({"Dockerfile": (dockerfile, 0o644), name: (data, 0o755)}),
        tag=tag,
        on_log=lambda _: None,
        timeout_s=120,
    )
    assert outcome.ok, outcome.error
    yield tag
    engine.remove_image(tag)


@pytest.fixture
def entrant_image() -> Iterator[str]:
    tag = f"podium-test/machine-{uuid.uuid4().hex[:12]}:run"
    yield from built_image(tag, PYTHON_BASE, "run", ENTRANT.encode())


@pytest.fixture(scope="module")
def stamper_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """localhost/podium/busybox:1 with a static ``stamp N`` program (an allowed base)."""
    folder = tmp_path_factory.mktemp("stamper")
    (folder / "stamp.c").write_text(STAMPER_C)
    subprocess.run(
        ["cc", "-O2", "-static", "-o", str(folder / "stamp"), str(folder / "stamp.c")],
        check=True,
    )
    tag = f"localhost/podium/test-stamper-{uuid.uuid4().hex[:12]}:1"
    yield from built_image(tag, BUSYBOX, "stamp", (folder / "stamp").read_bytes())


def stamps(path: Path) -> list[int]:
    return [int(n) for n in re.findall(r"^stamp (\d{19})\s*$", path.read_text(), re.M)]


def image_labels(ref: str) -> dict[str, str]:
    return dict(engine.client().api.inspect_image(ref)["Config"]["Labels"] or {})


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_two_builds_and_a_score_together_no_build_runs_while_the_entrant_does(
    alice,
    bob,
    benchmark,
    host,
    lock,
    quick_gates,
    sent,
    settings,
    entrant_image,
    stamper_image,
    tmp_path,
):
    settings.PODIUM_LEASE_S = 3  # the heartbeat beats during the score too
    settings.PODIUM_SUPERVISOR = REPO / "scoring" / "supervisor" / "supervise"
    # Each build works ~3 s plus its own overhead (a few seconds more on a busy
    # machine): within 18 s. But the score holds the machine for over 16 s, so each
    # build takes longer than 18 s on the wall clock: counting frozen time would time
    # it out.
    benchmark.build_timeout_s = 18
    benchmark.cohort_size = 10
    benchmark.pass_min_matches = 10
    benchmark.score_timeout_s = 30
    benchmark.run_memory_bytes = 256 << 20
    benchmark.save()
    make_cohort(benchmark, [7] * 10)
    scored = make_submission(alice, benchmark, image_tag=entrant_image)

    marker = uuid.uuid4().hex  # no cached layer may skip the RUN
    environment = factories.EnvironmentFactory(
        owner=alice,
        benchmark=benchmark,
        status=Environment.QUEUED,
        image_tag="",
        dockerfile=f"FROM {stamper_image}\nRUN echo {marker} && {STAMP_LOOP}\n",
    )
    base = factories.EnvironmentFactory(
        owner=bob,
        benchmark=benchmark,
        image_tag=stamper_image,
        dockerfile=f"FROM {stamper_image}\n",
    )
    archive = tmp_path / "source.tar.gz"
    with tarfile.open(archive, mode="w:gz") as tar:
        for name, data, mode in (
            ("build.sh", f"{STAMP_LOOP}\n".encode(), 0o644),
            ("run", b"#!/bin/sh\nexit 0\n", 0o755),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    built = submission_accept(
        entrant=bob, benchmark=benchmark, environment=base, source_file=archive, source_name="s"
    )
    env_log = storage.environment_dir(environment.pk) / "build.log"
    sub_log = storage.submission_dir(built.pk) / "build.log"
    images: list[str] = []
    try:
        started = time.monotonic()
        finished: dict[str, float] = {}

        def timed(name: str, build: Callable[[int], None], pk: int) -> Callable[[], None]:
            def body() -> None:
                build(pk)
                finished[name] = time.monotonic()

            return body

        # The environment build reaches its RUN step later (a FROM and a LABEL step
        # first), so build.sh starts once it stamps: both are mid-work when the score
        # begins.
        deadline = time.monotonic() + 120

        def stamping(*logs: Path) -> None:
            while not all(log.exists() and len(stamps(log)) >= 15 for log in logs):
                assert time.monotonic() < deadline, "the builds never got going"
                time.sleep(0.05)

        threads = [in_thread(timed("environment", builds.build_environment, environment.pk))]
        stamping(env_log)
        threads.append(in_thread(timed("build.sh", builds.build_submission, built.pk)))
        stamping(env_log, sub_log)

        runner.score_submission(scored.pk)  # pauses both builds for its whole run

        for thread in threads:
            thread.join(120)
            assert not thread.is_alive()
        environment.refresh_from_db()
        built.refresh_from_db()
        images = [tag for tag in (environment.image_tag, built.image_tag) if tag]

        run = the_run(scored)
        assert run.verdict == "passed", run.verdict_reason
        log_text = (storage.run_dir(run.pk) / "run.log").read_text()
        start_match = re.search(r"entrant-start (\d{19})", log_text)
        end_match = re.search(r"entrant-end (\d{19})", log_text)
        assert start_match and end_match, log_text
        entrant_start, entrant_end = int(start_match[1]), int(end_match[1])
        assert entrant_end - entrant_start >= 16e9

        # Both builds finished within their 18 s cap although they took longer than that
        # on the wall clock: the time they were frozen did not count.
        assert environment.status == Environment.READY, environment.failure_reason
        assert built.status == Submission.QUEUED, built.failure_reason
        for log_path in (env_log, sub_log):
            build_stamps = stamps(log_path)
            assert len(build_stamps) == STAMPS
            during = [s for s in build_stamps if entrant_start <= s <= entrant_end]
            assert during == [], f"{log_path.parent.name}: a build ran while the entrant did"
            assert build_stamps[0] < entrant_start and build_stamps[-1] > entrant_end
        assert set(finished) == {"environment", "build.sh"}
        for name, finished_at in finished.items():
            assert finished_at - started > benchmark.build_timeout_s, name

        # Builds were found by what they are: nothing labels them, nor the images made.
        assert "podium.build" not in image_labels(environment.image_tag)
        assert "podium.build" not in image_labels(built.image_tag)
        assert not machine_held(lock)
    finally:
        for tag in images:
            engine.remove_image(tag)


def test_two_engines_that_report_one_id_get_two_locks(monkeypatch):
    """An engine of this generation derives its ID from its configuration folder's key:
    a second dockerd on one machine, or a machine cloned from one disk image, reports
    the same ID. The lock tells them apart by machine and data root too."""

    def engine_reporting(name: str, root: str) -> str:
        info = {"ID": "TROU:JR6G", "Name": name, "DockerRootDir": root}
        monkeypatch.setattr(engine, "info", lambda: info)
        machine._engine_id.cache_clear()
        return machine.machine_key()

    try:
        first = engine_reporting("vm", "/var/lib/docker")
        assert engine_reporting("vm", "/var/lib/docker") == first  # every client of it
        assert engine_reporting("vm", "/tmp/engine2/data") != first  # a second dockerd
        assert engine_reporting("vm-clone", "/var/lib/docker") != first  # a cloned machine
    finally:
        machine._engine_id.cache_clear()
