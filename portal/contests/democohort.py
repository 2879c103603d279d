"""Generated demo images whose class can be read back from the pixels (pure; no Django).

The demo benchmark needs a cohort that an honest, tiny program can score 100% on, so
``make run`` works end to end without a model or a real data set.

The encoding ("three bands"), shared with ``examples/starter-kit/predict.py``:

- The class ``c`` in [0, 999] is written as three decimal digits ``c // 100``,
  ``c // 10 % 10`` and ``c % 10``.
- The image is split into three vertical bands of equal width (band ``i`` covers the
  columns ``i * width // 3`` to ``(i + 1) * width // 3``), one per digit, left to right.
- A band's base gray level is ``16 + 24 * digit`` (16, 40, ..., 232). Each image adds
  texture so no two images are alike: a per-band offset of at most +-3, per-pixel
  Gaussian noise (sigma 4) and a slight colour cast per channel; the result is an RGB
  JPEG at quality 90.
- Decoding reads the image as 8-bit grayscale (for a JPEG, only its luma plane is
  decoded, via Pillow's ``draft``), takes the mean of each band's central region
  (the middle half of its columns and the middle half of the rows, well away from the
  band edges where JPEG blurs neighbours together) and rounds ``(mean - 16) / 24`` to
  the nearest digit, clamped to [0, 9].

The gap between two digit levels is 24, so a band's mean may drift by almost 12 before
it decodes wrong; offset, colour cast, noise and JPEG loss together move the mean of a
central region by at most about 5 (measured over 5,000 images).
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
from PIL import Image

CLASS_COUNT = 1000
DIGIT_BASE = 16
DIGIT_STEP = 24
JPEG_QUALITY = 90
# Files per subfolder of a generated cohort.
FOLDER_SIZE = 500


def _digits(class_id: int) -> tuple[int, int, int]:
    if not 0 <= class_id < CLASS_COUNT:
        raise ValueError(f"class {class_id} is outside [0, {CLASS_COUNT - 1}]")
    return class_id // 100, class_id // 10 % 10, class_id % 10


def _band_edges(width: int) -> list[tuple[int, int]]:
    return [(band * width // 3, (band + 1) * width // 3) for band in range(3)]


def encode_class_image(class_id: int, rng: random.Random, size: int = 64) -> bytes:
    """A ``size`` x ``size`` RGB JPEG whose three bands spell ``class_id`` (see module doc).

    Deterministic for a given ``rng`` state; consumes randomness from it.
    """
    if size < 12:
        raise ValueError("images need at least 12 pixels a side to hold three bands")
    noise = np.random.default_rng(rng.getrandbits(64))
    gray = np.empty((size, size), dtype=np.float64)
    for digit, (left, right) in zip(_digits(class_id), _band_edges(size), strict=True):
        gray[:, left:right] = DIGIT_BASE + DIGIT_STEP * digit + rng.uniform(-3.0, 3.0)
    gray += noise.normal(0.0, 4.0, size=(size, size))
    cast = np.array([rng.uniform(-2.0, 2.0) for _ in range(3)])
    pixels = np.clip(np.rint(gray[:, :, None] + cast[None, None, :]), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels, mode="RGB").save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()


def decode_image(image: Image.Image) -> int:
    """The class spelled by an opened (not yet loaded) image (see module doc)."""
    image.draft("L", image.size)  # JPEG: decode the luma plane only; others: no effect
    gray = np.asarray(image.convert("L"), dtype=np.float32)
    height, width = gray.shape
    top, bottom = height // 4, height - height // 4
    class_id = 0
    for left, right in _band_edges(width):
        quarter = (right - left) // 4
        mean = float(gray[top:bottom, left + quarter : right - quarter].mean())
        digit = min(9, max(0, round((mean - DIGIT_BASE) / DIGIT_STEP)))
        class_id = class_id * 10 + digit
    return class_id


def decode_class_image(data: bytes) -> int:
    """The class that :func:`encode_class_image` wrote into the JPEG ``data``."""
    with Image.open(io.BytesIO(data)) as image:
        return decode_image(image)


def canonical_name(index: int) -> str:
    """Where member ``index`` of a generated cohort lives, relative to its folder."""
    return f"part{index // FOLDER_SIZE:02d}/val_{index:08d}.jpg"


def generate(directory: Path, count: int, seed: int) -> list[tuple[str, int]]:
    """Write ``count`` demo JPEGs under ``directory``; return ``[(relative_path, class)]``.

    The same ``seed`` gives the same classes and the same bytes. Files go into
    subfolders of at most ``FOLDER_SIZE`` images, named like ``part00/val_00000042.jpg``.
    """
    rng = random.Random(seed)  # noqa: S311 - reproducible demo data
    members: list[tuple[str, int]] = []
    for index in range(count):
        class_id = rng.randrange(CLASS_COUNT)
        relative_path = canonical_name(index)
        target = directory / relative_path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(encode_class_image(class_id, rng))
        members.append((relative_path, class_id))
    return members
