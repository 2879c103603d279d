"""Benchmark: how much the host's own work moves a scored run's time, split CPUs or shared.

While a run is timed, the freezer pauses containers but not the host's processes: web
inspecting an uploaded archive, the build worker packing a build context. This bench
times the CPU-bound workload of ``bench/timing.py`` (a static C loop of about 0.4 s) in
the runner's sandbox (``scoring.run.runner.container_spec``, the supervisor's trusted
clock), once on a quiet host and once while ``--workers`` processes (default: one per
CPU of the machine) loop over what web and the build worker do with large
archives: ``podium_policy.archives.inspect_archive`` of a ``--archive-mib`` (64)
MiB ``tar.gz``, then packing its files into a new ``tar.gz``.

Two placements, interleaved run by run so that a change in the machine's background
load touches every column alike:

- **split**: this machine's ``PODIUM_SCORING_CPUS`` (portal/core/cpus.py): the container on
  the scoring CPUs, the archive workers pinned to the others, as web and the workers
  pin themselves. On a machine too small to split by default, ``auto`` gives no split;
  name the CPUs (``PODIUM_SCORING_CPUS=1`` on two) to measure one anyway.
- **shared**: every CPU for everyone (``PODIUM_SCORING_CPUS=shared``).

Per placement: the median of ``--runs`` (10) quiet and noisy runs and the median shift
``(noisy - quiet) / quiet``. Target: a split moves the median by at most 2 %. The
workers are stopped (SIGSTOP) during quiet runs and resumed for noisy ones; everything
(the workers, the images, the temp folder) is removed at the end, and the whole bench
stops after ``--max-s`` (300) seconds of runs.

Exit status: 0 when the split meets its target, 1 otherwise (or when there is no split
to measure), 2 when a prerequisite is missing (as ``bench/timing.py``).
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from timing import (
    BASE_IMAGE,
    WORKLOAD_C,
    Missing,
    Sandbox,
    build_supervisor,
    compile_static,
    setup_django,
)

REPRODUCE = "make supervisor base-images && .venv/bin/python bench/noise.py"
SHIFT_MAX = 0.02

# One archive worker: what web does with an upload, then what the build worker does
# with a context, over and over until killed. Its placement is set by the parent.
WORKER = """
import io, sys, tarfile
from pathlib import Path
from podium_policy.archives import inspect_archive
archive = Path(sys.argv[1])
while True:
    inspect_archive(archive, "tar.gz", require_entrypoint=False)
    with tarfile.open(archive) as source, tarfile.open(fileobj=io.BytesIO(), mode="w:gz") as out:
        for member in source:
            data = source.extractfile(member) if member.isfile() else None
            out.addfile(member, data)
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per column (default 10)")
    parser.add_argument(
        "--workers", type=int, default=0, help="archive workers (default: one per CPU)"
    )
    parser.add_argument("--archive-mib", type=int, default=64, help="archive size (64 MiB)")
    parser.add_argument("--max-s", type=float, default=300.0, help="stop after (300 s)")
    parser.add_argument(
        "--iterations", type=int, default=280_000_000, help="workload loop (about 0.4 s)"
    )
    return parser.parse_args()


def make_archive(folder: Path, mib: int) -> Path:
    """A ``tar.gz`` of ``mib`` files of 1 MiB each (text-like blocks, repeated)."""
    rng = random.Random(20261205)
    path = folder / "upload.tar.gz"
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789 \n"
    with tarfile.open(path, "w:gz") as tar:
        for index in range(mib):
            data = bytes(rng.choice(alphabet) for _ in range(4096)) * 256  # 1 MiB
            info = tarfile.TarInfo(f"model/part-{index:04d}.bin")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def median_shift(quiet: list[float], noisy: list[float]) -> float:
    return (statistics.median(noisy) - statistics.median(quiet)) / statistics.median(quiet)


def main() -> int:
    args = parse_args()
    # A stop (timeout, kill) still runs the clean-up below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"Reproduce: {REPRODUCE}")
    print(f"  options: {shlex.join(sys.argv[1:]) or '(defaults)'}")
    folder = Path(tempfile.mkdtemp(prefix="podium-noise-"))
    sandbox: Sandbox | None = None
    workers: list[subprocess.Popen[bytes]] = []
    try:
        setup_django(folder / "data")
        from portal.core import cpus
        from scoring import engine

        if not engine.available():
            raise Missing("no Docker Engine answers here")
        if not engine.image_exists(BASE_IMAGE):
            raise Missing(f"{BASE_IMAGE} is missing: run `make base-images`")
        isolation = cpus.configured()
        online = cpus.online_cpus()
        cpus.pin_off_scoring()  # this process waits, as the scoring worker does
        workload = compile_static(
            folder, "workload", WORKLOAD_C, f"-DITERATIONS={args.iterations}ULL"
        )
        box = sandbox = Sandbox(supervisor=build_supervisor(), folder=folder, images=[])
        image = box.image_of(workload)
        archive = make_archive(folder, args.archive_mib)
        count = args.workers or len(online)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        workers = [
            subprocess.Popen([sys.executable, "-c", WORKER, str(archive)], env=env)
            for _ in range(count)
        ]
        placements: dict[str, tuple[str, frozenset[int]]] = {"shared": ("", online)}
        if isolation.split:
            placements = {"split": (isolation.scoring_cpus, isolation.other), **placements}
        print(
            f"  {len(online)} CPUs; "
            + (
                f"split: runs on {isolation.scoring_cpus}, archive workers on "
                f"{isolation.other_cpus}"
                if isolation.split
                else f"no split ({isolation.reason})"
            )
            + f"; {count} archive worker(s), {args.archive_mib} MiB tar.gz; load average "
            f"{os.getloadavg()[0]:.2f}"
        )

        def pause(stopped: bool) -> None:
            for worker in workers:
                worker.send_signal(signal.SIGSTOP if stopped else signal.SIGCONT)

        def timed(cpuset: str) -> float:
            return box.run(image, scoring_cpus=cpuset) / 1e9

        pause(False)
        time.sleep(2)  # the workers are busy (imports done, first inspection started)
        for cpuset, _ in placements.values():
            timed(cpuset)  # warm-up
        results: dict[str, dict[str, list[float]]] = {
            name: {"quiet": [], "noisy": []} for name in placements
        }
        started = time.monotonic()
        for _ in range(args.runs):
            if time.monotonic() - started > args.max_s:
                print(f"  stopped after {args.max_s:g} s of runs")
                break
            for name, (cpuset, worker_cpus) in placements.items():
                for worker in workers:
                    os.sched_setaffinity(worker.pid, worker_cpus)
                pause(True)
                results[name]["quiet"].append(timed(cpuset))
                pause(False)
                results[name]["noisy"].append(timed(cpuset))
        elapsed = time.monotonic() - started
    except Missing as missing:
        print(f"cannot run: {missing}")
        return 2
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
        if sandbox is not None:
            for tag in sandbox.images:
                engine.remove_image(tag)
        shutil.rmtree(folder, ignore_errors=True)

    print()
    print(f"  {'placement':<10} {'quiet median':>13} {'noisy median':>13} {'shift':>8}")
    shifts: dict[str, float] = {}
    for name, columns in results.items():
        if not columns["quiet"]:
            continue
        shifts[name] = median_shift(columns["quiet"], columns["noisy"])
        print(
            f"  {name:<10} {statistics.median(columns['quiet']) * 1e3:>10.1f} ms "
            f"{statistics.median(columns['noisy']) * 1e3:>10.1f} ms {shifts[name]:>+8.2%}"
        )
    print()
    for name, columns in results.items():
        for column, values in columns.items():
            runs = " ".join(f"{value * 1e3:.1f}" for value in values)
            print(f"  {name} {column} (ms): {runs}")
    print(f"  measured in {elapsed:.1f} s; load average now {os.getloadavg()[0]:.2f}")
    if "split" not in shifts:
        print("  no split to judge: name the scoring CPUs (PODIUM_SCORING_CPUS) to measure one")
        return 1
    ok = abs(shifts["split"]) <= SHIFT_MAX
    print(
        f"  split: median shift {shifts['split']:+.2%}, target <= {SHIFT_MAX:.0%}: "
        f"{'PASS' if ok else 'MISS'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
