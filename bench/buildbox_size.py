"""Benchmark: what one measurement of a build's writable layer costs the build guard.

Where the engine cannot size a build container's layer (it reports ``SizeRw`` -1), the
guard (``scoring.build.buildbox.Guard``) walks the layer's upper directory itself with
``scoring.build.buildbox.layer_bytes`` once every ``GUARD_PERIOD_S`` while the step runs.
This makes a layer of ``--files`` (100,000) small files, ``--per-dir`` (1,000) to a
directory, in a temp folder under ``--dir`` (the system's temp folder by default; name
a folder on the engine's storage to measure there), walks it ``--runs`` (5) times and
prints the median and worst walk, files per second, and the share of the guard's
period one walk takes. The folder is removed at the end.

Exit status: 0 when the median walk fits in one guard period, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import setup_django


def make_layer(top: Path, files: int, per_dir: int) -> None:
    """``files`` files of 100 bytes each, ``per_dir`` to a directory."""
    payload = b"x" * 100
    for number in range(files):
        folder = top / f"d{number // per_dir:05d}"
        if number % per_dir == 0:
            folder.mkdir()
        (folder / f"f{number:06d}").write_bytes(payload)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--per-dir", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to make the layer")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="podium-bench-layer-") as folder:
        setup_django(Path(folder) / "data")
        from scoring.build import buildbox

        top = Path(folder) / "upper"
        top.mkdir()
        started = time.perf_counter()
        make_layer(top, args.files, args.per_dir)
        subprocess.run(["sync"], check=False)
        made_s = time.perf_counter() - started

        walks: list[float] = []
        measured = 0
        for _ in range(args.runs):
            started = time.perf_counter()
            measured = buildbox.layer_bytes(str(top))
            walks.append(time.perf_counter() - started)

    median = statistics.median(walks)
    period = buildbox.GUARD_PERIOD_S
    print(f"layer: {args.files:,} files in {args.files // args.per_dir:,} directories")
    print(f"made in {made_s:.1f} s; measured {measured:,} bytes")
    print(
        f"walk: median {median * 1e3:.0f} ms, worst {max(walks) * 1e3:.0f} ms "
        f"over {args.runs} runs ({args.files / median:,.0f} files/s)"
    )
    print(
        f"guard: one walk per container whose size the engine cannot tell, every "
        f"GUARD_PERIOD_S = {period:g} s: {median / period:.0%} of the period"
    )
    print(f"cpu count here: {os.cpu_count()}")
    return 0 if median <= period else 1


if __name__ == "__main__":
    sys.exit(main())
