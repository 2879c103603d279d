"""Plain-text output: aligned tables, times in the local zone, durations, sizes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell, two spaces apart, no trailing blanks."""
    cells = [[str(cell) for cell in row] for row in [headers, *rows]]
    widths = [max(len(row[index]) for row in cells) for index in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def when(iso: str | None, *, seconds: bool = False) -> str:
    """An API time (ISO 8601 with offset) in the local zone, e.g. ``2025-06-01 14:00 KST``."""
    if not iso:
        return "-"
    try:
        moment = dt.datetime.fromisoformat(iso).astimezone()
    except ValueError:
        return iso
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z" if seconds else "%Y-%m-%d %H:%M %Z")


def clock(iso: str | None) -> str:
    """Only the local time of day, for timelines: ``14:03:22``."""
    if not iso:
        return "--:--:--"
    try:
        return dt.datetime.fromisoformat(iso).astimezone().strftime("%H:%M:%S")
    except ValueError:
        return iso


def wall_time(ns: int | None) -> str:
    """``123.456789 ms``: nanoseconds as milliseconds, every digit kept."""
    if ns is None:
        return "-"
    return f"{ns // 1_000_000}.{ns % 1_000_000:06d} ms"


def size(count: int) -> str:
    value = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{count} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} bytes"  # not reached


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
