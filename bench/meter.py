"""Benchmark: how long the supervisor's meter takes to read the container's cgroup.

The meter (``supervise.c``, decoded by ``scoring.run.meter``) reads a fixed list of cgroup
files after the entrant's process tree is reaped and after the clock's second
reading, so it never touches the trusted interval; but it delays the result line and
the machine's next run. Target: ``meter_ns`` at most 50 ms at the 99th percentile of
``--runs`` (50) runs.

Each run goes through the runner's own sandbox, as ``bench/timing.py`` does:
``scoring.run.runner.container_spec`` with a default Benchmark's limits, the engine module
to create, start, wait for and remove the container, ``parse_supervisor_line`` and
``scoring.run.meter.from_line`` for the result. The workload is a static C program
(compiled here with ``cc -O2 -static``) that touches ``--memory-mib`` (16) MiB and
burns ``--burn-ms`` (20) ms of CPU, committed onto ``localhost/podium/busybox:1`` as
``/submission/run``; the image, every container and the temp folder are removed at
the end.

Exit status: 0 when the target is met, 1 otherwise, 2 when a prerequisite (a C
compiler, Docker, ``localhost/podium/busybox:1``, the supervisor) is missing.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import shlex
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from timing import Missing, build_supervisor, compile_static, setup_django

BASE_IMAGE = "localhost/podium/busybox:1"
REPRODUCE = "make supervisor base-images && .venv/bin/python bench/meter.py"

TARGET_P99_MS = 50.0

WORKLOAD_C = r"""
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
int main(void)
{
    volatile char *memory = malloc(MEMORY_BYTES);
    for (long i = 0; memory && i < MEMORY_BYTES; i += 4096)
        memory[i] = 1;
    volatile uint64_t x = 88172645463325252ULL;
    struct timespec now;
    do {
        for (int i = 0; i < 100000; i++) { /* xorshift64 */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    } while (now.tv_sec * 1000000000LL + now.tv_nsec < BURN_NS);
    return 0;
}
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="measured runs (default 50)")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured runs first (3)")
    parser.add_argument("--memory-mib", type=int, default=16, help="workload memory (16)")
    parser.add_argument("--burn-ms", type=int, default=20, help="workload CPU time (20)")
    return parser.parse_args()


def compile_workload(folder: Path, memory_mib: int, burn_ms: int) -> Path:
    defines = (f"-DMEMORY_BYTES={memory_mib << 20}L", f"-DBURN_NS={burn_ms * 1_000_000}LL")
    return compile_static(folder, "workload", WORKLOAD_C, *defines)


def commit_image(binary: Path) -> str:
    """The base image plus ``binary`` as ``/submission/run``; its tag."""
    from scoring import engine

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = binary.read_bytes()
        info = tarfile.TarInfo("submission/run")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    repository, tag = f"podium-bench/meter-{uuid.uuid4().hex[:12]}", "workload"
    container_id = engine.create_container(image=BASE_IMAGE, command=["/bin/true"], entrypoint=[])
    try:
        engine.put_archive(container_id, "/", buffer.getvalue())
        engine.commit(container_id, repository=repository, tag=tag)
    finally:
        engine.remove_container(container_id)
    return f"{repository}:{tag}"


def staged_run(folder: Path) -> Any:
    from scoring.cohort.staging import StagedRun

    input_dir = folder / "runs" / "0" / "input"
    (input_dir / "images").mkdir(parents=True, exist_ok=True)
    (input_dir / "manifest.tsv").write_text("")
    for path in (input_dir, input_dir / "images"):
        path.chmod(0o755)
    (input_dir / "manifest.tsv").chmod(0o644)
    return StagedRun(
        run_id=0,
        root=input_dir.parent,
        input_dir=input_dir,
        manifest=input_dir / "manifest.tsv",
        rows=0,
        references=[],
        request_ids=[],
        staged_names=[],
    )


def one_run(image: str, supervisor: Path, staged: Any) -> Any:
    """One run in the runner's sandbox; its :class:`scoring.run.meter.Resources`."""
    from portal.contests.models import Benchmark
    from scoring import engine
    from scoring.run import runner

    spec = runner.container_spec(
        image=image,
        staged=staged,
        benchmark=Benchmark(),  # the default rules' limits
        supervisor=supervisor,
        expect_bytes=0,
    )
    container_id = engine.create_container(**spec)
    try:
        engine.start(container_id)
        status = engine.wait(container_id, timeout_s=120)
        if status != 0:
            stderr = engine.logs(container_id, stdout=False, stderr=True)
            raise RuntimeError(f"supervisor exited {status}: {stderr.decode()[-500:]}")
        result = runner.parse_supervisor_line(engine.logs(container_id, stdout=True))
    finally:
        engine.remove_container(container_id)
    if result.exit_code != 0:
        raise RuntimeError(f"the workload failed: {result.stderr_tail.decode()[-500:]}")
    return result.resources


def percentile(samples: list[float], percent: int) -> float:
    """The inclusive ``percent``-th percentile (the maximum for 100)."""
    if percent == 100 or len(samples) == 1:
        return max(samples)
    return statistics.quantiles(samples, n=100, method="inclusive")[percent - 1]


def main() -> int:
    args = parse_args()
    print(f"Reproduce: {REPRODUCE}")
    print(f"  options: {shlex.join(sys.argv[1:]) or '(defaults)'}")
    folder = Path(tempfile.mkdtemp(prefix="podium-meter-"))
    image: str | None = None
    readings: list[Any] = []
    try:
        setup_django(folder / "data")
        from scoring import engine

        if not engine.available():
            raise Missing("no Docker Engine answers here")
        if not engine.image_exists(BASE_IMAGE):
            raise Missing(f"{BASE_IMAGE} is missing: run `make base-images`")
        workload = compile_workload(folder, args.memory_mib, args.burn_ms)
        supervisor = build_supervisor()
        print(
            f"  host: {platform.node()}, Linux {platform.release()}, {os.cpu_count()} CPUs, "
            f"Docker Engine {engine.version()}, load average {os.getloadavg()[0]:.2f}"
        )
        image = commit_image(workload)
        staged = staged_run(folder)
        for _ in range(args.warmup):
            one_run(image, supervisor, staged)
        started = time.monotonic()
        readings = [one_run(image, supervisor, staged) for _ in range(args.runs)]
        elapsed = time.monotonic() - started
    except Missing as missing:
        print(f"cannot run: {missing}")
        return 2
    finally:
        if image is not None:
            engine.remove_image(image)
        shutil.rmtree(folder, ignore_errors=True)

    meter_ms = [reading.meter_ms for reading in readings]
    p50, p99, worst = (percentile(meter_ms, p) for p in (50, 99, 100))
    ok = p99 <= TARGET_P99_MS
    versions = sorted({reading.cgroup_version for reading in readings})
    print()
    print(f"  meter_ns over {args.runs} runs (cgroup v{'/v'.join(map(str, versions))}):")
    print(f"    p50 {p50:.3f} ms   p99 {p99:.3f} ms   max {worst:.3f} ms")
    print(f"    target: p99 <= {TARGET_P99_MS:g} ms   {'PASS' if ok else 'MISS'}")
    print()
    print("  the readings themselves, median of the runs (a sanity check, not a target):")
    shown = {
        "cpu_user_s": lambda value: f"{value:.3f} s",
        "cpu_system_s": lambda value: f"{value:.3f} s",
        "memory_peak_bytes": lambda value: f"{value / 2**20:.1f} MiB",
        "pids_peak": lambda value: f"{value:g}",
    }
    for field, show in shown.items():
        values = [getattr(reading, field) for reading in readings]
        known = [value for value in values if value is not None]
        median = show(statistics.median(known)) if known else "none"
        print(f"    {field}: {median} ({len(values) - len(known)} runs without it)")
    print(f"  meter runs (ms): {' '.join(f'{ms:.3f}' for ms in meter_ms)}")
    print(f"  measured in {elapsed:.1f} s; load average now {os.getloadavg()[0]:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
