"""Benchmark: a scoring fleet on one queue, 1 host against 2 and 3, and dispatch latency,
with where every second went.

Targets:

1. Throughput: 12 waiting submissions whose ``run`` mostly sleeps (so this machine's
   CPUs are not the limit) are scored by 1 host, then by 2 and by 3 hosts of the same
   class on the same queue: 2 hosts at least 1.8x as fast as 1, 3 hosts at least 2.5x.
   Each configuration runs ``--repeat`` times (3); a speedup is claimed from the medians.
2. Dispatch latency, from a submission entering ``queued`` (its wake-up sent) to its
   run's ``staging`` on an idle host: p95 at most 1 s, on PostgreSQL and Redis.

Each host is a real Celery scoring worker consuming ``scoring.<class>`` (a class of
this configuration's own, so nothing else reaches it) with its own Docker Engine: the
first is this machine's, the others ``dockerd``s started here (own data root, exec root,
pid file and socket, no bridge); the submission image reaches them with ``docker save``
and ``load``. A fleet's clock starts once every host has registered and calibrated (what
a host does once, before it takes work); each run then reports its phases (the run's
``overhead_ms``: lock, freeze, gates, calibration, claim, pull, staging, create, collect,
compare, release; the timed run from the host's clock) and the bench adds the idle time
between runs, so the loss against the ideal (``ceil(runs / hosts) x sleep``) is split
into its parts and the three largest are printed.

Needs root, Docker, PostgreSQL (``DATABASE_URL``, a throw-away database is made on its
server) and Redis (``CELERY_BROKER_URL``), as ``.ci/run`` provides.

    DATABASE_URL=postgres://... CELERY_BROKER_URL=redis://... \\
        .venv/bin/python bench/fleet.py [--submissions 12] [--sleep 5] [--latency 10] \\
        [--repeat 3] [--hosts 1,2,3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import math
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
ROWS = 10
BASE_IMAGE = "localhost/podium/busybox:1"
CLASS = 7
TARGETS = {2: 1.8, 3: 2.5}  # hosts: the least speedup over 1 host
TARGET_P95_S = 1.0
# The phases a run's overhead_ms records before its claim, and after its verdict.
BEFORE_CLAIM = ("lock", "freeze", "gates", "calibration", "claim")
IN_RUN = ("pull", "staging", "create", "collect", "compare")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=12, help="queued runs (12)")
    parser.add_argument("--sleep", type=float, default=5.0, help="seconds each run sleeps (5)")
    parser.add_argument("--latency", type=int, default=10, help="latency samples a repeat (10)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each configuration (3)")
    parser.add_argument("--hosts", default="1,2,3", help="fleet sizes, 1 first (1,2,3)")
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
    from portal.contests.hardware import hardware_class_row
    from portal.contests.models import Benchmark, Cohort

    now = timezone.now()
    benchmark = Benchmark.objects.create(
        slug=f"fleet-{uuid.uuid4().hex[:6]}",
        title="Fleet benchmark",
        opens_at=now - dt.timedelta(days=1),
        closes_at=now + dt.timedelta(days=1),
        cohort_size=ROWS,
        pass_min_matches=ROWS,
        hardware_class=hardware_class_row(hardware_class),
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
    from portal.submissions.wakeups import score_enqueue

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


def start_worker(
    name: str, queue: str, hardware_class: str, log: Path, docker_host: str = ""
) -> subprocess.Popen[bytes]:
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


def wait_ready(names: list[str], workers: list[subprocess.Popen[bytes]]) -> float:
    """Wait until every host registered and needs no calibration (what a host does once,
    before it takes work); the seconds that took."""
    from django.utils import timezone

    from portal.hosts.models import ScoringHost
    from portal.hosts.selectors import calibration_due

    started = time.monotonic()
    while time.monotonic() - started < 300:
        if any(worker.poll() is not None for worker in workers):
            raise SystemExit("a scoring worker exited")
        registered = set(ScoringHost.objects.filter(name__in=names).values_list("name", flat=True))
        if registered == set(names) and not any(
            calibration_due(name, timezone.now()) for name in names
        ):
            return time.monotonic() - started
        time.sleep(0.2)
    from portal.hosts.models import HostCalibration

    errors = HostCalibration.objects.filter(host__name__in=names).values_list("reason", flat=True)
    raise SystemExit(f"the hosts did not register and calibrate within 300 s: {list(errors)}")


@dataclass
class RunPhases:
    """One run's timeline on its host (seconds; wall clock of the worker's machine)."""

    host: str
    hold_start: float  # the host began taking the machine for it
    claimed: float
    finished: float  # its verdict recorded
    released: float  # the machine given back
    phases: dict[str, float]  # seconds by phase


def run_phases(ids: list[int], sleep_s: float) -> list[RunPhases]:
    from portal.submissions.models import Run

    rows = []
    for run in Run.objects.filter(submission_id__in=ids, purpose=Run.SCORE).order_by("created_at"):
        ms = {key: float(value) for key, value in run.overhead_ms.items()}
        before = sum(ms.get(key, 0.0) for key in BEFORE_CLAIM) / 1e3
        claimed = run.created_at.timestamp()
        if run.finished_at is None:
            raise SystemExit(f"run {run.pk} has no end")
        finished = run.finished_at.timestamp()
        timed = ((run.host_end_ns or 0) - (run.host_start_ns or 0)) / 1e9
        phases = {key: ms.get(key, 0.0) / 1e3 for key in (*BEFORE_CLAIM, *IN_RUN)}
        phases["run past its sleep"] = timed - sleep_s
        known = sum(phases[key] for key in IN_RUN) + timed
        # claim to verdict, less what is named: marking it running, starting, recording.
        phases["start and record"] = (finished - claimed) - known
        phases["release"] = ms.get("release", 0.0) / 1e3
        rows.append(
            RunPhases(
                host=run.host,
                hold_start=claimed - before,
                claimed=claimed,
                finished=finished,
                released=finished + phases["release"],
                phases=phases,
            )
        )
    return rows


@dataclass
class Phase:
    """One fleet's pass over the queue: its makespan and the loss, by part."""

    hosts: int
    makespan: float
    ideal: float
    runs_per_host: dict[str, int]
    losses: dict[str, float]  # seconds, averaged over the hosts; they sum to the loss


def explain(rows: list[RunPhases], t0: float, hosts: list[str], sleep_s: float) -> Phase:
    end = max(row.released for row in rows)
    ideal = -(-len(rows) // len(hosts)) * sleep_s
    losses: dict[str, float] = {}

    def add(key: str, seconds: float) -> None:
        losses[key] = losses.get(key, 0.0) + seconds / len(hosts)

    for host in hosts:
        mine = sorted((row for row in rows if row.host == host), key=lambda row: row.hold_start)
        last = t0
        for index, row in enumerate(mine):
            add(
                "waiting for a wake-up" if index == 0 else "idle between runs",
                row.hold_start - last,
            )
            for key, seconds in row.phases.items():
                add(key, seconds)
            last = row.released
        add("waiting for the other hosts", end - last)
    # Runs not divisible among the hosts: the ideal counts whole rounds.
    add("whole rounds", (len(rows) * sleep_s) - ideal * len(hosts))
    return Phase(
        hosts=len(hosts),
        makespan=end - t0,
        ideal=ideal,
        runs_per_host={host: sum(row.host == host for row in rows) for host in hosts},
        losses=losses,
    )


def throughput(
    hosts: dict[str, str], benchmark: Any, image: str, args: argparse.Namespace, work: Path
) -> Phase:
    """The fleet ``hosts`` (name -> DOCKER_HOST) scoring the queue, explained."""
    from portal.core import jobs

    queue = jobs.scoring_queue(benchmark.hardware_class_id)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        # One after another: a calibration measures a machine at rest, and here the
        # hosts share this machine's CPUs (on a real fleet each has its own).
        for name, url in hosts.items():
            workers.append(
                start_worker(name, queue, benchmark.hardware_class_id, work / f"{name}.log", url)
            )
            wait_ready([name], workers[-1:])
        t0 = time.time()
        ids = queue_submissions(benchmark, image, args.submissions)
        wait_final(ids, timeout_s=args.submissions * (args.sleep + 30))
        return explain(run_phases(ids, args.sleep), t0, list(hosts), args.sleep)
    finally:
        for worker in workers:
            stop(worker)


@dataclass
class Dispatch:
    seconds: float
    path: dict[str, float]  # from the wake-up sent to staging


def latency(benchmark: Any, image: str, args: argparse.Namespace, work: Path) -> list[Dispatch]:
    """Queued (wake-up sent) to staging on an idle host, one submission at a time."""
    from portal.core import jobs
    from portal.submissions.models import Run

    queue = jobs.scoring_queue(benchmark.hardware_class_id)
    name = f"solo-{uuid.uuid4().hex[:4]}"
    worker = start_worker(name, queue, benchmark.hardware_class_id, work / f"{name}.log")
    samples = []
    try:
        wait_ready([name], [worker])
        for _ in range(args.latency):
            time.sleep(0.5)  # the host is idle: its last run given back
            sent = time.time()
            (submission_id,) = queue_submissions(benchmark, image, 1)
            wait_final([submission_id], timeout_s=args.sleep + 60)
            run = Run.objects.get(submission_id=submission_id, purpose=Run.SCORE)
            if run.started_at is None:
                raise SystemExit("a claimed run has no start time")
            ms = {key: float(value) / 1e3 for key, value in run.overhead_ms.items()}
            before = {key: ms.get(key, 0.0) for key in BEFORE_CLAIM}
            staging_at = run.started_at.timestamp()
            path = {"delivery": staging_at - sent - sum(before.values()), **before}
            samples.append(Dispatch(seconds=staging_at - sent, path=path))
    finally:
        stop(worker)
    return samples


def spread(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):6.1f} s (min {min(values):.1f}, max {max(values):.1f})"
    )


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def report(
    phases: dict[int, list[Phase]], samples: list[Dispatch], args: argparse.Namespace
) -> bool:
    ok = True
    print(f"\n{args.submissions} runs sleeping {args.sleep:g} s each, {args.repeat} times each:")
    base = statistics.median(p.makespan for p in phases[1])
    for hosts, runs in phases.items():
        median = statistics.median(p.makespan for p in runs)
        line = f"  {hosts} host{'s' if hosts > 1 else ' '} {spread([p.makespan for p in runs])}"
        line += f"  ideal {runs[0].ideal:.0f} s"
        if hosts in TARGETS:
            speedup = base / median
            speedups = [base / p.makespan for p in runs]
            good = speedup >= TARGETS[hosts]
            ok &= good
            line += (
                f"  speedup {speedup:.2f}x (each {', '.join(f'{x:.2f}' for x in speedups)};"
                f" target >= {TARGETS[hosts]}x): {'PASS' if good else 'MISS'}"
            )
        print(line)
    print(
        "\nwhere the time went, per host, seconds (median of the repeats; loss = makespan - ideal):"
    )
    for hosts, runs in phases.items():
        keys = sorted({key for p in runs for key in p.losses})
        medians = {key: statistics.median(p.losses.get(key, 0.0) for p in runs) for key in keys}
        loss = statistics.median(p.makespan - p.ideal for p in runs)
        print(
            f"  {hosts} host{'s' if hosts > 1 else ''}: loss {loss:.2f} s;"
            f" runs per host {', '.join(str(sorted(p.runs_per_host.values())) for p in runs)}"
        )
        for key in sorted(medians, key=lambda k: -abs(medians[k])):
            if abs(medians[key]) >= 0.005:
                print(f"    {key:28s} {medians[key]:7.2f}")
        top = sorted(medians, key=lambda k: -medians[k])[:3]
        print("    largest losses: " + "; ".join(f"{key} {medians[key]:.2f} s" for key in top))
    seconds = [sample.seconds for sample in samples]
    p95 = percentile(seconds, 0.95)
    good = p95 <= TARGET_P95_S
    ok &= good
    print(
        f"\ndispatch, queued to staging on an idle host (PostgreSQL, Redis), {len(samples)} "
        f"samples: median {statistics.median(seconds):.3f} s, p95 {p95:.3f} s, max "
        f"{max(seconds):.3f} s (target p95 <= {TARGET_P95_S:g} s): {'PASS' if good else 'MISS'}"
    )
    keys = list(samples[0].path)
    print("  sample " + " ".join(f"{key:>11s}" for key in keys) + "       total")
    for index, sample in enumerate(samples, 1):
        print(
            f"  {index:6d} "
            + " ".join(f"{sample.path[key]:11.3f}" for key in keys)
            + f" {sample.seconds:11.3f}"
        )
    return ok


def main() -> int:
    args = parse_args()
    sizes = sorted({int(part) for part in args.hosts.split(",")})
    if sizes[0] != 1:
        raise SystemExit("--hosts must include 1: speedups are against one host")
    print(
        f"reproduce: .venv/bin/python bench/fleet.py --submissions {args.submissions} "
        f"--sleep {args.sleep:g} --latency {args.latency} --repeat {args.repeat} "
        f"--hosts {args.hosts}  (root; PostgreSQL and Redis)\n"
    )
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        print("needs root and dockerd (more Docker Engines)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="podium-bench-fleet-"))
    work.chmod(0o755)
    server = setup(args, work)
    subprocess.run(["make", "-s", "scoring/supervisor/supervise"], cwd=REPO, check=True)
    os.environ["PODIUM_SUPERVISOR"] = str(REPO / "scoring" / "supervisor" / "supervise")
    engines = [start_engine(work / f"engine{index}") for index in range(2, max(sizes) + 1)]
    image = ""
    try:
        from scoring import engine

        image = sleeper_image(args.sleep)
        # Each engine holds what a host needs: the submission and the calibration image.
        calibration_image = os.environ.get("PODIUM_CALIBRATION_IMAGE", BASE_IMAGE)
        saved = subprocess.run(
            ["docker", "save", image, calibration_image], capture_output=True, check=True
        ).stdout
        urls = [""]
        for _, url in engines:
            subprocess.run(
                ["docker", "-H", url, "load"], input=saved, capture_output=True, check=True
            )
            urls.append(url)
        phases: dict[int, list[Phase]] = {size: [] for size in sizes}
        samples: list[Dispatch] = []
        for repeat in range(1, args.repeat + 1):
            for size in sizes:
                fleet = {f"h{size}-{repeat}-{index}": urls[index] for index in range(size)}
                phase = throughput(fleet, new_class(work, f"{size}h"), image, args, work)
                phases[size].append(phase)
                print(f"repeat {repeat}: {size} host(s) {phase.makespan:.1f} s", flush=True)
            samples += latency(new_class(work, "latency"), image, args, work)
    finally:
        if image:
            engine.remove_image(image)
        for process, _ in engines:
            process.terminate()
            process.wait(timeout=60)
        from django.db import connections

        connections.close_all()
        admin(server, f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
        shutil.rmtree(work, ignore_errors=True)
    return 0 if report(phases, samples, args) else 1


if __name__ == "__main__":
    sys.exit(main())
