"""Uploaded source archives: format detection, inspection and the normalized tar (pure)."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import posixpath
import stat
import struct
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podium_policy.archives import (
    ArchiveError,
    Member,
    check_zip_directory,
    detect_format,
    inspect_archive,
    read_zip_directory,
    write_normalized_tar,
)

BUILD_SH = b"#!/bin/sh\nset -e\ncc -O2 -o run main.c\n"
MAIN_C = b"int main(void) { return 0; }\n"
MTIME = 1_786_000_000

Entry = tuple[tarfile.TarInfo, bytes | None]


def file_entry(name: str, data: bytes = b"x", mode: int = 0o644) -> Entry:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = MTIME
    return info, data


def special_entry(name: str, kind: bytes, *, linkname: str = "", mode: int = 0o755) -> Entry:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.mode = mode
    info.mtime = MTIME
    return info, None


def dir_entry(name: str, mode: int = 0o755) -> Entry:
    return special_entry(name, tarfile.DIRTYPE, mode=mode)


def symlink_entry(name: str, target: str) -> Entry:
    return special_entry(name, tarfile.SYMTYPE, linkname=target, mode=0o777)


def tar_bytes(entries: Sequence[Entry]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for info, data in entries:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def write_tar(path: Path, entries: Sequence[Entry], *, gzipped: bool = True) -> Path:
    data = tar_bytes(entries)
    path.write_bytes(gzip.compress(data) if gzipped else data)
    return path


def write_zip(path: Path, entries: Sequence[tuple[str, bytes, int]]) -> Path:
    """``(name, data, unix st_mode)``; st_mode 0 writes only MS-DOS attributes, as Windows
    tools do (no unix mode at all)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data, st_mode in entries:
            info = zipfile.ZipInfo(name, date_time=(2026, 8, 12, 3, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            dos_attributes = 0x10 if name.endswith("/") else 0x20  # directory / archive
            info.external_attr = st_mode << 16 if st_mode else dos_attributes
            with archive.open(info, "w") as member:  # writestr would fill in a mode
                member.write(data)
    return path


def refusal(path: Path, fmt: str | None = None, **limits: int) -> str:
    with pytest.raises(ArchiveError) as caught:
        inspect_archive(path, fmt or detect_format(path), **limits)
    message = str(caught.value)
    assert message.endswith(".")
    return message


def normalized(src: Path, prefix: str = "submission") -> list[tuple[tarfile.TarInfo, bytes]]:
    buffer = io.BytesIO()
    write_normalized_tar(src, detect_format(src), buffer, prefix=prefix)
    buffer.seek(0)
    out = []
    with tarfile.open(fileobj=buffer, mode="r:") as archive:
        for info in archive:
            data = archive.extractfile(info)
            out.append((info, data.read() if data is not None else b""))
    return out


@pytest.fixture
def good_tgz(tmp_path: Path) -> Path:
    return write_tar(
        tmp_path / "source.tgz",
        [
            dir_entry("."),
            file_entry("./build.sh", BUILD_SH, 0o755),
            dir_entry("./src"),
            file_entry("./src/main.c", MAIN_C),
            symlink_entry("./src/current", "main.c"),
        ],
    )


# Format detection ----------------------------------------------------------------------


def test_detects_each_format_by_its_magic_bytes_not_its_name(tmp_path: Path) -> None:
    entries = [file_entry("build.sh", BUILD_SH)]
    assert detect_format(write_tar(tmp_path / "a.zip", entries)) == "tar.gz"
    assert detect_format(write_tar(tmp_path / "b.tar.gz", entries, gzipped=False)) == "tar"
    assert detect_format(write_zip(tmp_path / "c.tar", [("build.sh", BUILD_SH, 0)])) == "zip"
    assert detect_format(write_zip(tmp_path / "empty.zip", [])) == "zip"


def test_a_gzip_that_holds_no_tar_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "source.tar.gz"
    path.write_bytes(gzip.compress(b"just some text, not a tar archive\n" * 40))
    with pytest.raises(ArchiveError, match="gzip-compressed but holds no tar archive"):
        detect_format(path)


@pytest.mark.parametrize("content", [b"", b"hello", b"\x7fELF" + bytes(600), b"BZh91AY&SY"])
def test_anything_else_is_not_an_archive(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "source.tar.gz"
    path.write_bytes(content)
    with pytest.raises(ArchiveError) as caught:
        detect_format(path)
    assert "is not a .tar.gz, .tar or .zip archive" in str(caught.value)


def test_inspecting_with_the_wrong_format_is_refused(good_tgz: Path) -> None:
    with pytest.raises(ArchiveError, match="not a zip"):
        inspect_archive(good_tgz, "zip")


# Inspection: what passes ---------------------------------------------------------------


def test_leading_dot_slash_is_normalized_and_the_root_entry_dropped(good_tgz: Path) -> None:
    assert inspect_archive(good_tgz, "tar.gz") == [
        Member("build.sh", "file", len(BUILD_SH), 0o755),
        Member("src", "dir", 0, 0o755),
        Member("src/main.c", "file", len(MAIN_C), 0o644),
        Member("src/current", "symlink", 0, 0o777, "main.c"),
    ]


def test_an_archive_made_by_tar_dash_c_dot_works(tmp_path: Path) -> None:
    folder = tmp_path / "kit"
    (folder / "model").mkdir(parents=True)
    (folder / "run").write_bytes(b'#!/bin/sh\nexec python3 infer.py "$@"\n')
    (folder / "run").chmod(0o755)
    (folder / "model" / "weights.bin").write_bytes(bytes(range(256)) * 10)
    path = tmp_path / "kit.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        archive.add(folder, arcname=".")
    paths = {m.path: m for m in inspect_archive(path, detect_format(path))}
    assert set(paths) == {"run", "model", "model/weights.bin"}
    assert paths["run"].mode == 0o755


def test_a_top_level_run_alone_is_enough(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "a.tar", [file_entry("run", b"#!/bin/sh\n", 0o755)], gzipped=False)
    assert [m.path for m in inspect_archive(path, "tar")] == ["run"]


def test_a_symlink_pointing_inside_is_fine(tmp_path: Path) -> None:
    path = write_tar(
        tmp_path / "a.tgz",
        [
            file_entry("build.sh", BUILD_SH),
            file_entry("lib/v2/model.bin"),
            symlink_entry("lib/current", "v2/model.bin"),
            symlink_entry("lib/v2/up", "../../build.sh"),
            symlink_entry("model", "./lib/current"),
        ],
    )
    assert len(inspect_archive(path, "tar.gz")) == 5


def test_the_environment_context_may_lack_an_entrypoint(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "ctx.tgz", [file_entry("requirements.txt", b"numpy\n")])
    members = inspect_archive(path, "tar.gz", require_entrypoint=False)
    assert [m.path for m in members] == ["requirements.txt"]


# Inspection: every refusal --------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (symlink_entry("passwd", "/etc/passwd"), "`passwd` is a symbolic link to the absolute"),
        (symlink_entry("a", "../../x"), "`a` is a symbolic link to `../../x`, which leads outside"),
        (symlink_entry("sub/a", "../../x"), "`sub/a` is a symbolic link to `../../x`"),
        (symlink_entry("a", "sub/../../x"), "leads outside"),
        (symlink_entry("a", ""), "without a target"),
        (special_entry("tty", tarfile.CHRTYPE), "`tty` is a device file"),
        (special_entry("sda", tarfile.BLKTYPE), "`sda` is a device file"),
        (special_entry("pipe", tarfile.FIFOTYPE), "`pipe` is a FIFO"),
        (
            special_entry("copy", tarfile.LNKTYPE, linkname="build.sh"),
            "`copy` is a hard link",
        ),
        (special_entry("vol", b"V"), "unsupported tar entry"),  # a GNU volume header
        (file_entry("../evil"), "`../evil` has a `..` component"),
        (file_entry("src/../../evil"), "has a `..` component"),
        (file_entry("/abs"), "`/abs` has an absolute path"),
        (file_entry("src\\..\\..\\evil"), "has a backslash in its name"),
        (file_entry("bad\nname"), "has a control character"),
        (file_entry("nul\x00" + "long" * 30), "NUL character"),  # in a pax path
    ],
)
def test_unsafe_tar_members_are_refused_by_name(
    tmp_path: Path, entry: Entry, expected: str
) -> None:
    path = write_tar(tmp_path / "a.tgz", [file_entry("build.sh", BUILD_SH), entry])
    assert expected in refusal(path)


def test_duplicate_paths_are_refused(tmp_path: Path) -> None:
    path = write_tar(
        tmp_path / "a.tgz",
        [file_entry("build.sh", BUILD_SH), file_entry("./src/x"), file_entry("src//x")],
    )
    assert "`src/x` appears twice" in refusal(path)


def test_a_member_inside_a_symlinked_folder_is_refused(tmp_path: Path) -> None:
    path = write_tar(
        tmp_path / "a.tgz",
        [file_entry("build.sh", BUILD_SH), symlink_entry("etc", "sub"), file_entry("etc/passwd")],
    )
    assert "`etc/passwd` is inside `etc`, which is a symbolic link" in refusal(path)


def test_a_file_used_as_a_folder_is_refused(tmp_path: Path) -> None:
    later_file = write_tar(
        tmp_path / "a.tgz", [file_entry("build.sh", BUILD_SH), file_entry("a/b"), file_entry("a")]
    )
    assert "`a` is both a file and a folder" in refusal(later_file)
    earlier_file = write_tar(
        tmp_path / "b.tgz", [file_entry("build.sh", BUILD_SH), file_entry("a"), file_entry("a/b")]
    )
    assert "`a/b` is inside `a`, which is a file" in refusal(earlier_file)


def test_a_symlink_that_escapes_through_another_symlink_is_refused(tmp_path: Path) -> None:
    # Each link alone stays inside, but a -> sub/d/../x resolves sub/d -> .. first.
    path = write_tar(
        tmp_path / "a.tgz",
        [
            file_entry("build.sh", BUILD_SH),
            symlink_entry("a", "sub/d/../../x"),
            symlink_entry("sub/d", ".."),
        ],
    )
    assert "`a` is a symbolic link that leads outside the archive through other links" in (
        refusal(path)
    )


def test_a_symlink_loop_is_refused(tmp_path: Path) -> None:
    path = write_tar(
        tmp_path / "a.tgz",
        [file_entry("build.sh", BUILD_SH), symlink_entry("a", "b"), symlink_entry("b", "a")],
    )
    assert "symbolic link loop" in refusal(path)


def test_an_archive_without_an_entrypoint_is_refused(tmp_path: Path) -> None:
    path = write_tar(
        tmp_path / "a.tgz",
        [file_entry("src/build.sh", BUILD_SH), dir_entry("run"), file_entry("run/x")],
    )
    assert refusal(path) == "The archive needs a `build.sh` or a `run` at its top level."


def test_too_many_members_are_refused(tmp_path: Path) -> None:
    entries = [file_entry("build.sh", BUILD_SH)] + [file_entry(f"f{i}") for i in range(5)]
    tgz = write_tar(tmp_path / "a.tgz", entries)
    assert "more than 5 members" in refusal(tgz, max_members=5)
    assert len(inspect_archive(tgz, "tar.gz", max_members=6)) == 6
    zipped = write_zip(tmp_path / "a.zip", [(info.name, data or b"", 0) for info, data in entries])
    assert "more than 5 members" in refusal(zipped, max_members=5)


def _zip_end(data: bytes) -> int:
    return data.rindex(b"PK\x05\x06")


def test_a_zip_with_more_headers_than_its_end_record_declares_is_refused_unopened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # zipfile reads headers until the directory's declared size is used up, whatever the
    # declared count: ten headers behind a count of two still become ten members.
    entries = [("build.sh", BUILD_SH, 0)] + [(f"f{i}", b"x", 0) for i in range(9)]
    data = bytearray(write_zip(tmp_path / "a.zip", entries).read_bytes())
    end = _zip_end(bytes(data))
    data[end + 8 : end + 12] = struct.pack("<2H", 2, 2)
    path = tmp_path / "b.zip"
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as archive:
        assert len(archive.infolist()) == 10
    monkeypatch.setattr(zipfile, "ZipFile", mock.Mock(side_effect=AssertionError("opened")))

    assert refusal(path, "zip", max_members=5) == (
        "The archive has more than 5 members; pack fewer files."
    )


def test_a_zip_directory_larger_than_its_count_can_fill_is_refused() -> None:
    # One declared entry in a 1 MiB directory (behind a 1 MiB prefix, so it fits the file).
    directory = b"PK\x01\x02" + b"\0" * (1024 * 1024 - 4)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(directory), 0, 0)
    raw = io.BytesIO(b"PK\x03\x04" + directory + end)

    assert read_zip_directory(raw).entries == 1
    with pytest.raises(ArchiveError, match="more than 100,000 members"):
        check_zip_directory(raw, max_members=100_000)


@settings(max_examples=80, deadline=None)
@given(
    names=st.lists(st.text(alphabet="abc/._-é", min_size=1, max_size=30), max_size=40, unique=True),
    archive_comment=st.binary(max_size=300).filter(lambda comment: b"PK" not in comment),
    member_comment=st.binary(max_size=40),
    prefix=st.binary(max_size=64),
    zip64=st.booleans(),
)
def test_the_zip_precheck_counts_what_zipfile_reads(
    names: list[str], archive_comment: bytes, member_comment: bytes, prefix: bytes, zip64: bool
) -> None:
    buffer = io.BytesIO()
    buffer.write(prefix)  # a stub before the zip, as self-extracting archives have
    # A low file-count limit makes zipfile write ZIP64 end records for a handful of members.
    with (
        mock.patch.object(zipfile, "ZIP_FILECOUNT_LIMIT", 0 if zip64 else 0xFFFF),
        zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive,
    ):
        archive.comment = archive_comment
        for name in names:
            info = zipfile.ZipInfo(name)
            info.comment = member_comment
            archive.writestr(info, name.encode() * 3)
    data = buffer.getvalue()
    end = len(data) - 22 - len(archive_comment)
    assert (data[end - 20 : end - 16] == b"PK\x06\x07") == (zip64 and bool(names))
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            count = len(archive.infolist())
    except zipfile.BadZipFile:
        # Python's own reader cannot read some archives it wrote (a ZIP64 end record
        # whose locator it misreads): then the upload is refused whole, with a reason.
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "a.zip"
            path.write_bytes(data)
            with pytest.raises(ArchiveError):
                inspect_archive(path, "zip", require_entrypoint=False)
        return

    assert read_zip_directory(io.BytesIO(data)).entries == count
    assert check_zip_directory(io.BytesIO(data), max_members=count) == count
    if count:
        with pytest.raises(ArchiveError, match=f"more than {count - 1:,} members"):
            check_zip_directory(io.BytesIO(data), max_members=count - 1)


def test_more_unpacked_bytes_than_the_cap_are_refused(tmp_path: Path) -> None:
    entries = [file_entry("build.sh", b"x" * 600), file_entry("weights.bin", b"\0" * 500)]
    tgz = write_tar(tmp_path / "a.tgz", entries)
    assert "unpacks to more than 1 KiB" in refusal(tgz, max_unpacked_bytes=1024)
    assert len(inspect_archive(tgz, "tar.gz", max_unpacked_bytes=1100)) == 2


def test_a_zip_bomb_is_refused_before_anything_is_inflated(tmp_path: Path) -> None:
    path = write_zip(
        tmp_path / "bomb.zip",
        [("build.sh", BUILD_SH, 0)] + [(f"zeros{i}", b"\0" * 2_000_000, 0) for i in range(5)],
    )
    assert path.stat().st_size < 100_000
    assert "unpacks to more than 8 MiB" in refusal(path, max_unpacked_bytes=8 * 1024**2)


def test_an_oversized_pax_header_is_refused_without_reading_it(tmp_path: Path) -> None:
    info, data = file_entry("build.sh", BUILD_SH)
    info.pax_headers = {"comment": "x" * (2 * 1024 * 1024)}
    assert "oversized extended header" in refusal(write_tar(tmp_path / "a.tgz", [(info, data)]))


# Damaged archives --------------------------------------------------------------------------


def test_a_truncated_gzip_is_refused(tmp_path: Path, good_tgz: Path) -> None:
    data = good_tgz.read_bytes()
    for cut in (len(data) // 2, len(data) - 4):
        path = tmp_path / f"cut{cut}.tgz"
        path.write_bytes(data[:cut])
        message = refusal(path, "tar.gz")
        assert message == "The archive is damaged or truncated; pack it again and upload it again."


def test_a_gzip_with_a_bad_crc_is_refused(tmp_path: Path, good_tgz: Path) -> None:
    data = bytearray(good_tgz.read_bytes())
    data[-8] ^= 0xFF  # the CRC32 in the gzip trailer
    path = tmp_path / "crc.tgz"
    path.write_bytes(bytes(data))
    assert "damaged or truncated" in refusal(path, "tar.gz")


def test_a_damaged_header_inside_a_tar_is_refused(tmp_path: Path) -> None:
    data = bytearray(tar_bytes([file_entry("build.sh", BUILD_SH), file_entry("second", b"y" * 10)]))
    second_header = data.index(b"second")
    data[second_header + 148 : second_header + 156] = b"9999999\0"  # a wrong checksum
    path = tmp_path / "a.tar"
    path.write_bytes(bytes(data))
    assert "damaged or truncated" in refusal(path, "tar")


@pytest.mark.parametrize("keep_blocks", [3, 4])
def test_a_tar_cut_short_is_refused(tmp_path: Path, keep_blocks: int) -> None:
    # header + 1 data block of build.sh, then the next header: cut inside or right after.
    data = tar_bytes([file_entry("build.sh", BUILD_SH), file_entry("x", b"z" * 2000)])
    path = tmp_path / "a.tar"
    path.write_bytes(data[: keep_blocks * 512])
    assert "damaged or truncated" in refusal(path, "tar")


def test_a_zip_with_a_broken_central_directory_is_refused(tmp_path: Path) -> None:
    good = write_zip(tmp_path / "good.zip", [("build.sh", BUILD_SH, 0o100755)]).read_bytes()
    path = tmp_path / "broken.zip"
    path.write_bytes(good[:-30])
    assert "damaged or truncated" in refusal(path, "zip")


def test_a_zip_whose_local_header_disagrees_is_refused(tmp_path: Path) -> None:
    data = write_zip(tmp_path / "a.zip", [("build.sh", BUILD_SH, 0)]).read_bytes()
    local_name = data.index(b"build.sh")  # the first copy is the local header's
    path = tmp_path / "b.zip"
    path.write_bytes(data[:local_name] + b"evil.sh!" + data[local_name + 8 :])
    assert "damaged or truncated" in refusal(path, "zip")


def test_a_zip_member_with_a_bad_crc_fails_at_repacking(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("build.sh", BUILD_SH)
    data = bytearray(path.read_bytes())
    data[data.index(b"cc -O2")] ^= 0x01  # flip a bit of the stored content
    path.write_bytes(bytes(data))
    with pytest.raises(ArchiveError, match=r"`build\.sh` is damaged in the archive"):
        write_normalized_tar(path, "zip", io.BytesIO())


# Zip specifics ------------------------------------------------------------------------------


def test_zip_keeps_unix_modes_and_defaults_when_there_are_none(tmp_path: Path) -> None:
    path = write_zip(
        tmp_path / "a.zip",
        [
            ("run", b"#!/bin/sh\n", stat.S_IFREG | 0o755),
            ("build.sh", BUILD_SH, stat.S_IFREG | 0o700),
            ("data/", b"", 0),
            ("data/notes.txt", b"hello", 0),
        ],
    )
    members = {m.path: m for m in inspect_archive(path, "zip")}
    assert members["run"] == Member("run", "file", 10, 0o755)
    assert members["build.sh"].mode == 0o700
    assert members["data"] == Member("data", "dir", 0, 0o755)
    assert members["data/notes.txt"].mode == 0o644


def test_zip_symlinks_are_symlinks_and_are_checked(tmp_path: Path) -> None:
    good = write_zip(
        tmp_path / "good.zip",
        [("build.sh", BUILD_SH, 0), ("latest", b"build.sh", stat.S_IFLNK | 0o777)],
    )
    assert inspect_archive(good, "zip")[1] == Member("latest", "symlink", 0, 0o777, "build.sh")
    bad = write_zip(
        tmp_path / "bad.zip",
        [("build.sh", BUILD_SH, 0), ("secrets", b"../../etc/shadow", stat.S_IFLNK | 0o777)],
    )
    assert "`secrets` is a symbolic link to `../../etc/shadow`" in refusal(bad)


@pytest.mark.parametrize(
    ("st_mode", "expected"),
    [
        (stat.S_IFCHR | 0o600, "device file"),
        (stat.S_IFIFO | 0o600, "FIFO"),
        (stat.S_IFSOCK, "socket"),
    ],
)
def test_zip_special_files_are_refused(tmp_path: Path, st_mode: int, expected: str) -> None:
    path = write_zip(tmp_path / "a.zip", [("build.sh", BUILD_SH, 0), ("odd", b"", st_mode)])
    assert f"`odd` is a {expected}" in refusal(path)


def test_zip_names_with_traversal_are_refused(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "a.zip", [("build.sh", BUILD_SH, 0), ("../../evil", b"x", 0)])
    assert "`../../evil` has a `..` component" in refusal(path)


def test_an_encrypted_zip_member_is_refused(tmp_path: Path) -> None:
    data = bytearray(write_zip(tmp_path / "a.zip", [("build.sh", BUILD_SH, 0)]).read_bytes())
    for signature, flag_offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.index(signature) + flag_offset
        data[at] |= 0x01
    path = tmp_path / "locked.zip"
    path.write_bytes(bytes(data))
    assert "`build.sh` is encrypted" in refusal(path)


# The normalized tar -------------------------------------------------------------------------


def test_normalized_tar_puts_everything_under_the_prefix_owned_by_root(good_tgz: Path) -> None:
    entries = normalized(good_tgz)
    names = [info.name for info, _ in entries]
    assert names == [
        "submission",
        "submission/build.sh",
        "submission/src",
        "submission/src/main.c",
        "submission/src/current",
    ]
    by_name = {info.name: (info, data) for info, data in entries}
    assert by_name["submission"][0].isdir()
    build, content = by_name["submission/build.sh"]
    assert content == BUILD_SH
    assert build.mode == 0o755
    assert build.mtime == MTIME
    assert by_name["submission/src/main.c"][0].mode == 0o644
    link = by_name["submission/src/current"][0]
    assert link.issym() and link.linkname == "main.c"
    for info, _ in entries:
        assert (info.uid, info.gid, info.uname, info.gname) == (0, 0, "", "")


def test_normalized_modes_stay_readable_without_new_exec_bits(tmp_path: Path) -> None:
    path = write_tar(
        tmp_path / "a.tgz",
        [
            file_entry("build.sh", BUILD_SH, 0o700),
            file_entry("private.key", b"k", 0o600),
            file_entry("suid", b"s", 0o4755),
            dir_entry("locked", 0o700),
        ],
    )
    modes = {info.name: info.mode for info, _ in normalized(path)}
    assert modes["submission/build.sh"] == 0o744
    assert modes["submission/private.key"] == 0o644
    assert modes["submission/suid"] == 0o755
    assert modes["submission/locked"] == 0o755


def test_normalized_tar_from_a_zip_keeps_exec_bits_and_contents(tmp_path: Path) -> None:
    big = bytes(range(256)) * 12_000  # ~3 MiB, copied in chunks
    path = write_zip(
        tmp_path / "a.zip",
        [
            ("run", b"#!/bin/sh\n", stat.S_IFREG | 0o755),
            ("model/weights.bin", big, stat.S_IFREG | 0o644),
        ],
    )
    entries = {info.name: (info, data) for info, data in normalized(path, prefix="context")}
    assert entries["context/run"][0].mode == 0o755
    assert entries["context/model/weights.bin"][1] == big
    zip_time = dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC)
    assert entries["context/model/weights.bin"][0].mtime == int(zip_time.timestamp())


def test_normalized_tar_revalidates_what_it_copies(tmp_path: Path) -> None:
    path = write_tar(
        tmp_path / "a.tgz", [file_entry("build.sh", BUILD_SH), symlink_entry("pw", "/etc/passwd")]
    )
    with pytest.raises(ArchiveError, match="absolute path"):
        write_normalized_tar(path, "tar.gz", io.BytesIO())


def test_a_failure_to_write_dest_is_not_blamed_on_the_archive(good_tgz: Path) -> None:
    class BrokenPipe(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, data: object) -> int:
            raise BrokenPipeError("docker went away")

    with pytest.raises(BrokenPipeError):
        write_normalized_tar(good_tgz, "tar.gz", BrokenPipe())


def test_the_prefix_must_be_a_plain_relative_path(good_tgz: Path) -> None:
    for prefix in ("", "/submission", "../up", "a//b"):
        with pytest.raises(ValueError):
            write_normalized_tar(good_tgz, "tar.gz", io.BytesIO(), prefix=prefix)


# Mostly ordinary components, so that many archives pass; now and then a hostile one.
NAME_PARTS = st.sampled_from(
    ["a", "b", "c", "x.txt", "é", "...", " ", "."] * 4 + ["", "..", "\\", "\x00", "\n"]
)
NAMES = st.lists(NAME_PARTS, min_size=1, max_size=4).map("/".join)


def _inside(path: str) -> bool:
    return path == "submission" or path.startswith("submission/")


@settings(max_examples=100, deadline=None)
@given(
    files=st.lists(NAMES, max_size=6, unique=True),
    links=st.lists(st.tuples(NAMES, NAMES), max_size=3),
    leading_slash=st.sampled_from([False, False, False, True]),
)
def test_random_names_never_escape_the_root(
    files: list[str], links: list[tuple[str, str]], leading_slash: bool
) -> None:
    entries = [file_entry("build.sh", BUILD_SH)]
    entries += [file_entry(("/" if leading_slash else "") + name) for name in files]
    entries += [symlink_entry(name, target) for name, target in links]
    with tempfile.TemporaryDirectory() as folder:
        path = write_tar(Path(folder) / "a.tgz", entries)
        buffer = io.BytesIO()
        try:
            write_normalized_tar(path, "tar.gz", buffer)
        except ArchiveError:
            return
    buffer.seek(0)
    with tarfile.open(fileobj=buffer, mode="r:") as archive:
        for info in archive:
            assert _inside(info.name), info.name
            assert ".." not in info.name.split("/")
            assert "\\" not in info.name and "\x00" not in info.name
            if info.issym():
                assert not info.linkname.startswith("/")
                resolved = posixpath.normpath(
                    posixpath.join(posixpath.dirname(info.name), info.linkname)
                )
                assert _inside(resolved), (info.name, info.linkname)
