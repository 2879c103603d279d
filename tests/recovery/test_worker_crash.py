"""A scoring worker SIGKILLed in the middle of a run: the reaper recovers, once.

A real Celery scoring worker process (on the test database, a private broker and a
lease of 3 s) starts a real run whose entrant sleeps for 30 s; the test kills the
worker's whole process group once the run is ``running`` and then calls the reaper as
beat would (every minute in production; here until it acts).
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from django.conf import settings
from django.utils import timezone

from portal.core import jobs
from portal.hosts.models import MachineLease
from portal.submissions.models import AttemptLedger, Run, Submission
from scoring import engine
from scoring import worker as scoring_worker
from scoring.host import machine
from scoring.upkeep import reaper
from tests.e2e.conftest import database_url, worker_command
from tests.scoring.test_runner import FakeEngine
from tests.scoring.test_staging import make_cohort, make_submission

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
LEASE_S = 3


# Private brokers and real workers (also used by test_redis_restart) ----------------------


def filesystem_broker(folder: Path) -> tuple[str, dict[str, Any]]:
    """A filesystem broker of the test's own: nothing left by other tests reaches its worker."""
    for name in ("out", "processed"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    return "filesystem://", {
        "data_folder_in": str(folder / "out"),
        "data_folder_out": str(folder / "out"),
        "processed_folder": str(folder / "processed"),
        "store_processed": False,
    }


def sender(broker_url: str, transport_options: dict[str, Any] | None = None) -> Celery:
    """A Celery app that only sends, to ``broker_url``, with the portal's queue routes."""
    app = Celery("podium-test-sender", broker=broker_url)
    # Celery prefers a CELERY_BROKER_URL in the environment (CI sets one) over ``broker``;
    # the write URL is taken from the configuration first.
    app.conf.broker_write_url = broker_url
    app.conf.task_routes = settings.CELERY_TASK_ROUTES
    app.conf.broker_transport_options = transport_options or {}
    return app


def start_worker(
    *,
    queue: str,
    broker_url: str,
    data_dir: Path,
    host: str,
    log_path: Path,
    broker_dir: Path | None = None,
    concurrency: int = 1,
    extra_env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """A real Celery worker process in its own process group (so it can be killed whole)."""
    env = {
        **os.environ,
        **(extra_env or {}),
        "DATABASE_URL": database_url(),
        "PODIUM_DATA_DIR": str(data_dir),
        "CELERY_BROKER_URL": broker_url,
        "PODIUM_HOST_NAME": host,
        "PODIUM_LEASE_S": str(LEASE_S),
        "PODIUM_SUPERVISOR": str(REPO / "scoring" / "supervisor" / "supervise"),
        # The gates' decisions are tested elsewhere; a shared test machine may be busy.
        "PODIUM_GATE_CPU_BUSY_MAX": "1024",
        "PODIUM_GATE_CPU_SAMPLE_S": "0.1",
        "PODIUM_GATE_MIN_MEMORY_BYTES": "0",
        "PODIUM_GATE_MIN_DISK_BYTES": "0",
        "PODIUM_HOST_SPEED_PROBE": "0",
        "PYTHONUNBUFFERED": "1",
    }
    if broker_dir is not None:
        env["PODIUM_BROKER_DIR"] = str(broker_dir)
    return subprocess.Popen(
        worker_command(queue, concurrency),
        cwd=REPO,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_worker(process: subprocess.Popen[bytes], log_path: Path) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    if log_path.exists():  # shown by pytest when the test failed
        sys.stderr.write(f"--- {log_path.name} (tail) ---\n{log_path.read_text()[-4000:]}\n")


def poll(fetch: Any, done: Any, timeout_s: float, interval_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s; last value: {value!r}")
        time.sleep(interval_s)


# The test ----------------------------------------------------------------------------------


@pytest.fixture
def sleeper_image() -> Iterator[str]:
    """A submission image whose entrant sleeps 30 s."""
    tag = f"podium-test/crash-{uuid.uuid4().hex[:12]}:sleep"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data, mode in (
            ("Dockerfile", b"FROM localhost/podium/busybox:1\nCOPY run /submission/run\n", 0o644),
            ("run", b"#!/bin/sh\nsleep 30\n", 0o755),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    outcome = engine.build_image(context=context, tag=tag, on_log=lambda _: None, timeout_s=120)
    assert outcome.ok, outcome.error
    yield tag
    engine.remove_image(tag)


def run_containers(run_id: int, host: str) -> list[dict[str, Any]]:
    return engine.list_containers([f"podium.run={run_id}", f"podium.host={host}"])


def test_a_killed_scoring_worker_is_recovered_by_the_reaper_then_refunded_on_a_second_fault(
    alice, benchmark, data_dir, settings, sleeper_image, sent, monkeypatch
):
    host = f"test-crash-{uuid.uuid4().hex[:8]}"
    settings.PODIUM_HOST_NAME = host
    settings.PODIUM_LEASE_S = LEASE_S
    benchmark.cohort_size = 10
    benchmark.pass_min_matches = 10
    benchmark.score_timeout_s = 60
    benchmark.save()
    make_cohort(benchmark, [7] * 10)
    submission = make_submission(alice, benchmark, image_tag=sleeper_image)

    broker_dir = data_dir / "private-broker"
    broker_url, options = filesystem_broker(broker_dir)
    log_path = data_dir / "scoring-worker.log"
    worker = start_worker(
        queue=jobs.scoring_queue(benchmark.hardware_class_id),
        broker_url=broker_url,
        broker_dir=broker_dir,
        data_dir=data_dir,
        host=host,
        log_path=log_path,
    )
    run: Run | None = None
    try:
        sender(broker_url, options).send_task(
            jobs.SCORE_NEXT,
            args=(benchmark.hardware_class_id,),
            queue=jobs.scoring_queue(benchmark.hardware_class_id),
        )
        run = poll(
            lambda: Run.objects.filter(submission=submission, status=Run.RUNNING).first(),
            lambda found: found is not None,
            timeout_s=90,
        )
        assert run is not None
        poll(
            lambda: [c["State"] for c in run_containers(run.pk, host)],
            lambda states: states == ["running"],
            timeout_s=30,
        )
        lease = MachineLease.objects.filter(host=machine.machine_key())  # its engine's lock
        assert lease.get().holder  # the worker holds the machine

        os.killpg(worker.pid, signal.SIGKILL)  # the worker and its pool process, mid-run
        killed_at = time.monotonic()
        assert worker.wait(timeout=10) == -signal.SIGKILL
        [orphan] = run_containers(run.pk, host)
        assert orphan["State"] == "running"  # the entrant's container outlived its worker

        # Beat calls the reaper every minute; here it is called until it acts.
        def reaped() -> str:
            reaper.reap()
            return Run.objects.get(pk=run.pk).status

        poll(
            reaped,
            lambda status: status == Run.INFRA_FAILED,
            timeout_s=LEASE_S + 10,
            interval_s=0.25,
        )
        assert time.monotonic() - killed_at <= LEASE_S + 5

        run.refresh_from_db()
        submission.refresh_from_db()
        assert run_containers(run.pk, host) == []  # the orphan was killed and removed
        assert run.verdict == "" and run.verdict_reason == "the scoring worker stopped answering"
        assert submission.status == Submission.QUEUED  # requeued once, for try 2
        assert sent == [(jobs.SCORE_NEXT, (benchmark.hardware_class_id, 0))]  # a host woken again
        assert lease.get().holder == ""  # the dead holder's lock freed
        assert not AttemptLedger.objects.filter(
            submission=submission, delta=AttemptLedger.REFUND
        ).exists()
    finally:
        stop_worker(worker, log_path)
        if run is not None:
            for container in run_containers(run.pk, host):
                engine.remove_container(container["Id"])

    # Try 2 meets a second platform failure (the engine refuses to create the container):
    # the attempt is refunded, and no run of it ever got a verdict.
    settings.PODIUM_GATE_CPU_BUSY_MAX = 1024.0
    settings.PODIUM_GATE_CPU_SAMPLE_S = 0.1
    settings.PODIUM_SUPERVISOR = REPO / "scoring" / "supervisor" / "supervise"
    fake = FakeEngine().install(monkeypatch)
    fake.create_error = engine.EngineError("no space left on device")

    scoring_worker.score_next(benchmark.hardware_class_id)

    submission.refresh_from_db()
    runs = list(Run.objects.filter(submission=submission).order_by("try_number"))
    assert [(r.try_number, r.status, r.verdict) for r in runs] == [
        (1, Run.INFRA_FAILED, ""),
        (2, Run.INFRA_FAILED, ""),
    ]
    assert submission.status == Submission.INFRA_FAILED
    refunds = AttemptLedger.objects.filter(submission=submission, delta=AttemptLedger.REFUND)
    assert refunds.count() == 1
    # No third try: only the entrant's mail about the refund is queued.
    assert [name for name, _args in sent] == [jobs.SCORE_NEXT, jobs.SEND_VERDICT_MAIL]

    # A late reaper pass, or the dead worker's message redelivered, changes nothing.
    reaper.reap(timezone.now())
    scoring_worker.score_next(benchmark.hardware_class_id)
    assert Run.objects.filter(submission=submission).count() == 2
