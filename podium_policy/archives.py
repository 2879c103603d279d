"""Safe handling of uploaded source archives (pure: no Django, no Docker).

Entrants upload ``.tar.gz``, ``.tar`` or ``.zip`` archives. Nothing is ever unpacked on
the host: :func:`detect_format` reads the magic bytes (never the file name),
:func:`inspect_archive` reads every header and refuses anything unsafe, and
:func:`write_normalized_tar` re-packs the members as a plain tar stream (owned by root,
under one prefix folder, checked again member by member) that the builder hands to
Docker's ``put_archive``.

Every refusal is an :class:`ArchiveError` whose text is one sentence telling the entrant
what to fix, naming the offending member. A damaged archive is an :class:`ArchiveError`
too, never a raw library exception; only a failure to write ``dest`` (the platform's
side) escapes as it is.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import math
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal, Protocol, Self, cast

__all__ = [
    "ArchiveError",
    "ArchiveFormat",
    "Member",
    "ZipDirectory",
    "check_zip_directory",
    "detect_format",
    "inspect_archive",
    "read_zip_directory",
    "write_normalized_tar",
]

ArchiveFormat = Literal["tar.gz", "tar", "zip"]
MemberKind = Literal["file", "dir", "symlink"]

DEFAULT_MAX_MEMBERS = 100_000
DEFAULT_MAX_UNPACKED_BYTES = 8 * 1024**3
ENTRYPOINTS = ("build.sh", "run")

_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
_TAR_MAGIC_AT = 257
_MAX_META_BYTES = 1024 * 1024  # pax / GNU long-name headers are read into memory
_MAX_TRAILING_BYTES = 16 * 1024 * 1024  # gzip data after the tar's end-of-archive marker
_MAX_LINK_TARGET = 4096
_MAX_PATH_BYTES = 4095
_MAX_NAME_BYTES = 255
_MAX_SYMLINK_HOPS = 40
_COPY_CHUNK = 1024 * 1024

# The zip end records, as zipfile reads them (see read_zip_directory).
_ZIP_END = struct.Struct("<4s4H2LH")
_ZIP_END_SIGNATURE = b"PK\x05\x06"
_ZIP_END_SEARCH = (1 << 16) + _ZIP_END.size  # the record, then a comment of up to 64 KiB
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"
_ZIP64_END = struct.Struct("<4sQ2H2L4Q")
_ZIP64_END_SIGNATURE = b"PK\x06\x06"
# A central directory header: signature, then the name, extra and comment lengths.
_ZIP_ENTRY = struct.Struct("<4s24x3H12x")
_ZIP_ENTRY_SIGNATURE = b"PK\x01\x02"
# zipfile reads the whole central directory into memory: per declared entry, room for the
# header, a name as long as a member may have and generous extra fields and comment.
_MAX_ZIP_ENTRY_BYTES = _ZIP_ENTRY.size + 4096 + 2048
_MAX_ZIP_DIRECTORY_BYTES = 64 * 1024 * 1024

_NOT_AN_ARCHIVE = "The upload is not a .tar.gz, .tar or .zip archive; pack the source as one."
_DAMAGED = "The archive is damaged or truncated; pack it again and upload it again."
_NO_ENTRYPOINT = "The archive needs a `build.sh` or a `run` at its top level."

# What the tar, gzip and zip readers raise on bad input (ArchiveError is caught first).
_READ_ERRORS: tuple[type[BaseException], ...] = (
    tarfile.TarError,
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    EOFError,
    zlib.error,
    OSError,
    ValueError,
    NotImplementedError,
    RuntimeError,
    OverflowError,
)


class ArchiveError(ValueError):
    """The archive cannot be used; ``str(exc)`` is one sentence for the entrant."""


@dataclass(frozen=True)
class Member:
    """One archive member as it will be unpacked.

    ``path`` is the normalized relative POSIX path (no leading ``./``, no ``.`` or empty
    components); ``mode`` holds the permission bits as archived (``0o7777 & mode``);
    ``size`` is 0 for folders and links; ``link_target`` is set for symbolic links only.
    """

    path: str
    kind: MemberKind
    size: int
    mode: int
    link_target: str = ""


def _shown(name: str) -> str:
    """A member name fit for a message: control characters escaped, long names cut."""
    text = "".join(_shown_char(ch) for ch in name[:200])
    return text + ("..." if len(name) > 200 else "")


def _shown_char(ch: str) -> str:
    if 0xDC80 <= ord(ch) <= 0xDCFF:  # an undecodable byte (surrogateescape)
        return f"\\x{ord(ch) - 0xDC00:02x}"
    return ch if ch.isprintable() else f"\\u{ord(ch):04x}"


def _too_many_members(max_members: int) -> str:
    return f"The archive has more than {max_members:,} members; pack fewer files."


def _human_bytes(count: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= size:
            return f"{count / size:g} {unit}"
    return f"{count} bytes"


# Format detection ---------------------------------------------------------------------


class _Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


def _read_up_to(stream: _Readable, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = stream.read(count - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _is_tar_header(block: bytes) -> bool:
    return block[_TAR_MAGIC_AT : _TAR_MAGIC_AT + 5] == b"ustar"


def detect_format(path: Path) -> ArchiveFormat:
    """The archive format of ``path``, by its magic bytes (the file name is ignored).

    gzip (``1f 8b``) must hold a tar (``ustar`` at offset 257 of the decompressed data);
    ``ustar`` at offset 257 is a plain tar; ``PK\\x03\\x04`` (or ``PK\\x05\\x06``, an
    empty zip) is a zip. Anything else raises :class:`ArchiveError`. An unreadable
    ``path`` raises ``OSError`` (a platform fault: the upload is the platform's file).
    """
    with path.open("rb") as raw:
        head = _read_up_to(raw, 512)
        if head.startswith(_GZIP_MAGIC):
            raw.seek(0)
            try:
                with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                    inner = _read_up_to(unzipped, 512)
            except (OSError, EOFError, zlib.error) as exc:
                raise ArchiveError(_DAMAGED) from exc
            if _is_tar_header(inner):
                return "tar.gz"
            raise ArchiveError(
                "The upload is gzip-compressed but holds no tar archive; "
                "upload a .tar.gz, .tar or .zip archive."
            )
    if _is_tar_header(head):
        return "tar"
    if head.startswith(_ZIP_MAGICS):
        return "zip"
    raise ArchiveError(_NOT_AN_ARCHIVE)


def _require_format(path: Path, fmt: ArchiveFormat) -> None:
    found = detect_format(path)
    if found != fmt:
        raise ArchiveError(f"The upload is a {found} archive, not a {fmt} one; upload it again.")


# Member names and the rules every member obeys --------------------------------------------


def _check_name_characters(name: str, shown: str, what: str = "name") -> None:
    if "\x00" in name:
        raise ArchiveError(f"`{shown}` has a NUL character in its {what}; rename it.")
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in name):
        raise ArchiveError(f"`{shown}` has a {what} that is not valid UTF-8; rename it.")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise ArchiveError(f"`{shown}` has a control character in its {what}; rename it.")
    if "\\" in name:
        raise ArchiveError(
            f"`{shown}` has a backslash in its {what}; use forward slashes (/) between folders."
        )


def _normalize_path(raw: str) -> str:
    """The member's normalized relative path; ``""`` for the archive root (``.``, ``./``)."""
    shown = _shown(raw)
    _check_name_characters(raw, shown)
    if raw.startswith("/"):
        raise ArchiveError(
            f"`{shown}` has an absolute path; pack paths relative to the source folder."
        )
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(
            f"`{shown}` has a `..` component; pack only files inside the source folder."
        )
    path = "/".join(parts)
    if len(path.encode()) > _MAX_PATH_BYTES or any(
        len(part.encode()) > _MAX_NAME_BYTES for part in parts
    ):
        raise ArchiveError(f"`{shown}` has a name that is too long; shorten it.")
    return path


def _check_link_target(path: str, target: str) -> None:
    """A symbolic link must point, by its own text, somewhere inside the archive root."""
    shown = _shown(path)
    if not target:
        raise ArchiveError(f"`{shown}` is a symbolic link without a target; remove it.")
    _check_name_characters(target, shown, "link target")
    if target.startswith("/"):
        raise ArchiveError(
            f"`{shown}` is a symbolic link to the absolute path `{_shown(target)}`; "
            "links must point inside the archive."
        )
    depth = path.count("/")  # folders above the link
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                raise ArchiveError(
                    f"`{shown}` is a symbolic link to `{_shown(target)}`, which leads outside "
                    "the archive; links must point inside it."
                )
        elif part not in ("", "."):
            depth += 1


def _escapes_through_links(path: str, links: dict[str, str]) -> bool:
    """Whether resolving the link at ``path`` the way the kernel would, following the
    archive's other links, ever leaves the root. Raises on a loop."""
    current = path.split("/")[:-1]
    pending = links[path].split("/")
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not current:
                return True
            current.pop()
            continue
        current.append(part)
        target = links.get("/".join(current))
        if target is not None:
            hops += 1
            if hops > _MAX_SYMLINK_HOPS:
                raise ArchiveError(
                    f"`{_shown(path)}` is part of a symbolic link loop; remove the loop."
                )
            if target.startswith("/"):
                return True
            current.pop()
            pending = target.split("/") + pending
    return False


@dataclass
class _Validator:
    """The rules across members: counts, sizes, duplicates, folders vs files, links."""

    max_members: int
    max_unpacked_bytes: int
    entries: int = 0
    unpacked_bytes: int = 0
    kinds: dict[str, MemberKind] = field(default_factory=dict)
    implied_dirs: set[str] = field(default_factory=set)
    links: dict[str, str] = field(default_factory=dict)

    def count_entry(self) -> None:
        self.entries += 1
        if self.entries > self.max_members:
            raise ArchiveError(_too_many_members(self.max_members))

    def add(self, member: Member) -> None:
        shown = _shown(member.path)
        if member.path in self.kinds:
            raise ArchiveError(f"`{shown}` appears twice in the archive; pack each path once.")
        parts = member.path.split("/")
        for end in range(1, len(parts)):
            parent = "/".join(parts[:end])
            kind = self.kinds.get(parent)
            if kind == "symlink":
                raise ArchiveError(
                    f"`{shown}` is inside `{_shown(parent)}`, which is a symbolic link; "
                    "pack the real folder instead."
                )
            if kind == "file":
                raise ArchiveError(
                    f"`{shown}` is inside `{_shown(parent)}`, which is a file; pack each path once."
                )
        if member.kind != "dir" and member.path in self.implied_dirs:
            raise ArchiveError(
                f"`{shown}` is both a {member.kind} and a folder in the archive; "
                "pack each path once."
            )
        if member.kind == "symlink":
            _check_link_target(member.path, member.link_target)
            self.links[member.path] = member.link_target
        if member.kind == "file":
            self.unpacked_bytes += member.size
            if self.unpacked_bytes > self.max_unpacked_bytes:
                raise ArchiveError(
                    "The archive unpacks to more than "
                    f"{_human_bytes(self.max_unpacked_bytes)}; leave large files out."
                )
        self.kinds[member.path] = member.kind
        self.implied_dirs.update("/".join(parts[:end]) for end in range(1, len(parts)))

    def finish(self, *, require_entrypoint: bool) -> None:
        for path in self.links:
            if _escapes_through_links(path, self.links):
                raise ArchiveError(
                    f"`{_shown(path)}` is a symbolic link that leads outside the archive "
                    "through other links; links must point inside it."
                )
        if require_entrypoint and not any(
            self.kinds.get(name) in ("file", "symlink") for name in ENTRYPOINTS
        ):
            raise ArchiveError(_NO_ENTRYPOINT)


# Reading members ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    member: Member
    mtime: int
    open_data: Callable[[], IO[bytes]] | None  # files only; valid until the next entry


@contextmanager
def _reading() -> Iterator[None]:
    """Turn the readers' own exceptions into :class:`ArchiveError`."""
    try:
        yield
    except ArchiveError:
        raise
    except _READ_ERRORS as exc:
        raise ArchiveError(_DAMAGED) from exc


def _clean_mtime(value: float) -> int:
    return int(value) if math.isfinite(value) and 0 <= value < 2**33 else 0


_HeaderError = tarfile.HeaderError
# tarfile raises this for an all-zero block, the end-of-archive marker (not in the stubs).
_EOF_HEADER_ERROR: type[Exception] = tarfile.EOFHeaderError  # type: ignore[attr-defined]


class _TarReader(tarfile.TarFile):
    end_error: tarfile.HeaderError | None = None  # what ended the member list


class _CheckedTarInfo(tarfile.TarInfo):
    """Refuses oversized metadata headers before ``tarfile`` reads them into memory, and
    records why the member list ended (``tarfile`` treats a damaged header after the
    first one as a silent end of the archive)."""

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Self:
        info = super().frombuf(buf, encoding, errors)
        metadata = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
        if (
            info.type in (*metadata, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
            and info.size > _MAX_META_BYTES
        ):
            raise ArchiveError(
                "The archive has an oversized extended header; pack it again with a "
                "standard tar tool."
            )
        return info

    @classmethod
    def fromtarfile(cls, tarfile: tarfile.TarFile) -> Self:
        try:
            return super().fromtarfile(tarfile)
        except _HeaderError as exc:
            if isinstance(tarfile, _TarReader):
                tarfile.end_error = exc
            raise


def _tar_member(info: tarfile.TarInfo) -> Member | None:
    path = _normalize_path(info.name)
    shown = _shown(path or info.name)
    if info.islnk():
        raise ArchiveError(
            f"`{shown}` is a hard link; replace it with a copy of the file or a symbolic link."
        )
    if info.ischr() or info.isblk():
        raise ArchiveError(f"`{shown}` is a device file; remove it from the archive.")
    if info.isfifo():
        raise ArchiveError(f"`{shown}` is a FIFO (named pipe); remove it from the archive.")
    kind: MemberKind
    if info.isdir():
        kind = "dir"
    elif info.issym():
        kind = "symlink"
    elif info.isreg():
        kind = "file"
    else:
        raise ArchiveError(
            f"`{shown}` has an unsupported tar entry type; pack plain files, folders and "
            "symbolic links only."
        )
    if not path:
        if kind == "dir":
            return None  # the root folder itself ("./")
        raise ArchiveError(f"A {kind} in the archive has an empty name; rename it.")
    return Member(
        path=path,
        kind=kind,
        size=info.size if kind == "file" else 0,
        mode=info.mode & 0o7777,
        link_target=info.linkname if kind == "symlink" else "",
    )


def _tar_opener(archive: tarfile.TarFile, info: tarfile.TarInfo) -> Callable[[], IO[bytes]]:
    def open_data() -> IO[bytes]:
        data = archive.extractfile(info)
        if data is None:  # pragma: no cover - isreg() members always have data
            raise ArchiveError(_DAMAGED)
        return data

    return open_data


def _walk_tar(path: Path, gzipped: bool, validator: _Validator) -> Iterator[_Entry]:
    with path.open("rb") as raw, _reading():
        unzipped = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else None
        source = cast(IO[bytes], unzipped) if unzipped is not None else raw
        with _TarReader.open(
            fileobj=source,
            mode="r|",
            tarinfo=_CheckedTarInfo,
            encoding="utf-8",
            errors="surrogateescape",
        ) as archive:
            while (info := archive.next()) is not None:
                # Stream mode needs no member history: keep memory flat on huge archives.
                archive.members.clear()  # type: ignore[attr-defined]
                validator.count_entry()
                member = _tar_member(info)
                if member is None:
                    continue
                validator.add(member)
                opener = _tar_opener(archive, info) if member.kind == "file" else None
                yield _Entry(member, _clean_mtime(info.mtime), opener)
            if not isinstance(archive.end_error, _EOF_HEADER_ERROR):
                raise ArchiveError(_DAMAGED)  # a damaged header or no end-of-archive marker
        if unzipped is not None:  # read to the end so that gzip checks its CRC and length
            trailing = 0
            while chunk := unzipped.read(_COPY_CHUNK):
                trailing += len(chunk)
                if trailing > _MAX_TRAILING_BYTES:
                    raise ArchiveError(
                        "The archive has too much data after its end; pack it again."
                    )


def _zip_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Member | None:
    raw_name = info.orig_filename  # zipfile cuts `filename` at a NUL; the original keeps it
    path = _normalize_path(raw_name)
    shown = _shown(path or raw_name)
    if info.flag_bits & 0x1:
        raise ArchiveError(f"`{shown}` is encrypted; upload the archive without a password.")
    unix_mode = info.external_attr >> 16
    file_type = stat.S_IFMT(unix_mode)
    if stat.S_ISCHR(unix_mode) or stat.S_ISBLK(unix_mode):
        raise ArchiveError(f"`{shown}` is a device file; remove it from the archive.")
    if stat.S_ISFIFO(unix_mode):
        raise ArchiveError(f"`{shown}` is a FIFO (named pipe); remove it from the archive.")
    if stat.S_ISSOCK(unix_mode):
        raise ArchiveError(f"`{shown}` is a socket; remove it from the archive.")
    kind: MemberKind
    if raw_name.endswith("/") or stat.S_ISDIR(unix_mode):
        kind = "dir"
    elif stat.S_ISLNK(unix_mode):
        kind = "symlink"
    elif file_type in (0, stat.S_IFREG):
        kind = "file"
    else:
        raise ArchiveError(
            f"`{shown}` has an unsupported file type; pack plain files, folders and "
            "symbolic links only."
        )
    if not path:
        if kind == "dir":
            return None
        raise ArchiveError(f"A {kind} in the archive has an empty name; rename it.")
    mode = unix_mode & 0o7777 if unix_mode else (0o755 if kind == "dir" else 0o644)
    target = ""
    if kind == "symlink":
        if info.file_size > _MAX_LINK_TARGET:
            raise ArchiveError(f"`{shown}` is a symbolic link with a too long target.")
        with _open_zip_member(archive, info, shown) as data:
            raw_target = _read_up_to(data, info.file_size + 1)
        try:
            target = raw_target.decode()
        except UnicodeDecodeError as exc:
            raise ArchiveError(
                f"`{shown}` has a link target that is not valid UTF-8; fix the link."
            ) from exc
    return Member(
        path=path,
        kind=kind,
        size=info.file_size if kind == "file" else 0,
        mode=mode,
        link_target=target,
    )


def _open_zip_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, shown: str) -> IO[bytes]:
    with _reading():
        try:
            return archive.open(info)
        except NotImplementedError as exc:
            raise ArchiveError(
                f"`{shown}` uses a compression method that cannot be read here; "
                "pack it with ordinary (deflate) compression."
            ) from exc


def _zip_mtime(info: zipfile.ZipInfo) -> int:
    try:
        return int(dt.datetime(*info.date_time, tzinfo=dt.UTC).timestamp())
    except (ValueError, OverflowError):
        return 0


def _zip_opener(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, shown: str
) -> Callable[[], IO[bytes]]:
    def open_data() -> IO[bytes]:
        return _open_zip_member(archive, info, shown)

    return open_data


@dataclass(frozen=True)
class ZipDirectory:
    """A zip's central directory as its end records declare it.

    ``entries`` is the larger of the two counts the record ``zipfile`` uses declares (this
    disk's, and the total); ``start`` is where ``zipfile`` will read the directory from,
    ``size`` how many bytes it will read into memory there.
    """

    entries: int
    start: int
    size: int


def read_zip_directory(raw: IO[bytes]) -> ZipDirectory:
    """The central directory that ``zipfile.ZipFile(raw)`` would load, read from the end
    records alone (at most 64 KiB and 100 bytes from the end of ``raw``).

    It finds the records as ``zipfile`` does: the end-of-central-directory record at the very
    end, or else the last one in the final 64 KiB (behind a comment); then, when a ZIP64
    locator sits right before it, the ZIP64 end record before that, whose count and size
    replace the 16- and 32-bit ones. No end record or a multi-disk archive is
    :class:`ArchiveError` (damaged); a ``start`` before the file's is left for the caller.
    """
    file_size = raw.seek(0, io.SEEK_END)
    if file_size < _ZIP_END.size:
        raise ArchiveError(_DAMAGED)
    raw.seek(file_size - _ZIP_END.size)
    record = raw.read(_ZIP_END.size)
    location = file_size - _ZIP_END.size
    if not (record.startswith(_ZIP_END_SIGNATURE) and record.endswith(b"\0\0")):
        search_from = max(file_size - _ZIP_END_SEARCH, 0)
        raw.seek(search_from)
        window = raw.read(_ZIP_END_SEARCH)
        found = window.rfind(_ZIP_END_SIGNATURE)
        record = window[found : found + _ZIP_END.size]
        if found < 0 or len(record) != _ZIP_END.size:
            raise ArchiveError(_DAMAGED)
        location = search_from + found
    _, _, _, disk_entries, total_entries, size, _, _ = _ZIP_END.unpack(record)
    directory = ZipDirectory(max(disk_entries, total_entries), location - size, size)
    zip64 = _read_zip64_directory(raw, location)
    return directory if zip64 is None else zip64


def _read_zip64_directory(raw: IO[bytes], location: int) -> ZipDirectory | None:
    """The ZIP64 end record right before the end record at ``location``, if there is one."""
    locator_at = location - _ZIP64_LOCATOR.size
    if locator_at < 0:
        return None
    raw.seek(locator_at)
    locator = raw.read(_ZIP64_LOCATOR.size)
    if len(locator) != _ZIP64_LOCATOR.size:
        return None
    signature, disk, _, disks = _ZIP64_LOCATOR.unpack(locator)
    if signature != _ZIP64_LOCATOR_SIGNATURE:
        return None
    record_at = locator_at - _ZIP64_END.size
    if disk != 0 or disks > 1 or record_at < 0:
        raise ArchiveError(_DAMAGED)
    raw.seek(record_at)
    record = raw.read(_ZIP64_END.size)
    if len(record) != _ZIP64_END.size:
        return None
    signature, _, _, _, _, _, disk_entries, total_entries, size, _ = _ZIP64_END.unpack(record)
    if signature != _ZIP64_END_SIGNATURE:
        return None
    return ZipDirectory(max(disk_entries, total_entries), record_at - size, size)


def check_zip_directory(raw: IO[bytes], *, max_members: int) -> int:
    """Refuse, before ``zipfile`` loads it, a central directory too large to hold in memory;
    return how many entries it has.

    Refused with the member-count sentence: a declared entry count over ``max_members``;
    a directory larger than its declared entries can fill (a generous size per entry) or
    than 64 MiB; more than ``max_members`` entry headers in it, whatever the count says
    (``zipfile`` reads headers until the declared size is used up, ignoring the count).
    The headers are walked one at a time, so memory stays flat. A header that is cut
    short or lacks its signature (``zipfile`` would refuse it too) is damage.
    """
    directory = read_zip_directory(raw)
    size_cap = min(directory.entries * _MAX_ZIP_ENTRY_BYTES, _MAX_ZIP_DIRECTORY_BYTES)
    if directory.entries > max_members or directory.size > size_cap:
        raise ArchiveError(_too_many_members(max_members))
    if directory.start < 0:  # zipfile: "Bad offset for central directory"
        raise ArchiveError(_DAMAGED)
    raw.seek(directory.start)
    entries = walked = 0
    while walked < directory.size:
        if entries == max_members:
            raise ArchiveError(_too_many_members(max_members))
        header = raw.read(_ZIP_ENTRY.size)
        if walked + _ZIP_ENTRY.size > directory.size or len(header) != _ZIP_ENTRY.size:
            raise ArchiveError(_DAMAGED)
        signature, name_bytes, extra_bytes, comment_bytes = _ZIP_ENTRY.unpack(header)
        if signature != _ZIP_ENTRY_SIGNATURE:
            raise ArchiveError(_DAMAGED)
        entries += 1
        rest = name_bytes + extra_bytes + comment_bytes
        walked += _ZIP_ENTRY.size + rest
        raw.seek(rest, io.SEEK_CUR)
    return entries


def _walk_zip(path: Path, validator: _Validator, *, verify: bool) -> Iterator[_Entry]:
    with path.open("rb") as raw, _reading():
        # zipfile parses the whole central directory on opening: bound it first.
        check_zip_directory(raw, max_members=validator.max_members)
        with zipfile.ZipFile(raw) as archive:
            for info in archive.infolist():
                validator.count_entry()
                member = _zip_member(archive, info)
                if member is None:
                    continue
                validator.add(member)
                opener = None
                if member.kind == "file":
                    opener = _zip_opener(archive, info, _shown(member.path))
                    if verify:  # reads the local header: its name and the compression method
                        opener().close()
                yield _Entry(member, _zip_mtime(info), opener)


def _walk(
    path: Path, fmt: ArchiveFormat, validator: _Validator, *, verify: bool
) -> Iterator[_Entry]:
    if fmt == "zip":
        return _walk_zip(path, validator, verify=verify)
    return _walk_tar(path, fmt == "tar.gz", validator)


def inspect_archive(
    path: Path,
    fmt: ArchiveFormat,
    *,
    max_members: int = DEFAULT_MAX_MEMBERS,
    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES,
    require_entrypoint: bool = True,
) -> list[Member]:
    """Every member of the archive, in archive order, after checking that it is safe to
    unpack; nothing is extracted.

    Refused with :class:`ArchiveError`: a format other than ``fmt`` (by magic bytes);
    absolute paths, ``..`` components, names with NUL, control characters, backslashes or
    invalid UTF-8; hard links, device files, FIFOs, sockets and other special entries;
    symbolic links whose target is absolute or leads outside the root (also through other
    links, or in a loop); members inside a symbolic link or a file; duplicate paths; more
    than ``max_members`` entries; more than ``max_unpacked_bytes`` of file data; encrypted
    or unreadably compressed zip members; any damage or truncation; and, unless
    ``require_entrypoint`` is false (an environment's build context), an archive without a
    top-level ``build.sh`` or ``run``.

    A leading ``./`` is normalized away (``tar czf x.tgz -C dir .`` works) and the root
    entry itself is not listed. Zip members keep the unix mode of their external
    attributes (0o644 for files and 0o755 for folders when there is none), and a zip
    member marked ``S_IFLNK`` is a symbolic link.
    """
    validator = _Validator(max_members, max_unpacked_bytes)
    _require_format(path, fmt)
    members = [entry.member for entry in _walk(path, fmt, validator, verify=True)]
    validator.finish(require_entrypoint=require_entrypoint)
    return members


# Writing the normalized tar -------------------------------------------------------------


class _ExactReader:
    """A member's data, exactly ``size`` bytes; any shortfall or read error is the
    archive's fault (:class:`ArchiveError`), never mistaken for a failure to write."""

    def __init__(self, data: IO[bytes], size: int, shown: str) -> None:
        self.data = data
        self.remaining = size
        self.shown = shown

    def read(self, count: int = -1) -> bytes:
        if count < 0 or count > self.remaining:
            count = self.remaining
        chunks: list[bytes] = []
        wanted = count
        try:
            while wanted > 0:
                chunk = self.data.read(wanted)
                if not chunk:
                    raise ArchiveError(
                        f"`{self.shown}` is truncated in the archive; pack it again."
                    )
                chunks.append(chunk)
                wanted -= len(chunk)
            self.remaining -= count
            if self.remaining == 0:
                self.data.read(1)  # reaching the end makes zip verify the member's CRC
        except ArchiveError:
            raise
        except _READ_ERRORS as exc:
            raise ArchiveError(f"`{self.shown}` is damaged in the archive; pack it again.") from exc
        return b"".join(chunks)


def _output_mode(member: Member) -> int:
    """Permissions in the normalized tar: as archived, minus setuid, setgid and sticky
    bits, plus what the non-root runtime needs to read (0o644 files, 0o755 folders).
    No execute bit is ever added to a file."""
    if member.kind == "symlink":
        return 0o777
    base = 0o755 if member.kind == "dir" else 0o644
    return (member.mode & 0o777) | base


def _check_prefix(prefix: str) -> str:
    parts = prefix.split("/")
    if not prefix or prefix.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"prefix must be a plain relative path, got {prefix!r}")
    _check_name_characters(prefix, _shown(prefix))
    return prefix


def write_normalized_tar(
    src: Path, fmt: ArchiveFormat, dest: IO[bytes], *, prefix: str = "submission"
) -> None:
    """Re-pack the archive at ``src`` as an uncompressed tar stream written to ``dest``.

    The stream starts with the folder ``prefix/`` and holds every member under it (Docker's
    ``put_archive`` at ``/`` then puts the source at ``/submission/...``), owned by uid 0 /
    gid 0 with no user or group names, mtimes kept, modes as :func:`_output_mode` says,
    and no extended attributes. Members are streamed one by one; no file is held in
    memory whole.

    Every member is checked again as it is copied, with the rules and default limits of
    :func:`inspect_archive` (except the ``build.sh``/``run`` rule, which is the
    inspection's). On :class:`ArchiveError` part of the stream may already be written
    and the end-of-archive marker is missing: discard ``dest``. Errors writing ``dest``
    propagate unchanged. ``prefix`` must be a plain relative path (``ValueError``).
    """
    root = _check_prefix(prefix)
    validator = _Validator(DEFAULT_MAX_MEMBERS, DEFAULT_MAX_UNPACKED_BYTES)
    _require_format(src, fmt)
    with tarfile.open(fileobj=dest, mode="w|", format=tarfile.PAX_FORMAT, encoding="utf-8") as out:
        out.addfile(_tar_info(root, tarfile.DIRTYPE, mode=0o755, mtime=0))
        for entry in _walk(src, fmt, validator, verify=False):
            member = entry.member
            name = f"{root}/{member.path}"
            mode = _output_mode(member)
            if member.kind == "dir":
                out.addfile(_tar_info(name, tarfile.DIRTYPE, mode=mode, mtime=entry.mtime))
            elif member.kind == "symlink":
                info = _tar_info(name, tarfile.SYMTYPE, mode=mode, mtime=entry.mtime)
                info.linkname = member.link_target
                out.addfile(info)
            else:
                info = _tar_info(name, tarfile.REGTYPE, mode=mode, mtime=entry.mtime)
                info.size = member.size
                if entry.open_data is None:  # pragma: no cover - files always carry an opener
                    raise ArchiveError(_DAMAGED)
                with entry.open_data() as data:
                    out.addfile(info, _ExactReader(data, member.size, _shown(member.path)))
        validator.finish(require_entrypoint=False)


def _tar_info(name: str, kind: bytes, *, mode: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
