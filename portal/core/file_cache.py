"""The shared cache of a deployment without Redis: files under the data folder.

Without Redis the broker is the filesystem one, so every process (gunicorn workers, Celery)
already shares the data folder; counters kept in files there are counted by all of them
alike, with no database round trip on pages that read the cache.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import IO, TYPE_CHECKING, Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.filebased import FileBasedCache

if TYPE_CHECKING:

    class _FileCache(FileBasedCache):
        """The private part of Django's file cache this module builds on (not in the stubs)."""

        _dir: str
        _max_entries: int

        def _createdir(self) -> None: ...
        def _cull(self) -> None: ...
        def _is_expired(self, f: IO[bytes]) -> bool: ...
        def _key_to_file(self, key: str, version: int | None = None) -> str: ...
        def _list_cache_files(self) -> list[str]: ...
        def _write_content(self, file: IO[bytes], timeout: Any, value: Any) -> None: ...

else:
    _FileCache = FileBasedCache


class SharedFileCache(_FileCache):
    """Django's file cache with the two guarantees shared counters need.

    * ``add`` is atomic across processes: the entry is written to a temporary file and
      hard-linked into place, which fails when the name exists. allauth locks each counter
      with ``add``; Django's own checks, then writes, so two processes could both take the
      lock, and concurrent guesses would overwrite each other's counts.
    * Past ``MAX_ENTRIES``, expired entries are removed first; Django's random third is
      removed only when that is not enough, so stale keys do not push out live counts.
    """

    def add(
        self,
        key: str,
        value: Any,
        timeout: float | None = DEFAULT_TIMEOUT,
        version: int | None = None,
    ) -> bool:
        if self.has_key(key, version):  # also removes an expired entry of that name
            return False
        self._createdir()
        self._cull()
        descriptor, staged = tempfile.mkstemp(dir=self._dir)
        try:
            with open(descriptor, "wb") as handle:
                self._write_content(handle, timeout, value)
            os.link(staged, self._key_to_file(key, version))
        except FileExistsError:
            return False
        finally:
            os.remove(staged)
        return True

    def _cull(self) -> None:
        if len(self._list_cache_files()) < self._max_entries:
            return
        for name in self._list_cache_files():
            with contextlib.suppress(FileNotFoundError), open(name, "rb") as entry:
                self._is_expired(entry)  # removes the file when expired
        super()._cull()
