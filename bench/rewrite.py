"""Benchmark: staging a verification run (shuffled, rewritten JPEGs) vs a scored run.

A verification run (rules "Verification before ranking") stages the cohort as
rewritten copies (``scoring.staging.stage(run, verification=True)``: one ``jpegtran``
per JPEG, on a thread pool) instead of hard links. Both are off the clock, but the
machine is held meanwhile, so the figure matters.

What it does, all on this machine and nothing of the developer's own data:

1. A throw-away ``PODIUM_DATA_DIR`` and SQLite database in a temp folder (migrated
   with ``call_command("migrate")``).
2. A generated demo cohort (``democohort.generate``, default 10,000 images) imported
   as the official cohort (``cohorts.cohort_import``), as ``bench/score_overhead.py``
   does.
3. ``--repeats`` stagings of each kind (scored first, then verification), each on a
   fresh Run and unstaged at once; then, after the last verification staging and off
   the timing, every staged image is decoded and compared with its cohort member
   (same mode, size and pixels; different bytes).
4. With ``--threads 1,2,4``, the verification staging again with each thread count
   (``staging`` uses two threads per CPU).

Needs ``jpegtran`` (Debian package ``libjpeg-turbo-progs``); no Docker. The temp
folder is removed at the end (``--keep`` keeps it). Exit status: 0 when every staging
worked and every image kept its pixels, 1 otherwise, 2 when jpegtran is missing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import resource
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

from score_overhead import setup_django

REPO = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10_000, help="cohort size (default 10000)")
    parser.add_argument("--repeats", type=int, default=3, help="stagings of each kind (3)")
    parser.add_argument("--seed", type=int, default=20260810, help="demo cohort seed")
    parser.add_argument(
        "--threads", default="", help="also time verification with these thread counts: 1,2,4"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp data folder")
    return parser.parse_args()


def make_cohort(images: int, seed: int, work: Path) -> Any:
    """A benchmark, its official demo cohort and one queued submission to run it for."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from portal.contests import cohorts, democohort
    from portal.contests.models import Benchmark, Cohort
    from portal.environments.models import Environment
    from portal.submissions.models import Submission

    now = timezone.now()
    benchmark = Benchmark.objects.create(
        slug="bench-rewrite",
        title="Verification staging",
        opens_at=now - dt.timedelta(days=1),
        closes_at=now + dt.timedelta(days=1),
        cohort_size=images,
        pass_min_matches=images,
    )
    entrant = get_user_model().objects.create(username="bench")
    environment = Environment.objects.create(
        owner=entrant,
        benchmark=benchmark,
        name="bench",
        status=Environment.READY,
        dockerfile="FROM scratch\n",
        image_tag="localhost/podium/bench:1",
    )
    submission = Submission.objects.create(
        entrant=entrant,
        benchmark=benchmark,
        environment=environment,
        status=Submission.QUEUED,
        submitted_at=now,
        source_name="bench.tar",
        source_format="tar",
        source_sha256="0" * 64,
        source_bytes=0,
        image_tag="localhost/podium/bench:1",
    )
    source = work / "generated"
    started = time.monotonic()
    members = democohort.generate(source, images, seed)
    print(f"generated {images} demo images in {time.monotonic() - started:.1f} s")
    started = time.monotonic()
    cohort = cohorts.cohort_import(
        benchmark=benchmark, kind=Cohort.OFFICIAL, images_dir=source, answers=members
    )
    print(f"imported the cohort in {time.monotonic() - started:.1f} s")
    shutil.rmtree(source)
    return submission, cohort


def stage_once(submission: Any, cohort: Any, *, verification: bool, keep: bool = False) -> Any:
    """One staging on a fresh Run: ``(seconds, staged)``; unstaged unless ``keep``."""
    from portal.submissions.models import Run
    from scoring import staging

    # A finished run per staging: stage() does not look at its status or purpose.
    try_number = Run.objects.filter(submission=submission).count() + 1
    run = Run.objects.create(
        submission=submission, cohort=cohort, try_number=try_number, status=Run.FINISHED
    )
    started = time.perf_counter()
    staged = staging.stage(run, verification=verification)
    seconds = time.perf_counter() - started
    if not keep:
        staging.unstage(staged)
    return seconds, staged


def check_pixels(staged: Any, cohort: Any) -> list[str]:
    """Every staged image against its cohort member (by the private mapping)."""
    from PIL import Image

    from portal import storage

    def decoded(path: Path) -> tuple[str, tuple[int, int], bytes]:
        with Image.open(io.BytesIO(path.read_bytes())) as image:
            return image.mode, image.size, image.tobytes()

    problems = []
    mapping = storage.run_private_dir(staged.run_id) / storage.RUN_MAPPING
    root = storage.cohort_dir(cohort.pk)
    for line in mapping.read_text().splitlines():
        _position, _request_id, name, canonical_name = line.split("\t")
        staged_path, member = staged.images_dir / name, root / canonical_name
        if staged_path.read_bytes() == member.read_bytes():
            problems.append(f"{canonical_name}: same bytes")
        elif decoded(staged_path) != decoded(member):
            problems.append(f"{canonical_name}: different pixels")
    return problems


def cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def row(label: str, seconds: list[float], images: int) -> str:
    median = statistics.median(seconds)
    runs = " ".join(f"{value:.3f}" for value in seconds)
    return f"{label:<34}{median:>9.3f}{median / images * 1e3:>13.4f}   {runs}"


def main() -> int:
    args = parse_args()
    print(
        "reproduce: cd "
        + shlex.quote(str(REPO))
        + " && .venv/bin/python bench/rewrite.py "
        + f"--images {args.images} --repeats {args.repeats} --seed {args.seed}"
        + (f" --threads {args.threads}" if args.threads else "")
        + "\n"
    )
    jpegtran = shutil.which("jpegtran")
    if jpegtran is None:
        print("jpegtran is missing: apt-get install libjpeg-turbo-progs", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="podium-bench-"))
    work.chmod(0o755)
    try:
        setup_django(work / "data")
        from scoring import staging

        submission, cohort = make_cohort(args.images, args.seed, work)
        threads = staging._rewrite_threads(args.images)
        print(f"CPUs {os.cpu_count()}, rewriting threads {threads}, {jpegtran}\n")
        stage_once(submission, cohort, verification=False)  # warm the page cache

        scored = [
            stage_once(submission, cohort, verification=False)[0] for _ in range(args.repeats)
        ]
        verified = []
        last: Any = None
        self_cpu, jpegtran_cpu = cpu_s(resource.RUSAGE_SELF), cpu_s(resource.RUSAGE_CHILDREN)
        for repeat in range(args.repeats):
            seconds, last = stage_once(
                submission, cohort, verification=True, keep=repeat == args.repeats - 1
            )
            verified.append(seconds)
        staged_images = args.repeats * args.images
        self_ms = (cpu_s(resource.RUSAGE_SELF) - self_cpu) / staged_images * 1e3
        jpegtran_ms = (cpu_s(resource.RUSAGE_CHILDREN) - jpegtran_cpu) / staged_images * 1e3
        print(f"{'staging (median of runs)':<34}{'seconds':>9}{'ms per image':>13}   runs")
        print(row("scored (hard links, fixed order)", scored, args.images))
        print(row(f"verification ({threads} threads)", verified, args.images))
        ratio = statistics.median(verified) / statistics.median(scored)
        print(
            f"\nverification / scored: {ratio:.0f}x;"
            f" the last verification's rewrite_ms {last.rewrite_ms:.0f}, "
            f"{last.rewritten} of {last.rows} members rewritten"
        )
        print(
            f"CPU per image in verification: {self_ms:.3f} ms in this process (its Python "
            f"runs one thread at a time), {jpegtran_ms:.3f} ms in jpegtran processes"
        )

        for count in [int(value) for value in args.threads.split(",") if value.strip()]:
            with mock.patch.object(staging, "_rewrite_threads", lambda _members, n=count: n):
                seconds = [
                    stage_once(submission, cohort, verification=True)[0]
                    for _ in range(args.repeats)
                ]
            print(row(f"verification ({count} threads)", seconds, args.images))

        started = time.monotonic()
        problems = check_pixels(last, cohort)
        print(
            f"\npixel check of the last verification staging ({time.monotonic() - started:.1f} s):"
            f" {args.images - len(problems)} of {args.images} images keep their pixels under"
            " new bytes"
        )
        for problem in problems[:10]:
            print(f"  {problem}")
        staging.unstage(last)
        return 1 if problems or last.rewritten != args.images else 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
