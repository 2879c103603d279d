"""What a reviewed image holds, for staff's provenance review: every regular file's size,
the largest ones with their SHA-256, and the files shaped like a table with one entry per
ImageNet validation image (a lookup the validation-data boundary forbids).

:func:`listing` reads one tar stream of the image's filesystem (pure: any iterable of
bytes); :func:`list_image` makes that stream from a created, never started, container of
the image. Nothing here decides: a flagged file is a question for staff, not a verdict.

A file is flagged as a table when it could hold one entry for each of
:data:`UNIVERSES` images: a text file with that many lines (a header or a trailing
line allowed), a NumPy array whose first dimension is that number, or a binary file
whose size is that number times a small entry size (a class index, a float, a digest).
"""

from __future__ import annotations

import hashlib
import heapq
import io
import logging
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from portal.submissions.models import Submission
from portal.submissions.review import review_record_artifacts
from scoring import engine

log = logging.getLogger(__name__)

LARGEST = 20  # the largest files listed, with their SHA-256
TABLES_MAX = 50  # flagged files listed, at most
UNIVERSES = (50_000, 10_000)  # the validation set, the official cohort's size
ENTRY_BYTES = (1, 2, 4, 8, 16, 20, 32, 64)  # an index, a float, a digest of each image
TEXT_PROBE = 64 * 1024  # bytes of a file read to tell text from binary
PAUSE_EVERY = 64 << 20  # bytes of the export read between two calls of ``pause``
_NPY_SHAPE = re.compile(rb"'shape':\s*\((\d+)")


class _Chunks(io.RawIOBase):
    """A file object over an iterable of byte chunks (for ``tarfile``'s stream mode)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._rest = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._rest:
            try:
                self._rest = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._rest))
        buffer[:size] = self._rest[:size]
        self._rest = self._rest[size:]
        return size


def _table_shape(head: bytes, size: int, lines: int, text: bool) -> str:
    """Why a file looks like a per-image table ("" when it does not)."""
    for universe in UNIVERSES:
        if text and universe <= lines <= universe + 2:
            return f"{lines:,} lines: one per image of {universe:,}?"
        if head.startswith(b"\x93NUMPY"):
            match = _NPY_SHAPE.search(head[:512])
            if match and int(match.group(1)) == universe:
                return f"a NumPy array of {universe:,} rows"
        elif not text:
            for entry in ENTRY_BYTES:
                if size == universe * entry:
                    return f"{size:,} bytes: {entry} per image of {universe:,}?"
    return ""


def _file_facts(stream: IO[bytes]) -> tuple[str, int, bytes, int]:
    """(SHA-256, size, its first bytes, its count of newlines) of one member."""
    digest = hashlib.sha256()
    head = b""
    size = lines = 0
    while chunk := stream.read(1 << 20):
        if len(head) < TEXT_PROBE:
            head += chunk[: TEXT_PROBE - len(head)]
        digest.update(chunk)
        size += len(chunk)
        lines += chunk.count(b"\n")
    return digest.hexdigest(), size, head, lines


def _is_text(head: bytes) -> bool:
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 4  # a character cut at the probe's end
    return True


def paced(
    chunks: Iterable[bytes], pause: Callable[[], object], every: int = PAUSE_EVERY
) -> Iterator[bytes]:
    """``chunks``, with ``pause()`` called before the first and after every ``every``
    bytes: the builds side's listing waits while a score holds this engine's machine
    (an export is disk and CPU work beside a timed run)."""
    pause()
    since = 0
    for chunk in chunks:
        since += len(chunk)
        if since >= every:
            pause()
            since = 0
        yield chunk


def listing(chunks: Iterable[bytes]) -> dict[str, Any]:
    """The listing of one image's filesystem tar: ``files``, ``bytes``, ``largest``
    ([{path, bytes, sha256}], largest first) and ``tables`` ([{path, bytes, sha256,
    why}]), both bounded."""
    largest: list[tuple[int, str, str]] = []
    tables: list[dict[str, Any]] = []
    files = total = 0
    with tarfile.open(fileobj=io.BufferedReader(_Chunks(chunks)), mode="r|") as archive:
        for member in archive:
            if not member.isreg():
                continue
            extracted = archive.extractfile(member)
            if extracted is None:
                continue
            sha256, size, head, lines = _file_facts(extracted)
            path = "/" + member.name.lstrip("./")
            files += 1
            total += size
            entry = (size, path, sha256)
            if len(largest) < LARGEST:
                heapq.heappush(largest, entry)
            else:
                heapq.heappushpop(largest, entry)
            why = _table_shape(head, size, lines, _is_text(head)) if size else ""
            if why and len(tables) < TABLES_MAX:
                tables.append({"path": path, "bytes": size, "sha256": sha256, "why": why})
    return {
        "files": files,
        "bytes": total,
        "largest": [
            {"path": path, "bytes": size, "sha256": sha256}
            for size, path, sha256 in sorted(largest, key=lambda e: (-e[0], e[1]))
        ],
        "tables": tables,
    }


def list_image(image: str, pause: Callable[[], object] = lambda: None) -> dict[str, Any]:
    """The listing of ``image``: a container is created from it (no network, never
    started, so nothing of the entrant's runs), exported (:func:`paced` by ``pause``)
    and removed."""
    container = engine.create_container(
        image=image, command=["/nonexistent"], entrypoint=[], network_disabled=True
    )
    try:
        return listing(paced(engine.export_container(container), pause))
    finally:
        engine.remove_container(container)


def review_listing(submission_id: int, pause: Callable[[], object] = lambda: None) -> None:
    """List a reviewed submission's image and keep the listing on its review (on the
    builds side: ``scoring.review_artifacts``). Its image by ID when this engine has it,
    else pulled by its registry reference; an image no longer anywhere is said so."""
    submission = Submission.objects.filter(pk=submission_id).first()
    if submission is None:
        return
    image = submission.image_digest or submission.image_tag
    try:
        if not (image and engine.image_exists(image)) and submission.image_ref:
            engine.pull_image(submission.image_ref)
            image = submission.image_ref
        if not image or not engine.image_exists(image):
            found: dict[str, Any] = {"error": "the submission's image is no longer kept"}
        else:
            found = list_image(image, pause)
    except engine.EngineError as exc:
        log.warning("could not list the image of submission %s: %s", submission_id, exc)
        found = {"error": f"the engine could not list the image: {exc}"}
    review_record_artifacts(submission_id=submission_id, artifacts=found)
