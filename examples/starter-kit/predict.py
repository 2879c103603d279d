"""The starter kit's model: reads the demo benchmark's "three bands" images.

Podium's runtime ABI: ``run MANIFEST IMAGE_ROOT OUTPUT`` (the same paths are in
``CONTEST_MANIFEST``, ``CONTEST_IMAGE_ROOT`` and ``CONTEST_OUTPUT``). The manifest has
one line per image, ``<request id>\\t<path relative to IMAGE_ROOT>``; the output is one
little-endian int32 in [0, 999] per manifest line, in manifest order.

Replace :func:`classify` with your model. Everything here runs inside the scoring
sandbox: read-only root filesystem, no network, a non-root user, no usable HOME;
only /tmp and the output's folder are writable, and the number of processes is capped.
Everything (imports, decoding, writing the output) is on the clock.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time

import numpy as np
from PIL import Image

CLASS_COUNT = 1000
# More workers than cores only adds start-up time; the sandbox also limits PIDs.
MAX_WORKERS = 8
# Below this many images a pool costs more than it saves.
POOL_THRESHOLD = 128


def classify(path: str) -> int:
    """The class of one image. The demo cohort spells it in three gray bands.

    Band ``i`` of three (columns ``i*w//3`` to ``(i+1)*w//3``) holds digit ``i`` of the
    class as the gray level ``16 + 24 * digit``; the mean of the band's central region
    (middle half of its columns and rows) gives the digit back. The same algorithm as
    Podium's ``portal/contests/democohort.py``.
    """
    with Image.open(path) as image:
        image.draft("L", image.size)  # JPEG: decode the luma plane only
        gray = np.asarray(image.convert("L"), dtype=np.float32)
    return class_of_bands(gray)


def class_of_bands(gray: np.ndarray) -> int:
    """The class spelled by the three gray bands of a luma picture (levels 0 to 255)."""
    height, width = gray.shape
    top, bottom = height // 4, height - height // 4
    class_id = 0
    for band in range(3):
        left, right = band * width // 3, (band + 1) * width // 3
        quarter = (right - left) // 4
        mean = float(gray[top:bottom, left + quarter : right - quarter].mean())
        class_id = class_id * 10 + min(9, max(0, round((mean - 16) / 24)))
    return class_id


def predict_one(path: str) -> int:
    """:func:`classify`, but never raises: a broken image is logged and answered with 0."""
    try:
        class_id = classify(path)
    except Exception as error:  # one bad file must not lose the whole run
        print(f"predict: {path}: {error}", file=sys.stderr)
        return 0
    return min(CLASS_COUNT - 1, max(0, class_id))


def read_manifest(manifest: str) -> list[str]:
    """The manifest's image paths, relative to the image root, in its order (request ids
    are not needed here)."""
    paths = []
    with open(manifest, encoding="utf-8") as handle:
        for line in handle:
            line = line.rstrip("\r\n")
            if not line:
                continue
            _request_id, _tab, relative_path = line.partition("\t")
            paths.append(relative_path)
    return paths


def worker_count() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


def predict_all(paths: list[str]) -> tuple[list[int], int]:
    """Classes for every path, in order, and the number of processes that decoded them.

    Uses a process pool when it is worth it."""
    workers = worker_count()
    if workers > 1 and len(paths) >= POOL_THRESHOLD:
        try:
            # fork: the workers inherit the imported modules instead of importing again.
            context = multiprocessing.get_context("fork")
            with context.Pool(workers) as pool:
                chunksize = max(1, len(paths) // (workers * 8))
                return pool.map(predict_one, paths, chunksize=chunksize), workers
        except (OSError, RuntimeError) as error:  # no usable /dev/shm, PID limit reached
            print(f"predict: no process pool ({error}); continuing in one process", file=sys.stderr)
    return [predict_one(path) for path in paths], 1


def write_output(output: str, classes: list[int]) -> None:
    data = np.asarray(classes, dtype="<i4").tobytes()
    with open(output, "wb") as handle:
        handle.write(data)


def main(argv: list[str]) -> int:
    if len(argv) == 3:
        manifest, image_root, output = argv
    elif not argv:
        try:
            manifest = os.environ["CONTEST_MANIFEST"]
            image_root = os.environ["CONTEST_IMAGE_ROOT"]
            output = os.environ["CONTEST_OUTPUT"]
        except KeyError as missing:
            print(f"usage: run MANIFEST IMAGE_ROOT OUTPUT (or set {missing})", file=sys.stderr)
            return 2
    else:
        print("usage: run MANIFEST IMAGE_ROOT OUTPUT", file=sys.stderr)
        return 2

    started = time.monotonic()
    paths = read_manifest(manifest)
    output = os.path.abspath(output)
    # Open the images relative to their root: on some hosts (Docker on fuse-overlayfs)
    # every absolute path is resolved from the image's own root filesystem at a cost of
    # tens of microseconds per file for a non-root user, and the workers (forked here)
    # keep this working directory.
    os.chdir(image_root)
    classes, workers = predict_all(paths)
    write_output(output, classes)
    elapsed = time.monotonic() - started
    print(
        f"predict: {len(classes)} images in {elapsed:.2f} s, {workers} process(es)",
        file=sys.stderr,
    )
    return 0
