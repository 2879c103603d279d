"""Benchmark: how true the trusted clock is, in the scoring container and on the host.

Three comparisons, side by side in one run (a measurement, not a test):

- **timing floor**: the trusted duration of a no-op entrypoint (a static binary that
  returns at once), median of ``--floor-runs`` (20) runs. Target: at most 2 ms, and at
  most 1.5x the same supervisor run natively on this host.
- **fidelity**: a fixed CPU-bound workload (a static C loop of about 0.4 s, compiled
  here with ``cc -O2 -static``) timed by the supervisor in the container vs by
  hyperfine on the host, median of ``--runs`` (10) each. Target: the ratio of medians
  container / host within [0.98, 1.05].
- **noise**: (max - min) / median of those same ``--runs`` runs, container vs host.
  Target: at most 1.2x the host's.

The container runs go through the runner's own sandbox: ``scoring.run.runner.container_spec``
(network none, read-only, non-root, no capabilities, our seccomp filter on top of
Docker's default, tmpfs, limits of a default Benchmark, this machine's scoring CPUs), the
engine module to create, start, wait for and remove the container, and
``parse_supervisor_line`` for the result.

CPUs as the product places them (``PODIUM_SCORING_CPUS``, portal/core/cpus.py): the host's
runs (hyperfine, the native supervisor) are made on the scoring CPUs too, and this
process, which waits like the scoring worker, keeps off them. ``--busy 0`` keeps CPU 0
busy meanwhile (one spinning process per listed CPU), as host work beside a run would.
hyperfine is Debian's package ``hyperfine``.
The images are ``localhost/podium/busybox:1`` plus the binary as ``/submission/run``, committed
here and removed at the end with every container and the temp folder.

Exit status: 0 when every figure meets its target, 1 otherwise, 2 when a prerequisite
(a C compiler, Docker, ``localhost/podium/busybox:1``, the supervisor) is missing.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SUPERVISOR = REPO / "scoring" / "supervisor" / "supervise"
BASE_IMAGE = "localhost/podium/busybox:1"
REPRODUCE = "make supervisor base-images && .venv/bin/python bench/timing.py"

FLOOR_MAX_MS = 2.0
FLOOR_MAX_RATIO = 1.5
FIDELITY_RANGE = (0.98, 1.05)
NOISE_MAX_RATIO = 1.2

NOOP_C = "int main(void) { return 0; }\n"
WORKLOAD_C = r"""
#include <stdint.h>
#include <stdio.h>
int main(void)
{
    uint64_t x = 88172645463325252ULL, sum = 0;
    for (uint64_t i = 0; i < ITERATIONS; i++) { /* xorshift64: a dependent chain */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        sum += x;
    }
    printf("%llu\n", (unsigned long long)sum);
    return 0;
}
"""


class Missing(Exception):
    """A prerequisite is missing; the message says how to get it."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--floor-runs", type=int, default=20, help="no-op runs (default 20)")
    parser.add_argument("--runs", type=int, default=10, help="workload runs (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="workload warm-up runs (2)")
    parser.add_argument(
        "--iterations", type=int, default=280_000_000, help="workload loop (about 0.4 s)"
    )
    parser.add_argument(
        "--busy",
        default="",
        metavar="CPUS",
        help="keep these CPUs (a list like 0 or 0-1) busy while measuring (default: none)",
    )
    return parser.parse_args()


# The CPUs the host's runs are made on: this machine's scoring CPUs (None: any).
SCORING_CPUS: frozenset[int] | None = None


def on_scoring_cpus() -> None:
    """``preexec_fn`` of the host's runs: onto the scoring CPUs, as a scored run."""
    if SCORING_CPUS:
        os.sched_setaffinity(0, SCORING_CPUS)


def spinners(cpus: frozenset[int]) -> list[subprocess.Popen[bytes]]:
    """One busy loop pinned to each of ``cpus`` (the caller kills them)."""
    return [
        subprocess.Popen(
            [sys.executable, "-c", "while 1: pass"],
            preexec_fn=functools.partial(os.sched_setaffinity, 0, {cpu}),
        )
        for cpu in sorted(cpus)
    ]


def setup_django(data_dir: Path) -> None:
    """Settings for ``container_spec`` (no database is touched), in a throw-away folder."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    os.environ["PODIUM_DATA_DIR"] = str(data_dir)
    os.environ["DATABASE_URL"] = f"sqlite:///{data_dir / 'bench.sqlite3'}"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()


def compile_static(folder: Path, name: str, source: str, *defines: str) -> Path:
    if shutil.which("cc") is None:
        raise Missing("no C compiler: install gcc (apt-get install gcc libc6-dev)")
    (folder / f"{name}.c").write_text(source)
    args = ["cc", "-O2", "-static", *defines, "-o", name, f"{name}.c"]
    done = subprocess.run(args, cwd=folder, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise Missing(f"cannot compile {name}.c statically: {done.stderr.strip()}")
    return folder / name


def build_supervisor() -> Path:
    done = subprocess.run(
        ["make", "scoring/supervisor/supervise"], cwd=REPO, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise Missing(f"cannot build the supervisor: {done.stderr.strip()}")
    return SUPERVISOR


@dataclass
class Sandbox:
    """Runs a binary as ``/submission/run`` under the supervisor, the runner's way."""

    supervisor: Path
    folder: Path
    images: list[str]

    def image_of(self, binary: Path) -> str:
        from scoring import engine

        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            data = binary.read_bytes()
            info = tarfile.TarInfo("submission/run")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        tag = f"podium-bench/timing-{uuid.uuid4().hex[:12]}:{binary.name}"
        repository, name = tag.rsplit(":", 1)
        container_id = engine.create_container(
            image=BASE_IMAGE, command=["/bin/true"], entrypoint=[]
        )
        try:
            engine.put_archive(container_id, "/", buffer.getvalue())
            engine.commit(container_id, repository=repository, tag=name)
        finally:
            engine.remove_container(container_id)
        self.images.append(tag)
        return tag

    def staged(self) -> Any:
        from scoring.cohort.staging import StagedRun

        input_dir = self.folder / "runs" / "0" / "input"
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

    def run(self, image: str, scoring_cpus: str | None = None) -> int:
        """One run in the container (on ``scoring_cpus``; None: this machine's scoring
        CPUs); the trusted wall time in ns."""
        from portal.contests.models import Benchmark
        from scoring import engine
        from scoring.run import runner

        spec = runner.container_spec(
            image=image,
            staged=self.staged(),
            benchmark=Benchmark(),  # the default rules' limits
            supervisor=self.supervisor,
            expect_bytes=0,
            scoring_cpus=scoring_cpus,
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
            raise RuntimeError(f"the entrypoint failed: {result.stderr_tail.decode()[-500:]}")
        return result.wall_ns

    def run_native(self, binary: Path) -> int:
        """The same supervisor, natively on the host; the trusted wall time in ns."""
        from scoring.run import runner

        logs, out = self.folder / "native-logs", self.folder / "native-out"
        logs.mkdir(exist_ok=True)
        out.mkdir(exist_ok=True)
        args = [str(self.supervisor), "--deadline-ms", "120000", "--log-dir", str(logs)]
        args += ["--output", str(out / "predictions.i32"), "--expect-bytes", "0", "--"]
        args += [str(binary), "manifest.tsv", "images", str(out / "predictions.i32")]
        done = subprocess.run(
            args, capture_output=True, check=True, timeout=120, preexec_fn=on_scoring_cpus
        )
        return runner.parse_supervisor_line(done.stdout).wall_ns


def hyperfine_run(binary: Path, folder: Path, warmup: int = 0) -> float:
    """One run of ``binary`` timed by hyperfine (no shell), in seconds."""
    export = folder / "hyperfine.json"
    args = ["hyperfine", "-N", "--style", "none", "--warmup", str(warmup), "--runs", "1"]
    subprocess.run(
        [*args, "--export-json", str(export), str(binary)],
        check=True,
        capture_output=True,
        preexec_fn=on_scoring_cpus,
    )
    return float(json.loads(export.read_text())["results"][0]["times"][0])


def interleaved(runs: int, *measures: Callable[[], float]) -> list[list[float]]:
    """``runs`` rounds of every measure in turn, so a change in the host's background
    load touches every column alike; one list of results per measure."""
    results: list[list[float]] = [[] for _ in measures]
    for _ in range(runs):
        for samples, measure in zip(results, measures, strict=True):
            samples.append(measure())
    return results


def spread(samples: list[float]) -> float:
    return (max(samples) - min(samples)) / statistics.median(samples)


def verdict(ok: bool | None) -> str:
    return "SKIP" if ok is None else ("PASS" if ok else "MISS")


def main() -> int:
    args = parse_args()
    # A stop (timeout, kill) still runs the clean-up below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"Reproduce: {REPRODUCE}")
    print(f"  options: {shlex.join(sys.argv[1:]) or '(defaults)'}")
    global SCORING_CPUS
    folder = Path(tempfile.mkdtemp(prefix="podium-timing-"))
    sandbox: Sandbox | None = None
    busy: list[subprocess.Popen[bytes]] = []
    try:
        setup_django(folder / "data")
        from portal.core import cpus
        from scoring import engine

        isolation = cpus.configured()
        SCORING_CPUS = isolation.scoring or None
        cpus.pin_off_scoring()
        print(
            f"  CPUs: scored runs on {isolation.scoring_cpus}, the rest on {isolation.other_cpus}"
            if isolation.split
            else f"  CPUs: shared ({isolation.reason})"
        )
        if args.busy:
            busy = spinners(cpus.parse_cpu_list(args.busy))
            print(f"  busy: one spinning process on each of CPU {args.busy}")

        if not engine.available():
            raise Missing("no Docker Engine answers here")
        if not engine.image_exists(BASE_IMAGE):
            raise Missing(f"{BASE_IMAGE} is missing: run `make base-images`")
        noop = compile_static(folder, "noop", NOOP_C)
        workload = compile_static(
            folder, "workload", WORKLOAD_C, f"-DITERATIONS={args.iterations}ULL"
        )
        box = sandbox = Sandbox(supervisor=build_supervisor(), folder=folder, images=[])
        print(
            f"  host: {platform.node()}, Linux {platform.release()}, {os.cpu_count()} CPUs, "
            f"Docker Engine {engine.version()}, load average {os.getloadavg()[0]:.2f}"
        )
        noop_image, workload_image = box.image_of(noop), box.image_of(workload)

        have_hyperfine = shutil.which("hyperfine") is not None
        # Warm every path (image layers, page cache, the engine), then measure, the
        # container and the host in turn.
        for _ in range(3):
            box.run(noop_image)
            box.run_native(noop)
        started = time.monotonic()
        floor_container, floor_host = interleaved(
            args.floor_runs,
            lambda: box.run(noop_image) / 1e9,
            lambda: box.run_native(noop) / 1e9,
        )
        for _ in range(args.warmup):
            box.run(workload_image)
        work_host: list[float] | None = None
        if have_hyperfine:
            hyperfine_run(workload, folder, warmup=args.warmup)
            work_container, work_host = interleaved(
                args.runs,
                lambda: box.run(workload_image) / 1e9,
                lambda: hyperfine_run(workload, folder),
            )
        else:
            (work_container,) = interleaved(args.runs, lambda: box.run(workload_image) / 1e9)
        elapsed = time.monotonic() - started
    except Missing as missing:
        print(f"cannot run: {missing}")
        return 2
    finally:
        for spinner in busy:
            spinner.kill()
            spinner.wait()
        if sandbox is not None:
            for image in sandbox.images:
                engine.remove_image(image)
        shutil.rmtree(folder, ignore_errors=True)

    floor_ms = statistics.median(floor_container) * 1e3
    floor_host_ms = statistics.median(floor_host) * 1e3
    floor_ok = floor_ms <= FLOOR_MAX_MS and floor_ms <= FLOOR_MAX_RATIO * floor_host_ms
    rows = [
        (
            f"timing floor: no-op, median of {args.floor_runs}",
            f"{floor_ms:.3f} ms",
            f"{floor_host_ms:.3f} ms (supervisor)",
            f"<= {FLOOR_MAX_MS:g} ms and <= {FLOOR_MAX_RATIO:g}x host",
            f"{floor_ms / floor_host_ms:.2f}x",
            verdict(floor_ok),
        )
    ]
    work_ms = statistics.median(work_container) * 1e3
    noise = spread(work_container)
    if work_host is None:
        print(
            "hyperfine not found: install it (apt-get install hyperfine, or cargo install "
            "hyperfine) for the host columns of fidelity and noise"
        )
        rows.append(
            (
                f"fidelity: workload, median of {args.runs}",
                f"{work_ms:.1f} ms",
                "-",
                "",
                "-",
                "SKIP",
            )
        )
        rows.append(("noise: (max - min) / median", f"{noise:.2%}", "-", "", "-", "SKIP"))
        fidelity_ok = noise_ok = None
    else:
        host_ms = statistics.median(work_host) * 1e3
        ratio = work_ms / host_ms
        fidelity_ok = FIDELITY_RANGE[0] <= ratio <= FIDELITY_RANGE[1]
        host_noise = spread(work_host)
        noise_ratio = noise / host_noise if host_noise else float("inf")
        noise_ok = noise <= NOISE_MAX_RATIO * host_noise
        rows.append(
            (
                f"fidelity: workload, median of {args.runs}",
                f"{work_ms:.1f} ms",
                f"{host_ms:.1f} ms (hyperfine)",
                f"ratio in [{FIDELITY_RANGE[0]:g}, {FIDELITY_RANGE[1]:g}]",
                f"{ratio:.3f}",
                verdict(fidelity_ok),
            )
        )
        rows.append(
            (
                "noise: (max - min) / median",
                f"{noise:.2%}",
                f"{host_noise:.2%} (hyperfine)",
                f"<= {NOISE_MAX_RATIO:g}x host",
                f"{noise_ratio:.2f}x",
                verdict(noise_ok),
            )
        )
    header = ("", "container (trusted)", "host", "target", "measured", "")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print()
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    print()
    print(f"  no-op runs (ms), container: {' '.join(f'{t * 1e3:.3f}' for t in floor_container)}")
    print(f"  no-op runs (ms), host:      {' '.join(f'{t * 1e3:.3f}' for t in floor_host)}")
    print(f"  workload runs (ms), container: {' '.join(f'{t * 1e3:.1f}' for t in work_container)}")
    if work_host is not None:
        print(f"  workload runs (ms), host:      {' '.join(f'{t * 1e3:.1f}' for t in work_host)}")
    print(f"  measured in {elapsed:.1f} s; load average now {os.getloadavg()[0]:.2f}")
    return 0 if all(ok is not False for ok in (floor_ok, fidelity_ok, noise_ok)) else 1


if __name__ == "__main__":
    sys.exit(main())
