"""Re-encoding JPEGs with an imperceptible perturbation for verification runs (pure).

A verification run (docs/rules.md, "Verification before ranking") shows the entrant the same
cohort members re-encoded, so that an answer looked up by anything exact about a file
from the official run finds nothing. Each call draws a fresh re-encode from ``rng``:

- Decode with Pillow in the file's own colour space (YCbCr through ``draft``, gray,
  CMYK, or RGB for a file coded in RGB): no colour conversion either way. The frame
  header is first made to claim the size rounded up to whole blocks, so the edge
  blocks come out whole (:func:`_decodable_size`), and subsampled chroma is
  "un-upsampled" (:func:`_chroma_for_encoder`), so the encoder's downsampling gives
  back the file's own chroma planes. Encoded again with the same tables, the picture
  then comes back exact or nearly so (58 dB and more where we measured it), except in
  blocks whose decode clips at 0 or 255.
- Encode with fresh quantization tables: the original's, with the DC entry of every
  table moved by 1 or 2 and 2 to 4 AC entries by 1 (:func:`_fresh_tables`). The DC
  entry never becomes a divisor of itself (that would requantize the DC exactly)
  and costs at most ``_DC_BUDGET``, estimated from the decoded blocks: a coarse
  table (low quality) takes a finer step instead. The quantized and the dequantized
  coefficients change, while the file size and decoding cost stay the original's
  (within a few per cent).
- Code it as the original was coded, with ``jpegtran -copy none``: progressive stays
  progressive, arithmetic coding stays arithmetic (Pillow writes neither), optimized
  Huffman tables stay optimized and standard ones standard, and restart markers come
  at the original's interval (none without one). Nothing is added that the original
  lacks: a re-encode carries the segments a frozen file carries once staging has
  dropped its metadata (:func:`strip_metadata`), so a run cannot tell a re-encode from
  a frozen file by its segments.
- Check the result as a model would see it: its decoded pixels and its 1/8-scale
  picture (made from the DC coefficients alone) must differ from the original's, and
  its PSNR (:func:`psnr_db`) must reach ``PSNR_FLOOR_DB``. Otherwise draw again
  (``ATTEMPTS`` in all): after a PSNR below the floor with gentler tables (DC by 1,
  AC only at the highest frequencies); after an unchanged picture with one 8x8 block
  nudged by one level (:func:`_nudged`).

All metadata (EXIF, ICC, XMP, comments, thumbnails) is dropped: it would identify the
file. Staging drops it from every other staged JPEG too (:func:`strip_metadata`), so
every kind of run sees the same metadata: none. Some decoders act on an EXIF
orientation or an ICC profile, so a cohort should carry none; ``cohort_import`` copies
files as they are, and the demo cohort has none.

What it defeats: answers keyed on a file's bytes or hash, its header or metadata, its
quantization tables, its DCT coefficients (quantized or dequantized, DC alone
included) or its exact decoded pixels. What it cannot defeat, by design: a perceptual
or approximate key computed from the decoded picture (a coarse thumbnail, a rounded
histogram), since the picture is what is kept. Computing one costs a decode on the
clock, and the timing rule judges that.

Shapes kept as they are: baseline, progressive and arithmetic coding; gray, YCbCr,
RGB-coded and CMYK; 4:4:4, 4:2:2, 4:2:0 and 4:4:0 chroma (Pillow cannot write 4:4:0:
the transposed 4:2:2 picture is encoded and jpegtran transposes it back, losslessly);
any size; restart markers. Shapes changed: any other chroma sampling (4:1:1, ...)
becomes 4:4:4, its chroma tables halved as often as the floor needs; CMYK comes back
as Adobe CMYK with every component at full resolution (YCCK loses its transform).
Refused: lossless and 12-bit JPEGs and truncated files (Pillow decodes none of them
whole), and a picture no draw keeps at the floor, which we saw only for pictures of
a few blocks saved at quality 10 or below (blocks whose decode clips at 0 or 255
cannot be encoded again exactly).

Any failure is a :class:`RewriteError`: the platform's fault, never the entrant's
(jpegtran missing, exiting non-zero, warning, timing out or writing something that is
not a JPEG included). Thread-safe: callers run many rewrites at once (Pillow and
numpy release the GIL for the heavy parts; each draw runs one ``jpegtran`` process).
Linux only (memfd, pidfd), like the scoring worker.
"""

from __future__ import annotations

import io
import math
import os
import random
import select
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from PIL import Image, JpegImagePlugin

from portal.contests import rules

JPEGTRAN = "jpegtran"
PACKAGE = "libjpeg-turbo-progs"
# A JPEG starts with SOI (FF D8) followed by the next marker's FF.
JPEG_MAGIC = b"\xff\xd8\xff"
TIMEOUT_S = 60.0

# What every re-encode keeps (checked on each one): the PSNR of its decoded picture
# against the original's (measured in bench/rewrite.py and tests/scoring/test_rewrite.py).
# The number is a rule entrants read on the rules page, so it lives with the rules.
PSNR_FLOOR_DB = rules.VERIFY_PSNR_FLOOR_DB
# Draws per re-encode before giving up (normal, then gentle or nudged ones).
ATTEMPTS = 6
_DC_MOVES = (-2, -1, 1, 2)
_GENTLE_DC_MOVES = (-1, 1)
_AC_MOVES = (2, 4)  # how many AC entries of a table move (by 1), fewest and most
_GENTLE_AC_MOVES = (1, 2)
_AC_POSITIONS = range(1, 64)  # natural (row-major) order, like Pillow's tables
# The AC entries from zigzag position 40 on: the highest frequencies.
_HIGH_FREQUENCIES = [
    position for position in _AC_POSITIONS if JpegImagePlugin.zigzag_index[position] >= 40
]
_BLOCK = 8
# The most a DC entry's move may cost each component, as a mean squared error in pixel
# levels (estimated before encoding; PSNR_FLOOR_DB allows about 2 over R, G and B).
_DC_BUDGET = 0.25
# Pillow's subsampling code: (horizontal, vertical) chroma factor.
_FACTORS = {0: (1, 1), 1: (2, 1), 2: (2, 2)}
_UNBLUR_ROUNDS = 4
_UNBLUR_STEP = np.float32(4 / 3)

_SOI = 0xD8
_SOS = 0xDA
_DHT = 0xC4
_DRI = 0xDD
_COM = 0xFE
_APP0, _APP14, _APP15 = 0xE0, 0xEE, 0xEF
# The APPn segments a staged JPEG keeps: the ones jpegtran itself writes (JFIF, Adobe).
_KEPT_APP = {(_APP0, b"JFIF\x00"), (_APP14, b"Adobe")}
_STANDALONE = {0x01, *range(0xD0, 0xD8)}  # TEM and RST0-7 carry no length
# SOFn: every C0-CF except DHT (C4), JPG (C8) and DAC (CC).
_SOF = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_PROGRESSIVE_SOF = {0xC2, 0xC6, 0xCA, 0xCE}
_ARITHMETIC_SOF = set(range(0xC9, 0xD0)) - {0xCC}


class RewriteError(Exception):
    """A JPEG could not be rewritten: a platform fault (staging turns it into one)."""


class JpegtranMissing(RewriteError):
    """``jpegtran`` is not installed on this host."""


@dataclass(frozen=True)
class _Frame:
    progressive: bool
    arithmetic: bool
    # Whether its Huffman tables are its own (optimized), not the standard ones (K.3).
    optimized: bool
    mcus: int  # MCUs in an interleaved scan of the whole image
    restart: int  # the restart interval in MCUs (its DRI segment's); 0 without one
    width: int
    height: int
    factors: tuple[tuple[int, int], ...]  # (horizontal, vertical) sampling of each component
    sof_start: int  # the offset of the SOF marker's FF
    first_scan: int  # the offset of the first SOS marker's FF


def is_jpeg(data: bytes) -> bool:
    """Whether ``data`` starts like a JPEG file (by its bytes, never by its name)."""
    return data.startswith(JPEG_MAGIC)


def find_jpegtran() -> str:
    """The path of ``jpegtran`` on ``PATH``; :class:`JpegtranMissing` if there is none."""
    found = shutil.which(JPEGTRAN)
    if found is None:
        raise JpegtranMissing(
            f"{JPEGTRAN} is not installed on this host (Debian package {PACKAGE})"
        )
    return found


def _segments(data: bytes) -> list[tuple[int, int, int]]:
    """``(marker, start, end)`` of each segment from SOI up to and including SOS.

    ``start`` is the offset of the marker's FF (the last one, after any fill bytes),
    ``end`` the offset just past the segment. Raises :class:`RewriteError` for anything
    that is not a JPEG header.
    """
    if not data.startswith(b"\xff\xd8"):
        raise RewriteError("not a JPEG file (no SOI marker)")
    found = [(_SOI, 0, 2)]
    offset = 2
    while True:
        start = offset
        while offset < len(data) and data[offset] == 0xFF:  # fill bytes are legal
            offset += 1
        if offset >= len(data):
            raise RewriteError("the JPEG header ends before its first scan")
        if offset == start:
            raise RewriteError(f"malformed JPEG header at byte {offset}")
        start = offset - 1
        marker = data[offset]
        offset += 1
        if marker in _STANDALONE:
            found.append((marker, start, offset))
            continue
        if offset + 2 > len(data):
            raise RewriteError("the JPEG header ends inside a segment")
        (length,) = struct.unpack_from(">H", data, offset)
        if length < 2 or offset + length > len(data):
            raise RewriteError(f"bad segment length {length} at byte {offset}")
        offset += length
        found.append((marker, start, offset))
        if marker == _SOS:
            return found


def _frame(data: bytes) -> _Frame:
    segments = _segments(data)
    for marker, start, end in segments:
        if marker not in _SOF:
            continue
        body = data[start:end]
        # FF Cn, length (2), precision (1), height (2), width (2), components (1), then
        # per component: id (1), sampling factors (1: H << 4 | V), table (1).
        if len(body) < 10:
            raise RewriteError("truncated SOF segment")
        height, width, count = struct.unpack_from(">HHB", body, 5)
        if count == 0 or len(body) < 10 + 3 * count:
            raise RewriteError("truncated SOF segment")
        sampling = [body[11 + 3 * index] for index in range(count)]
        factors = tuple((value >> 4, value & 0x0F) for value in sampling)
        # One component: its scans are not interleaved and an MCU is one 8x8 block.
        h_max = max(h for h, _v in factors) if count > 1 else 1
        v_max = max(v for _h, v in factors) if count > 1 else 1
        if min(min(pair) for pair in factors) == 0:
            raise RewriteError("bad sampling factors in the SOF segment")
        across = -(-width // (8 * h_max))
        down = -(-height // (8 * v_max))
        return _Frame(
            progressive=marker in _PROGRESSIVE_SOF,
            arithmetic=marker in _ARITHMETIC_SOF,
            optimized=any(
                not _huffman_tables(data[begin + 4 : stop]) <= _STANDARD_HUFFMAN
                for kind, begin, stop in segments
                if kind == _DHT
            ),
            mcus=max(1, across * down),
            restart=_restart_interval(data, segments),
            width=width,
            height=height,
            factors=factors,
            sof_start=start,
            first_scan=segments[-1][1],
        )
    raise RewriteError("no frame header (SOF) before the first scan")


def _huffman_tables(body: bytes) -> set[tuple[int, bytes]]:
    """The tables a DHT segment's ``body`` defines: ``(class, counts and symbols)``.

    Each table is a byte of class (high nibble) and id, 16 code counts, then as many
    symbols as the counts add up to. The id is left out: it only names a slot.
    """
    tables = set()
    at = 0
    while at + 17 <= len(body):
        symbols = sum(body[at + 1 : at + 17])
        tables.add((body[at] >> 4, body[at + 1 : at + 17 + symbols]))
        at += 17 + symbols
    return tables


def _standard_huffman() -> frozenset[tuple[int, bytes]]:
    """The standard Huffman tables (JPEG Annex K.3), as libjpeg writes them unoptimized."""
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16)).save(buffer, format="JPEG", optimize=False)
    data = buffer.getvalue()
    found: set[tuple[int, bytes]] = set()
    for marker, start, end in _segments(data):
        if marker == _DHT:
            found |= _huffman_tables(data[start + 4 : end])
    return frozenset(found)


_STANDARD_HUFFMAN = _standard_huffman()


def _with_size(data: bytes, frame: _Frame, width: int, height: int) -> bytes:
    """``data`` with the size in its frame header (SOF) set to ``width`` x ``height``."""
    at = frame.sof_start + 5
    return data[:at] + struct.pack(">HH", height, width) + data[at + 4 :]


def _scans_interleave_all(data: bytes, frame: _Frame) -> bool:
    """Whether every scan of ``data`` codes all of its components together.

    The entropy-coded data escapes each FF byte (FF 00), so any FF DA after the first
    scan header is the header of a later scan; its fifth byte is its component count.
    """
    count = len(frame.factors)
    if count == 1:
        return False
    at = frame.first_scan - 1
    while (at := data.find(b"\xff\xda", at + 1)) >= 0:
        if at + 4 >= len(data) or data[at + 4] != count:
            return False
    return True


def _decodable_size(data: bytes, frame: _Frame, block_size: tuple[int, int]) -> tuple[int, int]:
    """The size to decode ``data`` at so that its edge blocks come out whole.

    A JPEG codes whole 8x8 blocks (whole MCUs, in a scan of all components); a decoder
    crops them to the image size. Re-encoding a cropped edge block pads it again with
    other pixels than the original encoder saw, which costs a full generation of JPEG
    loss there (down to 47 dB over a 97x61 photo at quality 75). Decoding with the
    frame header claiming the size rounded up to whole blocks gets the whole blocks the
    file codes; the re-encode keeps them and its header gets the true size back.

    Rounded up to 8 (or to the MCU, when every scan interleaves all components) the
    file codes the same blocks, so it still decodes without error; rounded up to no
    more than ``block_size``, the re-encode's own MCU (16 where its chroma is halved),
    the re-encode's blocks line up with the original's.
    """
    if any(h not in (1, 2, 4) or v not in (1, 2, 4) for h, v in frame.factors):
        return frame.width, frame.height
    h_max = max(h for h, _v in frame.factors)
    v_max = max(v for _h, v in frame.factors)
    coded = (8 * h_max, 8 * v_max) if _scans_interleave_all(data, frame) else (8, 8)
    across, down = (min(pair) for pair in zip(coded, block_size, strict=True))
    return -(-frame.width // across) * across, -(-frame.height // down) * down


def _restart_interval(data: bytes, segments: list[tuple[int, int, int]]) -> int:
    """The restart interval (MCUs) of the last DRI segment before the first scan; 0: none."""
    interval = 0
    for marker, start, end in segments:
        if marker == _DRI and end - start >= 6:
            (interval,) = struct.unpack_from(">H", data, start + 4)
    return interval


def strip_metadata(data: bytes) -> bytes:
    """``data`` without the header segments that carry metadata: every COM segment and
    every APPn segment but a JFIF APP0 or an Adobe APP14 (the ones jpegtran writes).

    Lossless: the coded picture is untouched. ``data`` itself when it is not a JPEG or
    has nothing to drop; :class:`RewriteError` for a JPEG whose header cannot be read.
    """
    if not is_jpeg(data):
        return data
    kept: list[bytes] = []
    dropped = False
    segments = _segments(data)
    for marker, start, end in segments:
        body = data[start + 4 : end]
        app = _APP0 <= marker <= _APP15
        if marker == _COM or (
            app and not any(marker == m and body.startswith(tag) for m, tag in _KEPT_APP)
        ):
            dropped = True
            continue
        kept.append(data[start:end])
    if not dropped:
        return data
    return b"".join(kept) + data[segments[-1][2] :]


def _jpegtran_arguments(frame: _Frame, *, transpose: bool) -> list[str]:
    """The jpegtran options that code a re-encode as the original (``frame``) was coded.

    Restart markers at the original's interval, none without one. ``transpose`` turns
    a re-encode made transposed (a 4:4:0 original) the right way.
    """
    arguments = ["-copy", "none"]
    if frame.restart:
        arguments += ["-restart", f"{frame.restart}B"]
    if frame.arithmetic:
        arguments.append("-arithmetic")
    elif frame.optimized or frame.progressive:  # libjpeg optimizes any progressive file
        arguments.append("-optimize")  # else the standard tables, as the original has
    if frame.progressive:
        arguments.append("-progressive")
    if transpose:
        arguments.append("-transpose")  # lossless at any size, unlike the rotations
    return arguments


@dataclass(frozen=True)
class _Picture:
    """A decoded JPEG, ready to be encoded again with other tables."""

    mode: str  # as Pillow encodes it: "L", "YCbCr", "RGB" (coded in RGB) or "CMYK"
    size: tuple[int, int]  # the image's (width, height)
    # What the encoder gets, (height, width[, components]): the image and the rest of
    # its edge blocks (see _decodable_size).
    planes: npt.NDArray[np.uint8]
    table_ids: tuple[int, ...]  # the original's quantization table of each component
    tables: dict[int, list[int]]  # the original's tables, in natural (row-major) order
    subsampling: int  # Pillow's code (0 4:4:4, 1 4:2:2, 2 4:2:0), -1 where none applies
    # Whether size and planes are transposed: a 4:4:0 original is re-encoded as the
    # 4:2:2 picture it is the transpose of (Pillow cannot write 4:4:0).
    transposed: bool
    # Whether the chroma is resampled: a sampling Pillow cannot write (4:1:1, ...) is
    # re-encoded as 4:4:4, with finer chroma tables where the floor asks for them.
    resampled: bool


def psnr_db(original: bytes, rewritten: bytes) -> float:
    """The PSNR of ``rewritten``'s decoded picture against ``original``'s, in dB.

    Both are decoded with Pillow, as a model would see them: to L (grayscale), CMYK (all
    four channels; Pillow's own CMYK to RGB conversion would hide differences) or RGB.
    ``math.inf`` when the pixels are identical; ``ValueError`` when the pictures differ
    in size or mode, ``OSError`` when one cannot be decoded.
    """
    return _psnr(_comparable(original), _comparable(rewritten))


def _comparable(data: bytes) -> npt.NDArray[np.uint8]:
    with Image.open(io.BytesIO(data)) as image:
        if image.mode in ("L", "CMYK"):
            image.load()
            return np.asarray(image)
        return np.asarray(image.convert("RGB"))


def _dc_picture(data: bytes) -> npt.NDArray[np.uint8]:
    """The picture at 1/8 scale, which libjpeg makes from the DC coefficients alone."""
    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        image.draft(image.mode, (max(1, width // _BLOCK), max(1, height // _BLOCK)))
        image.load()
        return np.asarray(image)


def _psnr(before: npt.NDArray[np.uint8], after: npt.NDArray[np.uint8]) -> float:
    if before.shape != after.shape:
        raise ValueError(f"pictures of different shapes: {before.shape} and {after.shape}")
    if np.array_equal(before, after):
        return math.inf
    difference = (before.astype(np.float32) - after).ravel()
    squares = float(np.dot(difference, difference))
    return 10.0 * math.log10(255.0**2 * difference.size / squares)


def _subsampling(frame: _Frame) -> tuple[int, bool, bool]:
    """Pillow's code for the re-encode's chroma subsampling; transposed; resampled.

    The original's sampling where Pillow writes it (4:4:4, 4:2:2, 4:2:0), or 4:4:0 as
    the transpose of 4:2:2; -1 (none) for one or four components, which Pillow writes
    all at full resolution. Any other three-component sampling (4:1:1, ...) becomes
    4:4:4, which keeps all the chroma the decoder made.
    """
    if len(frame.factors) != 3:
        return -1, False, False
    for code, (horizontal, vertical) in _FACTORS.items():
        if frame.factors == ((horizontal, vertical), (1, 1), (1, 1)):
            return code, False, False
    if frame.factors == ((1, 2), (1, 1), (1, 1)):
        return 1, True, False
    return 0, False, True


def _decode(data: bytes, frame: _Frame) -> _Picture:
    """The JPEG ``data`` decoded in its own colour space, edge blocks whole (module doc)."""
    subsampling, transposed, resampled = _subsampling(frame)
    horizontal, vertical = _FACTORS.get(subsampling, (1, 1))
    mcu = (8 * vertical, 8 * horizontal) if transposed else (8 * horizontal, 8 * vertical)
    width, height = _decodable_size(data, frame, mcu)
    whole = _with_size(data, frame, width, height)
    try:
        with Image.open(io.BytesIO(whole)) as image:
            if not isinstance(image, JpegImagePlugin.JpegImageFile):
                raise RewriteError(f"Pillow reads it as {image.format}, not as a JPEG")
            tables = {index: list(table) for index, table in image.quantization.items()}
            table_ids = tuple(layer[3] for layer in image.layer)
            coded_in_rgb = False
            if image.mode == "RGB":
                image.draft("YCbCr", image.size)  # no colour conversion either way
            try:
                image.load()
            except OSError:
                if image.mode != "YCbCr":
                    raise
                coded_in_rgb = True  # libjpeg cannot turn RGB coding into YCbCr
            mode, planes = image.mode, np.array(image)
        if coded_in_rgb:
            with Image.open(io.BytesIO(whole)) as image:
                image.load()
                mode, planes = image.mode, np.array(image)
    except RewriteError:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise RewriteError(f"Pillow cannot decode it: {exc}") from exc
    if mode not in ("L", "YCbCr", "RGB", "CMYK") or set(table_ids) - set(tables):
        raise RewriteError(f"cannot re-encode a {mode} JPEG with tables {sorted(tables)}")
    if planes.shape[:2] != (height, width):
        raise RewriteError(f"Pillow decoded {planes.shape[1]}x{planes.shape[0]} pixels")
    size = (frame.width, frame.height)
    if transposed:  # the tables too: coefficient (u, v) of a block becomes (v, u)
        planes = np.ascontiguousarray(planes.swapaxes(0, 1))
        size = (frame.height, frame.width)
        tables = {
            index: [table[_BLOCK * (at % _BLOCK) + at // _BLOCK] for at in range(_BLOCK**2)]
            for index, table in tables.items()
        }
    if mode == "YCbCr" and subsampling > 0:
        planes[:, :, 1:] = _chroma_for_encoder(planes[:, :, 1:], horizontal, vertical)
    return _Picture(mode, size, planes, table_ids, tables, subsampling, transposed, resampled)


def _chroma_for_encoder(
    chroma: npt.NDArray[np.uint8], horizontal: int, vertical: int
) -> npt.NDArray[np.uint8]:
    """Full-size chroma planes that the encoder downsamples back to the file's own.

    The decoder upsampled the file's low-resolution chroma with libjpeg's "fancy"
    (triangle) filter; averaging that back over each ``horizontal`` x ``vertical`` box,
    as the encoder does, gives the file's chroma blurred by [1/8, 3/4, 1/8] along each
    subsampled direction, and encoding the blurred planes alone costs about 40 dB on a
    colourful picture. The blur is a tridiagonal matrix with eigenvalues in [1/2, 1],
    so Richardson iteration with a step of 4/3 undoes it, a third of the error left
    after each round; the rounded result, repeated over each box, is what the encoder
    gets.
    """
    height, width = chroma.shape[:2]
    low = _box_average(chroma, horizontal, vertical)
    if vertical == 2:
        low = _unblur(low, 0, height)
    if horizontal == 2:
        low = _unblur(low, 1, width)
    rounded = np.clip(np.rint(low), 0, 255).astype(np.uint8)
    full = np.repeat(np.repeat(rounded, vertical, axis=0), horizontal, axis=1)
    return full[:height, :width]


def _box_average(
    planes: npt.NDArray[np.uint8] | npt.NDArray[np.float32], horizontal: int, vertical: int
) -> npt.NDArray[np.float32]:
    """Each box's mean, the last row and column repeated to fill a box, as libjpeg does."""
    height, width = planes.shape[:2]
    values = np.ascontiguousarray(planes, dtype=np.float32)
    if height % vertical or width % horizontal:
        edges = ((0, -height % vertical), (0, -width % horizontal), (0, 0))
        values = np.pad(values, edges, mode="edge")
    if horizontal * vertical <= 4:  # a chroma box: adding strided views is fastest
        sums = values[::vertical, ::horizontal].copy()
        for row in range(vertical):
            for column in range(horizontal):
                if row or column:
                    sums += values[row::vertical, column::horizontal]
    else:  # a block: reduceat is fastest
        sums = np.add.reduceat(values, np.arange(0, values.shape[1], horizontal), axis=1)
        sums = np.add.reduceat(sums, np.arange(0, sums.shape[0], vertical), axis=0)
    return sums / np.float32(horizontal * vertical)


def _unblur(boxed: npt.NDArray[np.float32], axis: int, full_length: int) -> npt.NDArray[np.float32]:
    """Undo, along ``axis``, the blur of upsampling by 2 then averaging pairs.

    Along that axis sample ``i`` of the blurred signal is ``3/4 c[i] + 1/8 (c[i-1] +
    c[i+1])``, the ends repeated; when the full length is odd, the last pair is one
    upsampled sample repeated, ``3/4 c[-1] + 1/4 c[-2]``.
    """
    target = np.moveaxis(boxed, axis, 0)
    low = target.copy()
    blurred = np.empty_like(low)
    last_pair_cut = full_length % 2 == 1
    for _ in range(_UNBLUR_ROUNDS):
        np.multiply(low, 0.75, out=blurred)
        blurred[1:] += 0.125 * low[:-1]
        blurred[:-1] += 0.125 * low[1:]
        blurred[0] += 0.125 * low[0]
        if last_pair_cut:
            blurred[-1] = 0.75 * low[-1] + 0.25 * low[max(len(low) - 2, 0)]
        else:
            blurred[-1] += 0.125 * low[-1]
        np.subtract(target, blurred, out=blurred)
        blurred *= _UNBLUR_STEP
        low += blurred
    return np.moveaxis(low, 0, axis)


def _moved(value: int, step: int, top: int) -> int:
    """``value + step`` kept within 1..``top`` (reflected, so it always moves)."""
    moved = value + step
    return moved if 1 <= moved <= top else value - step


def _dc_values(picture: _Picture) -> dict[int, npt.NDArray[np.float32]]:
    """Each table's dequantized DC coefficients, estimated from the decoded blocks.

    A block's DC coefficient is 8 times its mean level (less 128), rounded by the
    file to a multiple of its table's DC entry ``q``; the decoded block's mean gives it
    back to within rounding. The values of every block of every component a table
    quantizes, by table.
    """
    planes = picture.planes if picture.planes.ndim == 3 else picture.planes[:, :, None]
    means = _box_average(planes, _BLOCK, _BLOCK)
    if picture.mode == "CMYK":
        means = 255 - means  # Pillow hands over Adobe's inverted samples inverted back
    chroma = means[:, :, 1:]
    if picture.mode == "YCbCr" and picture.subsampling > 0:
        chroma = _box_average(chroma, *_FACTORS[picture.subsampling])  # 16-pixel blocks
    found: dict[int, list[npt.NDArray[np.float32]]] = {}
    for component, table_id in enumerate(picture.table_ids):
        block_means = means[:, :, 0] if component == 0 else chroma[:, :, component - 1]
        step = picture.tables[table_id][0]
        values = step * np.rint(_BLOCK * (block_means.ravel() - 128) / step)
        found.setdefault(table_id, []).append(values.astype(np.float32))
    return {table_id: np.concatenate(values) for table_id, values in found.items()}


def _dc_cost(values: npt.NDArray[np.float32], entry: int) -> float:
    """The mean squared pixel error of requantizing DC ``values`` with the DC ``entry``."""
    if values.size == 0:
        return 0.0
    errors = values - entry * np.rint(values / entry)
    return float(np.mean(np.square(errors))) / _BLOCK**2


def _fresh_dc(
    entry: int, values: npt.NDArray[np.float32], rng: random.Random, *, gentle: bool, top: int
) -> int:
    """A new DC entry for a table whose DC entry is ``entry`` (see :func:`_fresh_tables`)."""
    moves = _GENTLE_DC_MOVES if gentle else _DC_MOVES
    # Never a divisor of the entry: q' | q requantizes every DC coefficient exactly
    # (k q = (k q / q') q'), keeping the dequantized DC and so the 1/8-scale picture.
    near = [entry + move for move in moves if 1 <= entry + move <= top and entry % (entry + move)]
    fits = [candidate for candidate in near if _dc_cost(values, candidate) <= _DC_BUDGET]
    if fits:
        return rng.choice(fits)
    # A coarse table (low quality): each block's error can reach half the entry, so
    # take a finer one, the coarsest that fits (one of the two nearest, at random).
    finer = [
        candidate
        for candidate in range(entry - 3, 1, -1)
        if entry % candidate and _dc_cost(values, candidate) <= _DC_BUDGET
    ][:2]
    if finer:
        return rng.choice(finer)
    return min(near, key=lambda candidate: _dc_cost(values, candidate))


def _fresh_tables(
    picture: _Picture,
    dc_values: dict[int, npt.NDArray[np.float32]],
    rng: random.Random,
    *,
    gentle: bool,
) -> dict[int, list[int]]:
    """The original's tables with the DC entry and a few AC entries of each moved.

    The DC entry moves by 1 or 2 (by 1 when ``gentle``) where requantizing the
    original's DC coefficients (``dc_values``) with it costs at most ``_DC_BUDGET``
    (a mean squared error, in pixel levels); with a coarse table (low quality), where
    that is too much, it moves down to a finer step that fits. 2 to 4 AC entries move by
    1 (when ``gentle``, 1 or 2 of the high frequencies, where coefficients are mostly
    zero and a move costs nothing).
    """
    fresh = {}
    empty = np.zeros(0, dtype=np.float32)
    for index, table in picture.tables.items():
        top = 255 if max(table) <= 255 else 32767  # 8-bit tables stay 8-bit
        new = list(table)
        values = dc_values.get(index, empty)
        new[0] = _fresh_dc(table[0], values, rng, gentle=gentle, top=top)
        low, high = _GENTLE_AC_MOVES if gentle else _AC_MOVES
        positions = _HIGH_FREQUENCIES if gentle else _AC_POSITIONS
        for position in rng.sample(positions, rng.randint(low, high)):
            new[position] = _moved(new[position], rng.choice((-1, 1)), top)
        fresh[index] = new
    return fresh


def _nudged(
    picture: _Picture, tables: dict[int, list[int]], rng: random.Random
) -> tuple[dict[int, list[int]], npt.NDArray[np.uint8]]:
    """``tables`` and ``picture.planes`` with one 8x8 block moved by one pixel level.

    For a picture where no table change shows, in the pixels (a uniform mid-gray: every
    coefficient zero) or at 1/8 scale (DC coefficients all moved by less than a pixel
    level). The block, one the picture shows, of the first component moves
    by 1 level, its DC coefficient (8 times its mean) by 8; that component's table gets
    a DC entry of 7 or less (the smallest that does not divide the original's, see
    :func:`_fresh_dc`), so the move survives quantization and shows.
    """
    first_table = picture.table_ids[0]
    entry = picture.tables[first_table][0]
    fresh = dict(tables)
    fresh[first_table] = [
        next(step for step in range(2, 256) if entry % step),
        *tables[first_table][1:],
    ]
    planes = picture.planes.copy()
    first = planes if planes.ndim == 2 else planes[:, :, 0]
    width, height = picture.size
    top, left = rng.randrange(0, height, _BLOCK), rng.randrange(0, width, _BLOCK)
    block = first[top : top + _BLOCK, left : left + _BLOCK].astype(np.int32)
    step = -1 if block.mean() >= 128 else 1
    first[top : top + _BLOCK, left : left + _BLOCK] = np.clip(block + step, 0, 255)
    return fresh, planes


def _encode(
    picture: _Picture, tables: dict[int, list[int]], planes: npt.NDArray[np.uint8]
) -> bytes:
    """``planes`` encoded by Pillow (baseline, Huffman) with ``tables`` in the original's
    slots, its header saying the picture's size (the edge blocks' rest is coded, unseen)."""
    # Pillow gives component i table slot i, and the components past the last slot the
    # last one: drop trailing slots that repeat the table of the component before.
    ids = list(picture.table_ids)
    while len(ids) > 1 and ids[-1] == ids[-2]:
        ids.pop()
    image = Image.frombytes(picture.mode, (planes.shape[1], planes.shape[0]), planes.tobytes())
    buffer = io.BytesIO()
    image.save(
        buffer,
        format="JPEG",
        qtables=[tables[index] for index in ids],
        subsampling=picture.subsampling,
        keep_rgb=picture.mode == "RGB",
    )
    encoded = buffer.getvalue()
    if image.size == picture.size:
        return encoded
    return _with_size(encoded, _frame(encoded), *picture.size)


def rewrite_jpeg_data(data: bytes, rng: random.Random, *, jpegtran: str | None = None) -> bytes:
    """A perturbed re-encode of the JPEG ``data``, coded as ``data`` was (see the module doc).

    New bytes, tables, coefficients and pixels, at a PSNR of at least ``PSNR_FLOOR_DB``:
    each draw is decoded and checked, and drawn again (gentler, or nudged) up to
    ``ATTEMPTS`` times. ``rng`` draws the tables; pass ``secrets.SystemRandom()`` in
    production (a seeded ``random.Random`` only in tests). ``jpegtran`` is its path
    (:func:`find_jpegtran` when omitted). Raises :class:`RewriteError`.
    """
    if not is_jpeg(data):
        raise RewriteError("not a JPEG file")
    frame = _frame(data)
    program = jpegtran or find_jpegtran()
    picture = _decode(data, frame)
    try:
        before, before_dc = _comparable(data), _dc_picture(data)
    except (OSError, ValueError) as exc:
        raise RewriteError(f"Pillow cannot decode it: {exc}") from exc
    dc_values = _dc_values(picture)
    gentle = nudge = False
    finer = 0  # halvings of the chroma tables (a sampling Pillow cannot write)
    best = -math.inf
    for _attempt in range(ATTEMPTS):
        tables = _fresh_tables(picture, dc_values, rng, gentle=gentle)
        for index in set(picture.table_ids[1:]) if finer else ():
            tables[index] = [max(1, entry >> finer) for entry in tables[index]]
        planes = picture.planes
        if nudge:
            tables, planes = _nudged(picture, tables, rng)
        try:
            encoded = _encode(picture, tables, planes)
        except (OSError, ValueError) as exc:
            raise RewriteError(f"Pillow cannot encode it: {exc}") from exc
        arguments = _jpegtran_arguments(frame, transpose=picture.transposed)
        rewritten = _transcoded(program, arguments, encoded)
        try:
            psnr = _psnr(before, _comparable(rewritten))
            same_dc = np.array_equal(before_dc, _dc_picture(rewritten))
        except (OSError, ValueError) as exc:
            raise RewriteError(f"Pillow cannot decode its re-encode: {exc}") from exc
        if psnr == math.inf or same_dc:
            nudge = True  # a picture too flat, or too coarsely quantized, for tables to show
        elif psnr < PSNR_FLOOR_DB:
            gentle = True
            finer += picture.resampled
            best = max(best, psnr)
        else:
            return rewritten
    detail = "none changed the picture" if best == -math.inf else f"the best: {best:.1f} dB"
    raise RewriteError(
        f"no perturbation in {ATTEMPTS} draws changed the picture and its 1/8-scale"
        f" picture and kept {PSNR_FLOOR_DB:.0f} dB ({detail})"
    )


def _transcoded(program: str, arguments: list[str], data: bytes) -> bytes:
    """``data`` passed through jpegtran with ``arguments``; :class:`RewriteError` on a fault."""
    try:
        status, output, errors = _run([program, *arguments], data)
    except FileNotFoundError:
        raise JpegtranMissing(
            f"{program} is not installed on the scoring host (Debian package {PACKAGE})"
        ) from None
    except subprocess.TimeoutExpired:
        raise RewriteError(f"{JPEGTRAN} took more than {TIMEOUT_S:.0f} s") from None
    except OSError as exc:
        raise RewriteError(f"cannot run {program}: {exc}") from exc
    message = errors.decode(errors="replace").strip()[:500]
    if status != 0:
        # jpegtran exits 1 on an error, 2 when it only warned.
        raise RewriteError(f"{JPEGTRAN} {' '.join(arguments)} exited {status}: {message}")
    if message:  # warnings do not always change the status; treat them alike
        raise RewriteError(f"{JPEGTRAN} {' '.join(arguments)} warned: {message}")
    if not is_jpeg(output):
        raise RewriteError(f"{JPEGTRAN} wrote something that is not a JPEG")
    return output


def _run(command: list[str], data: bytes) -> tuple[int, bytes, bytes]:
    """Run ``command`` with ``data`` as stdin: ``(status, stdout, stderr)``.

    Linux only (memfd, pidfd), like the scoring worker. The standard streams are files
    in memory, not pipes, and the exit is awaited on a pidfd: ``subprocess.run`` with a
    timeout polls with sleeps of 1 ms and more, which doubled the time of a rewrite.
    Raises ``subprocess.TimeoutExpired`` (the process killed) after ``TIMEOUT_S``.
    """
    streams = [os.memfd_create(name, os.MFD_CLOEXEC) for name in ("stdin", "stdout", "stderr")]
    try:
        stdin, stdout, stderr = streams
        view = memoryview(data)
        while view:
            view = view[os.write(stdin, view) :]
        os.lseek(stdin, 0, os.SEEK_SET)
        process = subprocess.Popen(command, stdin=stdin, stdout=stdout, stderr=stderr)
        exited = False
        try:
            exited = _wait_for_exit(process, TIMEOUT_S)
        finally:
            if not exited:
                process.kill()
            status = process.wait()
        if not exited:
            raise subprocess.TimeoutExpired(command, TIMEOUT_S)
        return status, _read_all(stdout), _read_all(stderr)
    finally:
        for fd in streams:
            os.close(fd)


def _wait_for_exit(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Whether ``process`` exited within ``timeout_s`` (it is not reaped here)."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except OSError:  # a kernel before 5.3: the standard library's polling wait
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(int(timeout_s * 1000)))
    finally:
        os.close(pidfd)


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def write_file(dest: Path, data: bytes) -> None:
    """Create ``dest`` (it must not exist; never through a symlink) with ``data``, mode 0644.

    The mode is set explicitly: the scoring container's uid owns nothing on the host,
    and the worker's umask must not decide what it can read.
    """
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), 0o644)
        handle.write(data)
