"""Benchmark: a log tail through the whole Django stack, against coreutils ``tail``.

Target: ``GET /api/v1/submissions/{id}/run-log?tail=2000`` on a 1 GiB run log takes at
most 2x what ``tail -n 2000`` takes on the same file (median of ``--runs`` each).

What it does, all on this machine and nothing of the developer's own data:

1. A throw-away ``PODIUM_DATA_DIR`` with its own SQLite database in a temp folder
   (``--dir`` picks the parent folder), migrated with ``call_command("migrate")``.
2. An entrant with a token, an open benchmark, a ready environment and a submission with
   one run, accepted through ``submission_accept`` (tasks are dropped, no broker is used).
3. The run's ``run.log``: ``--size-mib`` (default 1024) of realistic log lines of varied
   length (training steps, warnings, a traceback now and then), written by repeating a
   generated 4 MiB block.
4. ``--runs`` timed requests through Django's test ``Client`` (URL routing, middleware,
   token authentication, the view, ``storage.read_tail``; the response body read in
   full), each followed by one timed ``tail -n 2000`` process with its output read
   (alternating, so both see the same load), after three warm-up rounds; the two
   medians, their ratio and PASS/FAIL.

The temp folder, the 1 GiB log included, is removed at the end.

Run: ``.venv/bin/python bench/logtail.py`` (options: ``--runs 25 --size-mib 1024 --dir /tmp``).
Exit status: 0 when the target is met, 1 when missed, 2 when ``tail`` is missing.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET_RATIO = 2.0
TAIL_LINES = 2000
BLOCK_BYTES = 4 * 1024 * 1024


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25, help="timed calls of each (default 25)")
    parser.add_argument("--size-mib", type=int, default=1024, help="log size (default 1024)")
    parser.add_argument("--dir", default=None, help="parent of the temp folder (default: TMPDIR)")
    parser.add_argument("--seed", type=int, default=20260810)
    return parser.parse_args()


def setup_django(data_dir: Path) -> None:
    """Point Podium at the temp folder (before settings load) and migrate a fresh DB."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    os.environ["PODIUM_DATA_DIR"] = str(data_dir)
    os.environ["DATABASE_URL"] = f"sqlite:///{data_dir / 'bench.sqlite3'}"
    sys.path.insert(0, str(REPO))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def log_block(seed: int) -> bytes:
    """About 4 MiB of lines that look like an entrant's stdout and stderr."""
    rng = random.Random(seed)
    lines: list[str] = []
    size = 0
    step = 0
    while size < BLOCK_BYTES:
        step += 1
        roll = rng.random()
        if roll < 0.80:
            line = (
                f"step {step:>7} | batch {rng.randrange(4096):>4} | loss {rng.random():.6f} | "
                f"{rng.randrange(200, 4000)} img/s"
            )
        elif roll < 0.93:
            line = (
                f"INFO loaded {rng.randrange(10**6)} images from /contest/input/{rng.random():.8f}"
            )
        elif roll < 0.99:
            detail = " ".join(
                rng.choice(["cache", "miss", "slow", "retry", "gpu"]) for _ in range(8)
            )
            line = f"WARNING {detail} " + "." * rng.randrange(0, 300)
        else:
            line = "Traceback (most recent call last):\n" + "\n".join(
                f'  File "/submission/model.py", line {rng.randrange(900)}, in forward'
                for _ in range(rng.randrange(3, 12))
            )
        lines.append(line)
        size += len(line) + 1
    return ("\n".join(lines) + "\n").encode()


def write_log(path: Path, size_bytes: int, seed: int) -> None:
    block = log_block(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        written = 0
        while written + len(block) <= size_bytes:
            handle.write(block)
            written += len(block)
        handle.write(block[: block.rfind(b"\n", 0, size_bytes - written) + 1])


def make_world(data_dir: Path) -> tuple[str, int, Path]:
    """An entrant's token, a submission with one run, and that run's log path."""
    import datetime as dt

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from portal.accounts.models import ApiToken
    from portal.contests.hardware import hardware_class_row
    from portal.contests.models import Benchmark, Cohort
    from portal.core import storage
    from portal.core.celery import app as celery_app
    from portal.environments.models import Environment
    from portal.submissions.intake import submission_accept
    from portal.submissions.models import Run, Submission

    celery_app.send_task = lambda *args, **kwargs: None  # type: ignore[method-assign,assignment]
    now = timezone.now()
    user = get_user_model().objects.create_user("bench")  # token only, no password
    benchmark = Benchmark.objects.create(
        hardware_class=hardware_class_row(Benchmark.DEFAULT_HARDWARE_CLASS),
        slug="bench-logtail",
        title="Log tail",
        opens_at=now - dt.timedelta(days=1),
        closes_at=now + dt.timedelta(days=10),
        allowed_registries="localhost/podium/\n",
    )
    environment = Environment.objects.create(
        owner=user,
        benchmark=benchmark,
        name="bench",
        status=Environment.READY,
        dockerfile="FROM localhost/podium/busybox:1\n",
        image_tag="localhost/podium/busybox:1",
        image_digest="sha256:" + "e" * 64,
    )
    archive = data_dir / "source.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data, mode in [("run", b"#!/bin/sh\n", 0o755), ("build.sh", b"true\n", 0o644)]:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    submission = submission_accept(
        entrant=user,
        benchmark=benchmark,
        environment=environment,
        source_file=archive,
        source_name="source.tar.gz",
        kind=Submission.OFFICIAL,
    )
    cohort = Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    run = Run.objects.create(submission=submission, cohort=cohort, try_number=1)
    token = ApiToken.objects.create(user=user, label="bench")
    return token.key, submission.pk, storage.run_log(run.pk)


def time_both(token: str, submission_id: int, path: Path, runs: int) -> dict[str, Any]:
    """Alternate one API call and one ``tail`` process, so both see the same machine load."""
    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    url = f"/api/v1/submissions/{submission_id}/run-log?tail={TAIL_LINES}"
    command = ["tail", "-n", str(TAIL_LINES), str(path)]
    api_times: list[float] = []
    tail_times: list[float] = []
    body = output = b""
    for index in range(runs + 3):
        started = time.perf_counter()
        response = client.get(url)
        body = response.content
        api_elapsed = time.perf_counter() - started
        if response.status_code != 200:
            raise SystemExit(f"GET {url} answered {response.status_code}: {body[:200]!r}")
        started = time.perf_counter()
        output = subprocess.run(command, check=True, capture_output=True).stdout
        tail_elapsed = time.perf_counter() - started
        if index >= 3:  # the first three warm caches up
            api_times.append(api_elapsed)
            tail_times.append(tail_elapsed)
    return {"api": api_times, "tail": tail_times, "body": body, "expected": output}


def main() -> int:
    args = parse_args()
    if shutil.which("tail") is None:
        print("coreutils tail is not installed", file=sys.stderr)
        return 2
    temp = Path(tempfile.mkdtemp(prefix="podium-logtail-", dir=args.dir))
    try:
        data_dir = temp / "data"
        data_dir.mkdir()
        setup_django(data_dir)
        token, submission_id, log = make_world(data_dir)
        started = time.perf_counter()
        write_log(log, args.size_mib * 1024 * 1024, args.seed)
        size = log.stat().st_size
        print(f"wrote {size / 2**30:.2f} GiB of log in {time.perf_counter() - started:.1f} s")

        timed = time_both(token, submission_id, log, args.runs)
        django_times, tail_times, body = timed["api"], timed["tail"], timed["body"]
        if body.splitlines() != timed["expected"].splitlines():
            print("the API's tail differs from tail -n's", file=sys.stderr)
            return 1

        from portal.core.storage import read_tail

        read_times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            read_tail(log, TAIL_LINES)
            read_times.append(time.perf_counter() - started)
        read_ms = statistics.median(read_times) * 1000
        api_ms = statistics.median(django_times) * 1000
        tail_ms = statistics.median(tail_times) * 1000
        ratio = api_ms / tail_ms
        verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
        print(
            f"{TAIL_LINES} lines ({len(body)} bytes) of a {size / 2**30:.2f} GiB log, "
            f"median of {args.runs}:"
        )
        print(f"  GET run-log?tail={TAIL_LINES} (Django stack)  {api_ms:8.2f} ms")
        print(f"  tail -n {TAIL_LINES} (coreutils process)    {tail_ms:8.2f} ms")
        print(f"  of the GET: storage.read_tail alone        {read_ms:8.2f} ms")
        print(f"  ratio {ratio:.2f}x (target <= {TARGET_RATIO:.0f}x): {verdict}")
        return 0 if verdict == "PASS" else 1
    finally:
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
