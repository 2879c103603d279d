"""Benchmark: the warm start, what it costs and what it buys.

Before its clock the supervisor reads every file of the scoring container that the
entrant may read (``supervise.c``, ``prewarm_walk``; docs/rules.md, "The warm start").
This prints, on this machine's storage, with the host's page cache dropped before every
run (``/proc/sys/vm/drop_caches``: root only; without it the figures are of a warm host,
and say so):

- the walk's time per GiB of image files (an image with one ``--image-mib`` (512) MiB
  file of random bytes) and per thousand small files (``--small-files`` (20,000) files
  of 4 KiB), next to the floor rates the runner sizes the walk's time bound from
  (``scoring.run.prewarm``);
- the entrant's first-read / second-read time ratio of the large file inside a run, with
  the warm start and without it (``--prewarm-bytes 0``).

Each run goes through the runner's own sandbox (``scoring.run.runner.container_spec``
with a default Benchmark's limits and 16 GiB of memory, the engine module, and
``parse_supervisor_line``), ``--runs`` (3) times each, alternating. The images and every
container are removed at the end.

Exit status: 0 when, with the warm start, the median ratio is at most 2 (the first read
as warm as the second) and the walk is faster than the floor rates; 1 otherwise; 2 when
a prerequisite (a C compiler, Docker, ``localhost/podium/busybox:1``) is missing.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import uuid
from pathlib import Path
from typing import Any

from meter import staged_run
from timing import Missing, build_supervisor, compile_static, setup_django

BASE_IMAGE = "localhost/podium/busybox:1"
REPRODUCE = "make supervisor base-images && .venv/bin/python bench/prewarm.py"
GIB = 1 << 30
BIG_FILE = "data/big"

# The entrant: times its first and second read of the large file (1 MiB at a time).
READER_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static char buf[1 << 20];
static long long read_ns(const char *path)
{
    struct timespec a, b;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    clock_gettime(CLOCK_MONOTONIC, &a);
    while (read(fd, buf, sizeof buf) > 0)
        ;
    clock_gettime(CLOCK_MONOTONIC, &b);
    close(fd);
    return (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
}
int main(void)
{
    long long first = read_ns("/" BIG_FILE), second = read_ns("/" BIG_FILE);
    printf("first_ns=%lld second_ns=%lld\n", first, second);
    return first < 0 || second <= 0;
}
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind (default 3)")
    parser.add_argument("--image-mib", type=int, default=512, help="the large file (512)")
    parser.add_argument("--small-files", type=int, default=20_000, help="small files (20000)")
    return parser.parse_args()


def commit_image(reader: Path, folder: Path, *, big_mib: int, small_files: int) -> str:
    """The base image plus the reader as ``/submission/run``, a large file of random
    bytes and ``small_files`` files of 4 KiB; its tag. The tar is written to disk, not
    memory."""
    from scoring import engine

    archive = folder / "image.tar"
    with tarfile.open(archive, mode="w") as tar:
        tar.add(reader, "submission/run")
        random_file = folder / "big"
        with random_file.open("wb") as out:
            for _ in range(big_mib):
                out.write(os.urandom(1 << 20))
        tar.add(random_file, BIG_FILE)
        random_file.unlink()
        small = folder / "small"
        small.write_bytes(os.urandom(4096))
        for index in range(small_files):
            tar.add(small, f"data/small/{index // 1000}/{index}")
    repository = f"podium-bench/prewarm-{uuid.uuid4().hex[:12]}"
    container_id = engine.create_container(image=BASE_IMAGE, command=["/bin/true"], entrypoint=[])
    try:
        with archive.open("rb") as data:
            engine.put_archive(container_id, "/", data)
        engine.commit(container_id, repository=repository, tag="files")
    finally:
        engine.remove_container(container_id)
        archive.unlink()
    return f"{repository}:files"


def drop_caches() -> bool:
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def one_run(image: str, supervisor: Path, staged: Any, budget: int) -> Any:
    """One run in the runner's sandbox with a warm start of ``budget`` bytes."""
    from django.conf import settings

    from portal.contests.models import Benchmark
    from scoring import engine
    from scoring.run import runner

    settings.PODIUM_PREWARM_BYTES = budget
    benchmark = Benchmark(run_memory_bytes=16 * GIB)
    spec = runner.container_spec(
        image=image, staged=staged, benchmark=benchmark, supervisor=supervisor, expect_bytes=0
    )
    container_id = engine.create_container(**spec)
    try:
        engine.start(container_id)
        status = engine.wait(container_id, timeout_s=runner.outer_timeout_s(benchmark))
        if status != 0:
            stderr = engine.logs(container_id, stdout=False, stderr=True)
            raise RuntimeError(f"supervisor exited {status}: {stderr.decode()[-500:]}")
        result = runner.parse_supervisor_line(engine.logs(container_id, stdout=True))
    finally:
        engine.remove_container(container_id)
    if result.exit_code != 0:
        raise RuntimeError(f"the reader failed: {result.stderr_tail.decode()[-500:]}")
    return result


def ratio(result: Any) -> float:
    fields = dict(part.split("=") for part in result.stdout_tail.decode().split())
    return int(fields["first_ns"]) / int(fields["second_ns"])


def main() -> int:
    args = parse_args()
    print(f"Reproduce: {REPRODUCE}")
    print(f"  options: {shlex.join(sys.argv[1:]) or '(defaults)'}")
    folder = Path(tempfile.mkdtemp(prefix="podium-prewarm-"))
    images: list[str] = []
    warm: list[Any] = []
    cold: list[Any] = []
    try:
        setup_django(folder / "data")
        from portal.contests import sandbox
        from scoring import engine

        if not engine.available():
            raise Missing("no Docker Engine answers here")
        if not engine.image_exists(BASE_IMAGE):
            raise Missing(f"{BASE_IMAGE} is missing: run `make base-images`")
        reader = compile_static(folder, "reader", READER_C, f'-DBIG_FILE="{BIG_FILE}"')
        supervisor = build_supervisor()
        print(
            f"  host: {platform.node()}, Linux {platform.release()}, {os.cpu_count()} CPUs, "
            f"Docker Engine {engine.version()}, storage driver {engine_driver()}, "
            f"load average {os.getloadavg()[0]:.2f}"
        )
        big = commit_image(reader, folder, big_mib=args.image_mib, small_files=0)
        images.append(big)
        small = commit_image(reader, folder, big_mib=1, small_files=args.small_files)
        images.append(small)
        staged = staged_run(folder)
        dropped = True
        for _ in range(args.runs):
            dropped &= drop_caches()
            warm.append(one_run(big, supervisor, staged, 4 * GIB))
            dropped &= drop_caches()
            cold.append(one_run(big, supervisor, staged, 0))
        files: list[Any] = []
        for _ in range(args.runs):
            dropped &= drop_caches()
            files.append(one_run(small, supervisor, staged, 4 * GIB))
    except Missing as missing:
        print(f"cannot run: {missing}")
        return 2
    finally:
        for image in images:
            engine.remove_image(image)
        shutil.rmtree(folder, ignore_errors=True)

    s_per_gib = statistics.median(r.prewarm.ms / 1e3 / (r.prewarm.bytes / GIB) for r in warm)
    ms_per_kfile = statistics.median(r.prewarm.ms / (r.prewarm.files / 1000) for r in files)
    floor_s_per_gib = GIB / sandbox.PREWARM_FLOOR_BYTES_PER_S
    floor_ms_per_kfile = 1000 * 1000 / sandbox.PREWARM_FLOOR_NAMES_PER_S
    warm_ratio = statistics.median(ratio(r) for r in warm)
    cold_ratio = statistics.median(ratio(r) for r in cold)
    ok = warm_ratio <= 2 and s_per_gib < floor_s_per_gib and ms_per_kfile < floor_ms_per_kfile
    print()
    print(f"  caches dropped before each run: {'yes' if dropped else 'NO (not root): warm host'}")
    print(f"  the walk, median of {args.runs} runs:")
    print(
        f"    {s_per_gib:.3f} s per GiB of image files ({args.image_mib} MiB file; "
        f"floor {floor_s_per_gib:.1f} s)"
    )
    print(
        f"    {ms_per_kfile:.1f} ms per 1,000 small files ({args.small_files} of 4 KiB; "
        f"floor {floor_ms_per_kfile:.0f} ms)"
    )
    print("  first read / second read of the large file inside the run (median):")
    print(f"    with the warm start:    {warm_ratio:.2f}   (target <= 2)")
    print(f"    without (budget 0):     {cold_ratio:.2f}")
    print(f"  ratios with: {' '.join(f'{ratio(r):.2f}' for r in warm)}")
    print(f"  ratios without: {' '.join(f'{ratio(r):.2f}' for r in cold)}")
    print(f"  verdict: {'PASS' if ok else 'MISS'}; load average now {os.getloadavg()[0]:.2f}")
    return 0 if ok else 1


def engine_driver() -> str:
    done = subprocess.run(
        ["docker", "info", "--format", "{{.Driver}}"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
