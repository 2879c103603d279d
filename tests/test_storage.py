"""portal.core.storage.read_tail: the last lines of a log, at a cost that follows the tail."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portal.core import storage
from portal.core.storage import read_tail

LINE_PIECES = st.sampled_from(
    [
        *(b"\n", b"\r\n", b"\r", b"\x0b", b"\xc2\x85"),  # line breaks, as splitlines sees them
        *(b"a", b"hello world", b" ", b"x" * 40, b"\x00"),
        *(b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80"),  # valid UTF-8
        *(b"\xff", b"\xc3", b"\xe2\x82", b"\x80"),  # invalid or cut UTF-8
    ]
)


def expected_tail(data: bytes, lines: int) -> str:
    """What reading the whole file would give."""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:]) + ("\n" if text else "")


class CountingReads:
    """Wraps ``open`` for read_tail and adds up the bytes its reads return."""

    def __init__(self) -> None:
        self.bytes_read = 0

    def __call__(self, path: Any, mode: str = "r") -> io.BufferedReader:
        handle = open(path, mode)  # noqa: SIM115 - read_tail closes it
        original_read = handle.read

        def read(size: int | None = -1) -> bytes:
            data = original_read(size)
            self.bytes_read += len(data)
            return data

        handle.read = read  # type: ignore[method-assign]
        return handle


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.lists(LINE_PIECES, max_size=120).map(b"".join),
    lines=st.integers(min_value=1, max_value=30),
    block_bytes=st.integers(min_value=1, max_value=64),
)
def test_it_matches_splitlines_of_the_whole_file(
    tmp_path: Path, data: bytes, lines: int, block_bytes: int
) -> None:
    path = tmp_path / "log"
    path.write_bytes(data)

    assert read_tail(path, lines, block_bytes=block_bytes) == expected_tail(data, lines)


def test_a_missing_or_empty_file_is_an_empty_tail(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")

    assert read_tail(tmp_path / "missing.log", 10) == ""
    assert read_tail(empty, 10) == ""


def test_a_last_line_without_newline_counts_and_crlf_becomes_lf(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"one\r\ntwo\r\nthree")

    assert read_tail(path, 2) == "two\nthree\n"
    assert read_tail(path, 5) == "one\ntwo\nthree\n"


def test_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"ok\nbad \xff\xfe here\n")

    assert read_tail(path, 1) == "bad \ufffd\ufffd here\n"


def test_it_returns_2000_lines_longer_than_the_old_256_kib_window(tmp_path: Path) -> None:
    path = tmp_path / "log"
    rows = [f"{number:05d} " + "x" * 500 for number in range(3000)]
    path.write_text("\n".join(rows) + "\n")

    tail = read_tail(path, 2000).splitlines()

    assert tail == rows[-2000:]


def test_a_tail_reads_no_more_than_its_cap(tmp_path: Path) -> None:
    path = tmp_path / "log"
    rows = [f"line {number} " + "y" * 90 for number in range(1000)]
    path.write_text("\n".join(rows) + "\n")

    tail = read_tail(path, 2000, block_bytes=1000, max_bytes=10_000).splitlines()

    # What fits in the last 10,000 bytes, whole lines only.
    assert 90 <= len(tail) < 100
    assert tail == rows[-len(tail) :]


def test_one_giant_line_is_cut_at_a_character_boundary(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"start\n" + "\u20ac".encode() * 10_000 + b"\n")

    # The last 1002 bytes start two bytes into a three-byte character.
    tail = read_tail(path, 5, max_bytes=1002)

    assert tail == "\u20ac" * 333 + "\n"


def test_tailing_a_huge_sparse_file_reads_only_the_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "huge.log"
    rows = [f"step {number}: loss=0.{number:04d}" for number in range(2500)]
    with path.open("wb") as handle:
        handle.truncate(1 << 30)  # a 1 GiB hole, no disk used
        handle.seek(0, io.SEEK_END)
        handle.write(("\n".join(rows) + "\n").encode())
    counting = CountingReads()
    monkeypatch.setattr(storage, "open", counting, raising=False)

    tail = read_tail(path, 2000)

    assert tail.splitlines() == rows[-2000:]
    tail_bytes = len(tail.encode())
    # A whole number of 64 KiB blocks around the tail, never the gigabyte before it.
    assert tail_bytes < counting.bytes_read <= tail_bytes + 2 * storage.TAIL_BLOCK_BYTES


def test_a_giant_file_without_newlines_reads_at_most_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "huge.log"
    with path.open("wb") as handle:
        handle.truncate(1 << 30)
    counting = CountingReads()
    monkeypatch.setattr(storage, "open", counting, raising=False)

    tail = read_tail(path, 2000)

    assert counting.bytes_read == storage.TAIL_MAX_BYTES
    assert len(tail) == storage.TAIL_MAX_BYTES + 1
