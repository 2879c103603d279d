"""Turning what the entrant names (a folder or an archive) into the archive to upload.

A folder is packed as a .tar.gz with every file, folder and in-folder symbolic link
under it, named by its path relative to the folder (never absolute, never ``..``), so
``build.sh`` and ``run`` sit at the top level. Files keep their executable bit (mode
0755 or 0644); owners are dropped. Nothing is skipped: a link that leads outside the
folder, or a socket, pipe or device, stops the packing with a message naming it.
An existing .tar.gz, .tgz, .tar or .zip is sent as it is; the server checks it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from podium_cli.errors import CliError

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")


@dataclass(frozen=True)
class Upload:
    """The file to send: ``path`` on disk, ``name`` as the server will record it."""

    path: Path
    name: str
    packed_files: int | None = None  # None when an existing archive is sent as it is


@contextlib.contextmanager
def upload_for(source: Path) -> Iterator[Upload]:
    """The archive for ``source``; a packed folder lives in a temporary folder until exit."""
    if source.is_dir():
        name = f"{source.resolve().name or 'source'}.tar.gz"
        with tempfile.TemporaryDirectory(prefix="podium-") as scratch:
            archive = Path(scratch) / name
            count = pack_folder(source, archive)
            yield Upload(path=archive, name=name, packed_files=count)
        return
    if source.is_file():
        if not source.name.lower().endswith(ARCHIVE_SUFFIXES):
            raise CliError(
                f"{source} is neither a folder nor a .tar.gz, .tgz, .tar or .zip archive."
            )
        yield Upload(path=source, name=source.name)
        return
    raise CliError(f"{source}: no such folder or archive.")


def pack_folder(folder: Path, dest: Path) -> int:
    """Write ``folder``'s tree to ``dest`` as a .tar.gz; return how many files it holds."""
    root = folder.resolve()
    files = 0
    try:
        with tarfile.open(dest, "w:gz") as archive:
            for path in _walk(folder):
                relative = path.relative_to(folder).as_posix()
                info = _member(archive, path, relative, root)
                if info.isreg():
                    with path.open("rb") as content:
                        archive.addfile(info, content)
                else:
                    archive.addfile(info)
                files += 0 if info.isdir() else 1
    except OSError as exc:
        raise CliError(f"Cannot pack {folder}: {exc}") from exc
    return files


def _walk(folder: Path) -> Iterator[Path]:
    """Every path under ``folder`` in a stable order, folders before their contents."""
    for current, dirnames, filenames in os.walk(folder, followlinks=False, onerror=_raise):
        dirnames.sort()
        base = Path(current)
        for name in sorted([*dirnames, *filenames]):
            yield base / name


def _raise(error: OSError) -> None:
    raise error


def _member(archive: tarfile.TarFile, path: Path, relative: str, root: Path) -> tarfile.TarInfo:
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        _check_link(path, relative, root)
    elif not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise CliError(
            f"{relative} is a {_kind(mode)}, which an archive cannot carry; "
            "move it out of the folder."
        )
    info = archive.gettarinfo(str(path), arcname=relative)
    if info.islnk():  # a second name of a hard-linked file: pack its content again
        info.type, info.linkname, info.size = tarfile.REGTYPE, "", path.lstat().st_size
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = max(0, int(info.mtime))
    if stat.S_ISDIR(mode):
        info.mode = 0o755
    elif stat.S_ISREG(mode):
        info.mode = 0o755 if mode & 0o111 else 0o644
    else:
        info.mode = 0o777
    return info


def _check_link(path: Path, relative: str, root: Path) -> None:
    target = os.readlink(path)
    resolved = (path.parent.resolve() / target).resolve()
    if os.path.isabs(target) or not resolved.is_relative_to(root):
        raise CliError(
            f"{relative} is a symbolic link to {target}, outside the folder; "
            "put the file itself in the folder (links must point inside it)."
        )


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "named pipe"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device file"
