"""A size-capped build log that the web can tail while the build runs.

Entrants control what their builds print, so every log Podium keeps is bounded: once
``cap_bytes`` are written the log ends with one line ``[log truncated at N bytes]``
and later writes are dropped. Each write is flushed at once (the web reads the file
with ``storage.read_tail`` while the build is still going).
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from django.conf import settings


def _cut(data: bytes, room: int) -> bytes:
    """The first ``room`` bytes of ``data``, without splitting a UTF-8 sequence."""
    end = room
    while 0 < end < len(data) and (data[end] & 0xC0) == 0x80:
        end -= 1
    return data[:end]


class CappedLog:
    """Write text (or raw bytes) to ``path``, stopping at ``cap_bytes``.

    Usable as a context manager; the file is created (with its folder) and truncated
    when the log opens, so a rebuild starts a fresh log. Writes are thread-safe (a log
    streaming thread and the build's own status lines share one log), and a write after
    :meth:`close` is silently dropped, so a late callback from a cancelled build cannot
    fail. The file holds at most ``cap_bytes`` bytes of content plus the final
    truncation line.
    """

    def __init__(self, path: Path, cap_bytes: int | None = None) -> None:
        self.path = path
        self.cap_bytes = int(settings.PODIUM_LOG_CAP_BYTES if cap_bytes is None else cap_bytes)
        self.written = 0
        self.truncated = False
        self._last_byte = b"\n"
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO | None = path.open("wb")

    def __enter__(self) -> CappedLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def write(self, text: str) -> None:
        """Append ``text`` (UTF-8); the signature fits ``engine.build_image(on_log=...)``."""
        self.write_bytes(text.encode("utf-8", errors="replace"))

    def write_bytes(self, data: bytes) -> None:
        """Append raw bytes (a container's log stream), up to the cap."""
        if not data:
            return
        with self._lock:
            handle = self._file
            if handle is None or self.truncated:
                return
            room = self.cap_bytes - self.written
            kept = data if len(data) <= room else _cut(data, room)
            if kept:
                handle.write(kept)
                self.written += len(kept)
                self._last_byte = kept[-1:]
            if len(kept) < len(data):
                newline = b"" if self._last_byte == b"\n" else b"\n"
                handle.write(newline + f"[log truncated at {self.cap_bytes} bytes]\n".encode())
                self.truncated = True
            handle.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
