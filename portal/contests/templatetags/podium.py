"""Template filters for Podium's pages: exact durations, zoned times, plain numbers."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django import template

register = template.Library()

DISPLAY_ZONE = "Asia/Seoul"
NS_PER_MS = Decimal(1_000_000)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name or DISPLAY_ZONE)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo(DISPLAY_ZONE)


@register.filter
def ns(value: int | None) -> str:
    """Integer nanoseconds as milliseconds with three decimals: 123456000 -> "123.456 ms"."""
    if value is None or value == "":
        return "-"
    return f"{Decimal(int(value)) / NS_PER_MS:,.3f} ms"


@register.filter
def zoned(value: dt.datetime | None, zone_name: str = DISPLAY_ZONE) -> str:
    """A moment in ``zone_name`` (KST by default) and in UTC.

    "2026-08-10 00:00 KST (2026-08-09 15:00 UTC)"; a UTC zone is shown once.
    """
    if not isinstance(value, dt.datetime):
        return "-"
    local = value.astimezone(_zone(zone_name))
    utc = value.astimezone(dt.UTC)
    shown = f"{local:%Y-%m-%d %H:%M} {local.tzname()}"
    if local.utcoffset() == dt.timedelta(0):
        return f"{utc:%Y-%m-%d %H:%M} UTC"
    return f"{shown} ({utc:%Y-%m-%d %H:%M} UTC)"


@register.filter
def clock(value: dt.datetime | None, zone_name: str = DISPLAY_ZONE) -> str:
    """Only the time of day in ``zone_name``: "00:00 KST"."""
    if not isinstance(value, dt.datetime):
        return "-"
    local = value.astimezone(_zone(zone_name))
    return f"{local:%H:%M} {local.tzname()}"


@register.filter
def thousands(value: int | None) -> str:
    """9900 -> "9,900"."""
    if value is None or value == "":
        return "-"
    return f"{int(value):,}"


@register.filter
def binary_size(value: int | None) -> str:
    """Bytes in the largest binary unit that keeps the number at least 1: "16 GiB"."""
    if value is None or value == "":
        return "-"
    size = Decimal(int(value))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            text = f"{size:.1f}".removesuffix(".0") if unit != "B" else f"{size:.0f}"
            return f"{text} {unit}"
        size /= 1024
    return f"{size:.1f}".removesuffix(".0") + " TiB"


@register.filter
def minutes(seconds: int | None) -> str:
    """1800 -> "30 minutes"."""
    if seconds is None or seconds == "":
        return "-"
    whole, rest = divmod(int(seconds), 60)
    if rest:
        return f"{whole} min {rest} s"
    return f"{whole} minute" + ("" if whole == 1 else "s")
