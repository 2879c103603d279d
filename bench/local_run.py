"""Benchmark: the starter kit's local run (``podium run --local``) against its practice run
on the portal, ``--runs`` (5) of each, interleaved.

Everything on this machine, nothing of the developer's own data:

1. A throw-away ``PODIUM_DATA_DIR`` with an SQLite database and the filesystem broker,
   migrated; an open benchmark of this machine's hardware class with a generated
   practice cohort of ``--images`` (200) demo images; an entrant with a token.
2. The portal as ``make run`` starts it: the web server (``manage.py runserver``), a
   builds worker and a scoring worker, the scoring worker calibrating its host first
   (so the class has a noise band) unless ``--no-calibration``.
3. The kit's environment built through the portal (``podium env create``), then, in
   turn, ``podium run --local`` and a practice submission (``podium submit --practice``
   followed by ``podium watch``), ``--runs`` times each.

It prints each wall time, the medians of both, the local median's distance from the
portal's in percent, and whether that distance lies within the class's noise band (the
band the portal publishes from its calibrations). The machine is shared and its load
moves: read the figures as such. A local run on this machine is a scoring host without
its freeze and CPU split, so it is expected to be no faster.

    .venv/bin/python bench/local_run.py [--runs 5] [--images 200] [--no-calibration]

Exit status: 0 when every run passed and the medians lie within the band, 1 otherwise,
2 when a prerequisite (Docker, the base image, the supervisor) is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KIT = REPO / "examples" / "starter-kit"
SLUG = "ladder-bench"
WALL = re.compile(r"wall time [\d.]+ ms \((\d+) ns\)")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each kind (default 5)")
    parser.add_argument("--images", type=int, default=200, help="practice images (default 200)")
    parser.add_argument("--seed", type=int, default=31, help="the practice cohort's seed")
    parser.add_argument(
        "--no-calibration", action="store_true", help="no calibration, so no noise band"
    )
    parser.add_argument(
        "--build-network", default="none", help="network of the local build (default: none)"
    )
    return parser.parse_args()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def setup(work: Path, args: argparse.Namespace) -> tuple[dict[str, str], str]:
    """The throw-away site: its environment variables, and an entrant's token."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PODIUM_LOCAL": "1",  # a development site on this machine (make run's setting)
        "PODIUM_DATA_DIR": str(work / "data"),
        "DATABASE_URL": f"sqlite:///{work / 'bench.sqlite3'}",
        "CELERY_BROKER_URL": "filesystem://",
        "PODIUM_CALIBRATION": "0" if args.no_calibration else "1",
        "PODIUM_GATE_CPU_BUSY_MAX": "1024",  # a shared machine: never wait for idle CPUs
        "PODIUM_HOST_NAME": "bench-host",
        "PYTHONUNBUFFERED": "1",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(REPO),
    }
    env.pop("PODIUM_CACHE_URL", None)  # the cache beside the data, not a shared Redis
    if "PODIUM_BUILD_EGRESS_ALLOW" not in env:
        # The build network's rules are one per machine: ask for the allow-list `make run`
        # and `make test` ask for, or the builds wait for rules that differ.
        env["PODIUM_BUILD_EGRESS_ALLOW"] = subprocess.run(
            [str(REPO / "scripts" / "mirror-allowlist")],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    os.environ.update(env)
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from allauth.account.models import EmailAddress
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from portal.accounts.models import ApiToken
    from portal.contests.cohorts import cohort_import
    from portal.contests.democohort import generate
    from portal.contests.hardware import hardware_class_row
    from portal.contests.models import Benchmark

    call_command("migrate", verbosity=0)
    from django.conf import settings

    hardware_class_row(settings.PODIUM_HARDWARE_CLASS)
    now = timezone.now()
    benchmark = Benchmark.objects.create(
        slug=SLUG,
        title="Local run bench",
        opens_at=now - dt.timedelta(minutes=1),
        closes_at=now + dt.timedelta(days=1),
        cohort_size=args.images,
        pass_min_matches=args.images - 1,
        practice_per_day=args.runs + 5,
        hardware_class_id=settings.PODIUM_HARDWARE_CLASS,
        allowed_registries="localhost/podium/\n",
    )
    images = work / "practice"
    answers = generate(images, args.images, seed=args.seed)
    cohort_import(benchmark=benchmark, kind="practice", images_dir=images, answers=answers)
    user = get_user_model().objects.create_user("bench", "bench@example.invalid", "bench-pass")
    EmailAddress.objects.create(user=user, email=user.email, verified=True, primary=True)
    token = ApiToken.objects.create(user=user, label="bench")
    return env, token.key


@contextlib.contextmanager
def portal(env: dict[str, str], work: Path) -> Iterator[str]:
    """Web, a builds worker and a scoring worker, stopped on exit."""
    from django.conf import settings

    from portal.core import jobs

    port = free_port()
    python = sys.executable
    commands = {
        "web": [python, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        "builds": [python, "-m", "celery", "-A", "portal", "worker", "--queues", "builds",
                   "--concurrency", "2", "--hostname", "builds@bench", "--loglevel", "WARNING"],
        "scoring": [python, "-m", "celery", "-A", "portal", "worker", "--queues",
                    jobs.scoring_queue(settings.PODIUM_HARDWARE_CLASS), "--concurrency", "1",
                    "--hostname", "scoring@bench", "--loglevel", "WARNING"],
    }  # fmt: skip
    processes = []
    try:
        for name, command in commands.items():
            log = (work / f"{name}.log").open("wb")
            processes.append(
                subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
            )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.5)
        yield url
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def podium(*argv: str) -> tuple[int, str]:
    """``podium ARGV...`` in this process; its exit code and what it printed."""
    from podium_cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(argv))
    return code, out.getvalue()


def wall_ns(text: str) -> int | None:
    found = WALL.findall(text)
    return int(found[-1]) if found else None


def wait_ready(slug: str, environment: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _, listed = podium("env", "list", slug)
        for row in listed.splitlines()[1:]:
            cells = row.split()
            if cells and cells[0] == environment and cells[2] not in ("queued", "building"):
                return cells[2]
        time.sleep(2)
    return "timed out"


def main() -> int:
    args = parse_args()
    if shutil.which("docker") is None:
        print("missing: the docker command line", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="podium-bench-local-"))
    work.chmod(0o755)
    try:
        env, token = setup(work, args)
        from django.conf import settings

        if not Path(settings.PODIUM_SUPERVISOR).is_file():
            print("missing: the supervisor (make supervisor)", file=sys.stderr)
            return 2
        with portal(env, work) as url:
            os.environ["PODIUM_URL"], os.environ["PODIUM_TOKEN"] = url, token
            os.environ["PODIUM_CONFIG_DIR"] = str(work / "config")
            return measure(args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(args: argparse.Namespace) -> int:
    code, created = podium("env", "create", SLUG, str(KIT / "Dockerfile"), "--name", "kit")
    match = re.match(r"Environment (\d+)", created)
    if code != 0 or not match:
        print(created)
        return 1
    status = wait_ready(SLUG, match.group(1), 900)
    if status != "ready":
        print(f"the kit's environment ended {status}")
        return 1
    local: list[int] = []
    practice: list[int] = []
    failures = 0
    for number in range(1, args.runs + 1):
        code, text = podium("run", "--local", SLUG, str(KIT), "--build-network", args.build_network)
        ns = wall_ns(text)
        print(f"local    #{number}: {'passed' if code == 0 else 'NOT PASSED'}, {ns} ns")
        if code == 0 and ns is not None:
            local.append(ns)
        else:
            failures += 1
            print(text[-2000:])
        code, text = podium("submit", SLUG, "--env", match.group(1), "--practice", str(KIT))
        submission = re.search(r"^Submission (\d+)", text, re.MULTILINE)
        if submission is None:
            failures += 1
            print(text)
            continue
        code, text = podium("watch", submission.group(1), "--interval", "1", "--no-logs")
        ns = wall_ns(text)
        print(f"practice #{number}: {'passed' if code == 0 else 'NOT PASSED'}, {ns} ns")
        if code == 0 and ns is not None:
            practice.append(ns)
        else:
            failures += 1
            print(text[-2000:])
    return report(local, practice, failures)


def report(local: list[int], practice: list[int], failures: int) -> int:
    from podium_cli.api import Client

    detail: dict[str, Any] = Client(os.environ["PODIUM_URL"]).get_json(f"/benchmarks/{SLUG}/")
    band = (detail.get("noise_band") or {}).get("percent")
    if not local or not practice:
        print("no passing runs to compare")
        return 1
    local_ms = statistics.median(local) / 1e6
    practice_ms = statistics.median(practice) / 1e6
    distance = (local_ms - practice_ms) / practice_ms * 100
    print(f"median local    {local_ms:10.3f} ms over {len(local)} runs")
    print(f"median practice {practice_ms:10.3f} ms over {len(practice)} runs")
    print(f"local - practice: {distance:+.1f}% of the practice median")
    if band is None:
        print("the class has no noise band (no calibration): nothing to compare with")
        return 1
    within = abs(distance) <= band
    print(
        f"the class's noise band: ±{band}%; the medians are {'within' if within else 'OUTSIDE'} it"
    )
    return 0 if within and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
