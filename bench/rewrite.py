"""Benchmark: re-encoding demo images for a verification set (``scoring.cohort.rewrite``).

A verification set (docs/rules.md, "Verification before ranking") holds every cohort JPEG
re-encoded with a fresh imperceptible perturbation (``rewrite.rewrite_jpeg_data``),
prepared ahead of need on a thread pool (``scoring.cohort.verifysets``, two threads per CPU
like ``staging.threads_for``). Off the clock, but it holds a machine meanwhile, and the
pictures must stay what the entrant's model saw. This measures, on ``--images`` demo
images (``democohort.encode_class_image``, made in memory: no Django, no database):

1. the time: wall milliseconds per image on the thread pool (``--threads``, default
   two per CPU, at most 32), CPU milliseconds per image in this process and in the
   jpegtran processes; for scale, one bare ``jpegtran -copy none -optimize`` pass per
   image (the core of the lossless rewrite this replaced);
2. the picture: PSNR against the original (``rewrite.psnr_db``), lowest, median and
   the floor it must keep (``rewrite.PSNR_FLOOR_DB``); the size ratio, lowest and
   highest;
3. the model: how many rewrites the starter kit (``examples/starter-kit/predict.py``
   ``classify``) gives the same class as the original, and the true class;
4. the keys: how many rewrites still match the original on the SHA-256 of the first
   8 KiB, the quantization tables, the 1/8-scale (DC-only) picture, or the decoded
   pixels (each must be 0).

``--size`` makes the images that many pixels a side (the demo cohort's 64; ImageNet's
are about 500x375). Needs ``jpegtran`` (Debian package ``libjpeg-turbo-progs``).
Exit status: 0 when every rewrite kept the floor, its class and no key; 1 otherwise;
2 when jpegtran is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import random
import resource
import runpy
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from PIL import Image  # noqa: E402

from portal.contests import democohort  # noqa: E402
from scoring.cohort import rewrite  # noqa: E402

# As staging.threads_for (importing staging needs Django): two per CPU, at most 32.
THREADS_PER_CPU = 2
MAX_THREADS = 32


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000, help="demo images (1000)")
    parser.add_argument("--size", type=int, default=64, help="pixels a side (64, the demo's)")
    parser.add_argument("--seed", type=int, default=20260810, help="demo image seed")
    parser.add_argument("--threads", type=int, default=0, help="pool threads (2 per CPU)")
    return parser.parse_args()


def cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def timed(
    work: Callable[[bytes], bytes], images: list[bytes], threads: int
) -> tuple[list[bytes], float, float, float]:
    """``work`` on every image on a pool: results, wall s, CPU s here, CPU s in children."""
    self_cpu, child_cpu = cpu_s(resource.RUSAGE_SELF), cpu_s(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bench-rewrite") as pool:
        results = list(pool.map(work, images))
    wall = time.perf_counter() - started
    return (
        results,
        wall,
        cpu_s(resource.RUSAGE_SELF) - self_cpu,
        cpu_s(resource.RUSAGE_CHILDREN) - child_cpu,
    )


def keys(data: bytes) -> dict[str, str]:
    """What a lookup table could be keyed on (see tests/scoring/test_rewrite.py)."""
    segments = rewrite._segments(data)
    tables = b"".join(data[start + 4 : end] for marker, start, end in segments if marker == 0xDB)
    with Image.open(io.BytesIO(data)) as image:
        pixels = image.tobytes()
    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        image.draft(image.mode, (max(1, width // 8), max(1, height // 8)))
        dc_picture = image.tobytes()
    return {
        "first 8 KiB": hashlib.sha256(data[:8192]).hexdigest(),
        "quantization tables": hashlib.sha256(tables).hexdigest(),
        "1/8-scale picture": hashlib.sha256(dc_picture).hexdigest(),
        "decoded pixels": hashlib.sha256(pixels).hexdigest(),
    }


def main() -> int:
    args = parse_args()
    print(
        f"reproduce: cd {shlex.quote(str(REPO))} && .venv/bin/python bench/rewrite.py"
        f" --images {args.images} --size {args.size} --seed {args.seed}"
        + (f" --threads {args.threads}" if args.threads else "")
        + "\n"
    )
    jpegtran = shutil.which(rewrite.JPEGTRAN)
    if jpegtran is None:
        print("jpegtran is missing: apt-get install libjpeg-turbo-progs", file=sys.stderr)
        return 2
    cpus = len(os.sched_getaffinity(0))
    threads = args.threads or max(1, min(THREADS_PER_CPU * cpus, args.images, MAX_THREADS))
    rng = random.Random(args.seed)
    classes = [rng.randrange(democohort.CLASS_COUNT) for _ in range(args.images)]
    originals = [democohort.encode_class_image(class_id, rng, args.size) for class_id in classes]
    sizes = [len(data) for data in originals]
    print(
        f"{args.images} demo images of {args.size}x{args.size} ({statistics.median(sizes):.0f}"
        f" bytes median); {cpus} CPUs, {threads} threads; {jpegtran}\n"
    )

    draws = random.SystemRandom()
    rewrite.rewrite_jpeg_data(originals[0], draws, jpegtran=jpegtran)  # warm up
    rewritten, wall, here, children = timed(
        lambda data: rewrite.rewrite_jpeg_data(data, draws, jpegtran=jpegtran), originals, threads
    )

    def bare_jpegtran(data: bytes) -> bytes:
        command = [jpegtran, "-copy", "none", "-optimize"]
        return subprocess.run(command, input=data, capture_output=True, check=True).stdout

    _bare, bare_wall, _here, bare_children = timed(bare_jpegtran, originals, threads)
    per_image = 1e3 / args.images
    print(f"{'per image':<44}{'wall ms':>9}{'CPU ms here':>13}{'CPU ms jpegtran':>17}")
    print(
        f"{'rewrite_jpeg_data (re-encode, check)':<44}{wall * per_image:>9.2f}"
        f"{here * per_image:>13.2f}{children * per_image:>17.2f}"
    )
    print(
        f"{'bare jpegtran -copy none -optimize':<44}{bare_wall * per_image:>9.2f}"
        f"{'':>13}{bare_children * per_image:>17.2f}"
    )

    psnr = [rewrite.psnr_db(a, b) for a, b in zip(originals, rewritten, strict=True)]
    ratio = [len(b) / len(a) for a, b in zip(originals, rewritten, strict=True)]
    below = sum(value < rewrite.PSNR_FLOOR_DB for value in psnr)
    print(
        f"\nPSNR dB: lowest {min(psnr):.2f}, median {statistics.median(psnr):.2f}"
        f" (floor {rewrite.PSNR_FLOOR_DB:.0f}: {below} below)"
    )
    print(
        f"size ratio: lowest {min(ratio):.3f}, median {statistics.median(ratio):.3f},"
        f" highest {max(ratio):.3f}"
    )

    classify = runpy.run_path(str(REPO / "examples" / "starter-kit" / "predict.py"))["classify"]
    before = [classify(io.BytesIO(data)) for data in originals]
    after = [classify(io.BytesIO(data)) for data in rewritten]
    agree = sum(a == b for a, b in zip(before, after, strict=True))
    right = sum(a == c for a, c in zip(after, classes, strict=True))
    print(
        f"starter kit: the same class on {agree} of {args.images} rewrites;"
        f" the true class on {right}"
    )

    matches = dict.fromkeys(keys(originals[0]), 0)
    for a, b in zip(originals, rewritten, strict=True):
        for name, (key_a, key_b) in zip(
            matches, zip(keys(a).values(), keys(b).values(), strict=True), strict=True
        ):
            matches[name] += key_a == key_b
    print(
        "rewrites still matching the original on: "
        + ", ".join(f"{name} {count}" for name, count in matches.items())
    )
    failed = below or agree != args.images or right != args.images or any(matches.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
