"""Benchmark: a scoring fleet on one queue: 1 host against 2, and dispatch latency.

Targets (issue "A scoring fleet"):

1. Throughput: 12 waiting submissions whose ``run`` mostly sleeps (so this machine's
   CPUs are not the limit) are scored by 1 host, then by 2 hosts of the same class on
   the same queue; 2 hosts finish at least 1.8x as fast.
2. Dispatch latency, from a submission entering ``queued`` (its wake-up sent) to its
   run's ``staging`` on an idle host: median at most 1 s, on PostgreSQL and Redis.

Each host is a real Celery scoring worker consuming ``scoring.<class>`` (a class of
this run's own, so nothing else reaches it) with its own Docker Engine: the first is
this machine's, the second a ``dockerd`` started here (own data root, exec root, pid
file and socket, no bridge); the submission image reaches it with ``docker save`` and
``load``. Needs root, Docker, PostgreSQL (``DATABASE_URL``, a throw-away database is
made on its server) and Redis (``CELERY_BROKER_URL``), as ``.ci/run`` provides.

    DATABASE_URL=postgres://... CELERY_BROKER_URL=redis://... \\
        .venv/bin/python bench/fleet.py [--submissions 12] [--sleep 5] [--latency 10]
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
ROWS = 10
CLASS = 7
TARGET_SPEEDUP = 1.8
TARGET_LATENCY_S = 1.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=12, help="queued runs (12)")
    parser.add_argument("--sleep", type=float, default=5.0, help="seconds each run sleeps (5)")
    parser.add_argument("--latency", type=int, default=10, help="latency samples (10)")
    parser.add_argument("--database", default="podium_bench_fleet", help="throw-away database")
    return parser.parse_args()


def admin(server_url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as connection:
        connection.execute(sql)


def setup(args: argparse.Namespace, work: Path) -> str:
    """A throw-away database on DATABASE_URL's server, migrated; Django set up on it."""
    url = os.environ.get("DATABASE_URL", "")
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres") or not os.environ.get(
        "CELERY_BROKER_URL", ""
    ).startswith("redis"):
        raise SystemExit("bench/fleet.py needs DATABASE_URL (PostgreSQL) and a Redis broker")
    server = urlunsplit(parts._replace(path="/postgres"))
    admin(server, f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
    admin(server, f'CREATE DATABASE "{args.database}"')
    database_url = urlunsplit(parts._replace(path=f"/{args.database}"))
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": database_url,
            "PODIUM_DATA_DIR": str(work / "data"),
            "PODIUM_LOCAL": "1",
            "LOG_LEVEL": "WARNING",
        }
    )
    sys.path.insert(0, str(REPO))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return server


def start_engine(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    root.mkdir(parents=True, exist_ok=True)
    (root / "daemon.json").write_text("{}")
    url = f"unix://{root / 'docker.sock'}"
    process = subprocess.Popen(
        [
            "dockerd", "--config-file", str(root / "daemon.json"),
            "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
            "--pidfile", str(root / "dockerd.pid"), "-H", url,
            "--bridge=none", "--iptables=false",
        ],
        stdout=(root / "dockerd.log").open("wb"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while subprocess.run(["docker", "-H", url, "version"], capture_output=True).returncode:
        if time.monotonic() > deadline:
            raise SystemExit("the second Docker Engine did not start")
        time.sleep(0.5)
    return process, url


def sleeper_image(sleep_s: float) -> str:
    from scoring import engine

    tag = f"podium-bench/fleet-{uuid.uuid4().hex[:8]}:sleep"
    answer = "".join("\\007\\000\\000\\000" for _ in range(ROWS))
    run = f"#!/bin/sh\nsleep {sleep_s}\nprintf '{answer}' > \"$3\"\n".encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data, mode in (
            ("Dockerfile", b"FROM localhost/podium/busybox:1\nCOPY run /submission/run\n", 0o644),
            ("run", run, 0o755),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    outcome = engine.build_image(context=buffer, tag=tag, on_log=lambda _: None, timeout_s=300)
    if not outcome.ok:
        raise SystemExit(f"could not build the sleeper image: {outcome.error}")
    return tag


def benchmark_with_cohort(hardware_class: str, images: Path) -> Any:
    from django.utils import timezone

    from portal.contests.cohorts import cohort_import
    from portal.contests.models import Benchmark, Cohort

    now = timezone.now()
    benchmark = Benchmark.objects.create(
        slug=f"fleet-{uuid.uuid4().hex[:6]}",
        title="Fleet benchmark",
        opens_at=now - dt.timedelta(days=1),
        closes_at=now + dt.timedelta(days=1),
        cohort_size=ROWS,
        pass_min_matches=ROWS,
        hardware_class=hardware_class,
        verify_top=0,
        score_timeout_s=120,
    )
    for index in range(ROWS):
        (images / f"{index}.bin").write_bytes(f"image {index}".encode())
    answers = [(f"{index}.bin", CLASS) for index in range(ROWS)]
    cohort_import(benchmark=benchmark, kind=Cohort.OFFICIAL, images_dir=images, answers=answers)
    return benchmark


def queue_submissions(benchmark: Any, image: str, count: int) -> list[int]:
    """``count`` entrants' submissions, queued and woken as a finished build does."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from portal.environments.models import Environment
    from portal.submissions.models import Submission
    from portal.submissions.services import score_enqueue

    ids = []
    for _ in range(count):
        entrant = get_user_model().objects.create(username=f"e-{uuid.uuid4().hex[:8]}")
        environment = Environment.objects.create(
            owner=entrant,
            benchmark=benchmark,
            name="sleeper",
            status=Environment.READY,
            dockerfile="FROM localhost/podium/busybox:1\n",
            image_tag=image,
        )
        submission = Submission.objects.create(
            entrant=entrant,
            benchmark=benchmark,
            environment=environment,
            status=Submission.QUEUED,
            submitted_at=timezone.now(),
            queued_at=timezone.now(),
            source_name="sleeper.tar",
            source_format="tar",
            source_sha256="0" * 64,
            source_bytes=0,
            image_tag=image,
        )
        score_enqueue(submission.pk, kind=submission.kind)
        ids.append(submission.pk)
    return ids


def start_worker(name: str, queue: str, hardware_class: str, log: Path, docker_host: str = ""):
    env = {
        **os.environ,
        "PODIUM_HOST_NAME": name,
        "PODIUM_HARDWARE_CLASS": hardware_class,
        "PODIUM_GATE_CPU_BUSY_MAX": "1024",
        "PODIUM_GATE_CPU_SAMPLE_S": "0.1",
        "PYTHONUNBUFFERED": "1",
    }
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    return subprocess.Popen(
        [
            sys.executable, "-m", "celery", "-A", "portal", "worker", "--queues", queue,
            "--concurrency", "1", "--hostname", f"{name}@%h", "--loglevel", "WARNING",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ],
        cwd=REPO,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def wait_final(ids: list[int], timeout_s: float) -> float:
    from portal.submissions.models import Submission

    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        statuses = set(Submission.objects.filter(pk__in=ids).values_list("status", flat=True))
        if statuses <= set(Submission.FINAL):
            if statuses != {Submission.PASSED}:
                raise SystemExit(f"runs ended {sorted(statuses)}, not all passed")
            return time.monotonic() - started
        time.sleep(0.2)
    raise SystemExit(f"the runs did not finish within {timeout_s} s")


def new_class(work: Path, label: str) -> Any:
    """A benchmark of a hardware class of its own (so only this phase's hosts serve it)."""
    folder = work / f"cohort-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    return benchmark_with_cohort(f"fleet-{label.replace(' ', '')}-{uuid.uuid4().hex[:6]}", folder)


def throughput(
    hosts: dict[str, str], benchmark: Any, image: str, args: argparse.Namespace, work: Path
) -> float:
    """Seconds for the fleet ``hosts`` (name -> DOCKER_HOST) to score the queue."""
    from portal import jobs

    queue = jobs.scoring_queue(benchmark.hardware_class)
    workers = [
        start_worker(name, queue, benchmark.hardware_class, work / f"{name}.log", url)
        for name, url in hosts.items()
    ]
    try:
        time.sleep(5)  # the workers start and register
        ids = queue_submissions(benchmark, image, args.submissions)
        return wait_final(ids, timeout_s=args.submissions * (args.sleep + 30))
    finally:
        for worker in workers:
            stop(worker)


def latency(benchmark: Any, image: str, args: argparse.Namespace, work: Path) -> list[float]:
    """Queued (wake-up sent) to staging on an idle host, one submission at a time."""
    from portal import jobs
    from portal.submissions.models import Run

    queue = jobs.scoring_queue(benchmark.hardware_class)
    worker = start_worker("solo", queue, benchmark.hardware_class, work / "solo.log")
    samples = []
    try:
        time.sleep(5)
        for _ in range(args.latency):
            sent = time.time()
            (submission_id,) = queue_submissions(benchmark, image, 1)
            while not Run.objects.filter(submission_id=submission_id).exists():
                time.sleep(0.01)
            started_at = Run.objects.values_list("started_at", flat=True).get(
                submission_id=submission_id
            )
            if started_at is None:
                raise SystemExit("a claimed run has no start time")
            samples.append(started_at.timestamp() - sent)
            wait_final([submission_id], timeout_s=args.sleep + 60)
    finally:
        stop(worker)
    return samples


def main() -> int:
    args = parse_args()
    print(
        f"reproduce: .venv/bin/python bench/fleet.py --submissions {args.submissions} "
        f"--sleep {args.sleep} --latency {args.latency}  (root; PostgreSQL and Redis)\n"
    )
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        print("needs root and dockerd (a second Docker Engine)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="podium-bench-fleet-"))
    work.chmod(0o755)
    server = setup(args, work)
    subprocess.run(["make", "-s", "scoring/supervisor/supervise"], cwd=REPO, check=True)
    os.environ["PODIUM_SUPERVISOR"] = str(REPO / "scoring" / "supervisor" / "supervise")
    engine2, url = start_engine(work / "engine2")
    image = ""
    try:
        from scoring import engine

        image = sleeper_image(args.sleep)
        saved = subprocess.run(["docker", "save", image], capture_output=True, check=True).stdout
        subprocess.run(["docker", "-H", url, "load"], input=saved, capture_output=True, check=True)
        fleets = {"1 host": {"one-a": ""}, "2 hosts": {"two-a": "", "two-b": url}}
        seconds = {
            label: throughput(hosts, new_class(work, label), image, args, work)
            for label, hosts in fleets.items()
        }
        samples = latency(new_class(work, "latency"), image, args, work)
    finally:
        if image:
            engine.remove_image(image)
        engine2.terminate()
        engine2.wait(timeout=60)
        from django.db import connections

        connections.close_all()
        admin(server, f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
        shutil.rmtree(work, ignore_errors=True)
    one, two = seconds["1 host"], seconds["2 hosts"]
    speedup = one / two
    median = statistics.median(samples)
    print(f"{args.submissions} runs sleeping {args.sleep:g} s each:")
    print(f"  1 host  {one:7.1f} s")
    print(
        f"  2 hosts {two:7.1f} s   speedup {speedup:.2f}x (target >= {TARGET_SPEEDUP}x): "
        f"{'PASS' if speedup >= TARGET_SPEEDUP else 'MISS'}"
    )
    print(
        f"dispatch latency, queued to staging on an idle host (PostgreSQL, Redis), "
        f"{len(samples)} samples: median {median:.3f} s, max {max(samples):.3f} s "
        f"(target median <= {TARGET_LATENCY_S:g} s): "
        f"{'PASS' if median <= TARGET_LATENCY_S else 'MISS'}"
    )
    return 0 if speedup >= TARGET_SPEEDUP and median <= TARGET_LATENCY_S else 1


if __name__ == "__main__":
    sys.exit(main())
