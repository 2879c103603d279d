"""Lossless JPEG rewriting for verification runs (pure; no Django).

A verification run (rules "Verification before ranking") shows the entrant the same
cohort members with new bytes, so that answers keyed on a file's bytes or hash in an
earlier run find nothing. The rewrite:

- runs ``jpegtran -copy none -optimize -restart NB``: the DCT coefficients, quantization
  tables, sampling factors and colour space are copied untouched, so a decoder
  produces exactly the pixels it produced from the original; the entropy-coded data
  changes (optimized Huffman tables, restart markers every ``N`` MCUs with ``N`` drawn
  at random) and all metadata (EXIF, ICC, comments, thumbnails) goes;
- keeps the coding the original used: a progressive original stays progressive and an
  arithmetic-coded one stays arithmetic-coded (jpegtran's default would make both
  baseline Huffman), so decoding costs about what it did in the official run;
- inserts a COM (comment) segment of 16 to 64 random bytes after the leading APPn
  segments (JFIF or Adobe; never before them, since format sniffers read the JFIF tag
  at a fixed offset), so no two rewrites of one file are alike and nobody can
  precompute the variants.

It keeps what a decoder sees, and that is all it does: metadata that some decoders
act on (an EXIF orientation, an ICC profile) is dropped with the rest (it would also
identify the file), so a cohort should carry none. ``cohort_import`` copies files as
they are; the demo cohort has no such metadata.

What it defeats: answers keyed on a file's bytes, hash or metadata. What it cannot
defeat: answers keyed on what the file decodes to (pixels or DCT coefficients), since
those stay the same by design; getting at them costs at least an entropy decode, on
the clock, and the shuffle and fresh names still hold.

Any failure (jpegtran missing, exiting non-zero, warning, timing out, or writing
something that is not a JPEG) is a :class:`RewriteError`: the platform's fault, never
the entrant's. A file jpegtran only warns about is refused too, since a damaged file
may not decode to the same pixels once rewritten.

Thread-safe: callers run many rewrites at once (each is one ``jpegtran`` process).
Linux only (memfd, pidfd), like the scoring worker.
"""

from __future__ import annotations

import os
import random
import select
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

JPEGTRAN = "jpegtran"
PACKAGE = "libjpeg-turbo-progs"
# A JPEG starts with SOI (FF D8) followed by the next marker's FF.
JPEG_MAGIC = b"\xff\xd8\xff"
COMMENT_BYTES = (16, 64)
# The DRI segment holds the restart interval in 16 bits.
MAX_RESTART_BLOCKS = 0xFFFF
TIMEOUT_S = 60.0

_SOI = 0xD8
_SOS = 0xDA
_COM = 0xFE
_APP0, _APP15 = 0xE0, 0xEF
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
    mcus: int  # MCUs in an interleaved scan of the whole image


def is_jpeg(data: bytes) -> bool:
    """Whether ``data`` starts like a JPEG file (by its bytes, never by its name)."""
    return data.startswith(JPEG_MAGIC)


def find_jpegtran() -> str:
    """The path of ``jpegtran`` on ``PATH``; :class:`JpegtranMissing` if there is none."""
    found = shutil.which(JPEGTRAN)
    if found is None:
        raise JpegtranMissing(
            f"{JPEGTRAN} is not installed on the scoring host (Debian package {PACKAGE})"
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
    for marker, start, end in _segments(data):
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
        # One component: its scans are not interleaved and an MCU is one 8x8 block.
        h_max = max(value >> 4 for value in sampling) if count > 1 else 1
        v_max = max(value & 0x0F for value in sampling) if count > 1 else 1
        if h_max == 0 or v_max == 0:
            raise RewriteError("bad sampling factors in the SOF segment")
        across = -(-width // (8 * h_max))
        down = -(-height // (8 * v_max))
        return _Frame(
            progressive=marker in _PROGRESSIVE_SOF,
            arithmetic=marker in _ARITHMETIC_SOF,
            mcus=max(1, across * down),
        )
    raise RewriteError("no frame header (SOF) before the first scan")


def _with_comment(data: bytes, comment: bytes) -> bytes:
    """``data`` with a COM segment holding ``comment`` after its leading APPn segments."""
    at = 2
    for marker, _start, end in _segments(data)[1:]:
        if not _APP0 <= marker <= _APP15:
            break
        at = end
    segment = bytes([0xFF, _COM]) + struct.pack(">H", len(comment) + 2) + comment
    return data[:at] + segment + data[at:]


def jpegtran_arguments(data: bytes, rng: random.Random) -> list[str]:
    """The jpegtran options for one rewrite of ``data`` (random: see the module doc)."""
    frame = _frame(data)
    restart = rng.randint(1, min(frame.mcus, MAX_RESTART_BLOCKS))
    arguments = ["-copy", "none", "-restart", f"{restart}B"]
    # Huffman tables are optimized; an arithmetic-coded file has none to optimize.
    arguments.append("-arithmetic" if frame.arithmetic else "-optimize")
    if frame.progressive:
        arguments.append("-progressive")
    return arguments


def rewrite_jpeg_data(data: bytes, rng: random.Random, *, jpegtran: str | None = None) -> bytes:
    """A lossless rewrite of the JPEG ``data``: same pixels, new bytes (see the module doc).

    ``rng`` draws the restart interval and the comment; pass ``secrets.SystemRandom()``
    in production (a seeded ``random.Random`` only in tests). ``jpegtran`` is its path
    (:func:`find_jpegtran` when omitted). Raises :class:`RewriteError`.
    """
    if not is_jpeg(data):
        raise RewriteError("not a JPEG file")
    arguments = jpegtran_arguments(data, rng)
    program = jpegtran or find_jpegtran()
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
        # jpegtran exits 1 on an error, 2 when it only warned (a damaged file).
        raise RewriteError(f"{JPEGTRAN} {' '.join(arguments)} exited {status}: {message}")
    if message:  # warnings do not always change the status; treat them alike
        raise RewriteError(f"{JPEGTRAN} {' '.join(arguments)} warned: {message}")
    if not is_jpeg(output):
        raise RewriteError(f"{JPEGTRAN} wrote something that is not a JPEG")
    low, high = COMMENT_BYTES
    return _with_comment(output, rng.randbytes(rng.randint(low, high)))


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


def rewrite_jpeg(src: Path, dest: Path, rng: random.Random, *, jpegtran: str | None = None) -> None:
    """Write a lossless rewrite of the JPEG ``src`` to the new file ``dest`` (mode 0644).

    Raises :class:`RewriteError` when ``src`` is not a JPEG (by its bytes) or cannot be
    rewritten, and ``OSError`` when a file cannot be read or written. Nothing is
    written on failure. (Staging reads and hashes the member itself, then calls
    :func:`rewrite_jpeg_data` on the very bytes it checked.)
    """
    write_file(dest, rewrite_jpeg_data(src.read_bytes(), rng, jpegtran=jpegtran))
