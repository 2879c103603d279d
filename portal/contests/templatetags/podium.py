"""Template filters for Podium's pages: exact durations, zoned times, plain numbers."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django import template
from django.utils import timezone
from django.utils.html import format_html

register = template.Library()

DISPLAY_ZONE = "Asia/Seoul"
NS_PER_MS = Decimal(1_000_000)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name or DISPLAY_ZONE)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo(DISPLAY_ZONE)


# The number filters also get "" (a missing or empty template value) and show "-" for it.
@register.filter
def ns(value: int | str | None) -> str:
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
def zoned_seconds(value: dt.datetime | None, zone_name: str = DISPLAY_ZONE) -> str:
    """As :func:`zoned`, to the second (timelines, where steps are seconds apart):
    "2026-08-10 00:00:07 KST (2026-08-09 15:00:07 UTC)"."""
    if not isinstance(value, dt.datetime):
        return "-"
    local = value.astimezone(_zone(zone_name))
    utc = value.astimezone(dt.UTC)
    if local.utcoffset() == dt.timedelta(0):
        return f"{utc:%Y-%m-%d %H:%M:%S} UTC"
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} ({utc:%Y-%m-%d %H:%M:%S} UTC)"


@register.filter
def clock(value: dt.datetime | None, zone_name: str = DISPLAY_ZONE) -> str:
    """Only the time of day in ``zone_name``: "00:00 KST"."""
    if not isinstance(value, dt.datetime):
        return "-"
    local = value.astimezone(_zone(zone_name))
    return f"{local:%H:%M} {local.tzname()}"


@register.filter
def thousands(value: int | str | None) -> str:
    """9900 -> "9,900"."""
    if value is None or value == "":
        return "-"
    return f"{int(value):,}"


@register.filter
def binary_size(value: int | str | None) -> str:
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
def minutes(seconds: int | str | None) -> str:
    """1800 -> "30 minutes"."""
    if seconds is None or seconds == "":
        return "-"
    whole, rest = divmod(int(seconds), 60)
    if rest:
        return f"{whole} min {rest} s"
    return f"{whole} minute" + ("" if whole == 1 else "s")


def span(seconds: float) -> str:
    """A length of time in its two largest units: "3 d 4 h", "5 h 12 min", "4 min 5 s", "9 s".

    Rounded down, so a countdown never promises more time than is left. podium.js
    formats the live countdowns the same way.
    """
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3_600)
    mins, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {mins} min"
    if mins:
        return f"{mins} min {secs} s"
    return f"{secs} s"


@register.filter
def until(value: dt.datetime | None, now: dt.datetime | None = None) -> str:
    """How long until ``value``: "in 5 h 12 min"; "now" once it has passed."""
    if not isinstance(value, dt.datetime):
        return "-"
    left = (value - (now or timezone.now())).total_seconds()
    return f"in {span(left)}" if left >= 1 else "now"


@register.filter
def since(value: dt.datetime | None, now: dt.datetime | None = None) -> str:
    """How long ago ``value`` was, as a plain length: "4 min 5 s"."""
    if not isinstance(value, dt.datetime):
        return "-"
    return span(((now or timezone.now()) - value).total_seconds())


@register.simple_tag
def moment(value: dt.datetime | None, zone_name: str = DISPLAY_ZONE) -> str:
    """A moment in KST and UTC inside ``<time datetime>``; podium.js adds the viewer's time.

    Without JavaScript the zoned text stands on its own.
    """
    if not isinstance(value, dt.datetime):
        return "-"
    return format_html(
        '<time datetime="{}" data-local>{}</time>',
        value.astimezone(dt.UTC).isoformat(),
        zoned(value, zone_name),
    )


@register.simple_tag
def countdown(value: dt.datetime | None, now: dt.datetime | None = None) -> str:
    """A countdown ("in 5 h 12 min") that podium.js keeps counting down."""
    if not isinstance(value, dt.datetime):
        return "-"
    return format_html(
        '<span class="countdown" data-countdown="{}">{}</span>',
        value.astimezone(dt.UTC).isoformat(),
        until(value, now),
    )


@register.simple_tag
def quota_sentence(
    quota: Any, zone_name: str = DISPLAY_ZONE, now: dt.datetime | None = None
) -> str:
    """The quota in one line: "1 of 2 official attempts left today; the next one at
    00:00 KST, in 5 h 12 min".

    ``quota`` is a ``submissions.attempts.Quota``. The reset time carries its full date in
    KST and UTC in its title, and podium.js adds the viewer's own clock time.
    """
    noun = f"{quota.kind} attempt" + ("" if quota.per_day == 1 else "s")
    lead = "the next one at" if quota.remaining_today < quota.per_day else "they renew at"
    reset = quota.resets_at
    given_back = quota.remaining_today - quota.per_day
    if given_back > 0:  # a refund of an earlier day's attempt, booked today
        amount = format_html(
            "{} {} left today ({} a day and {} given back by a refund)",
            quota.remaining_today,
            f"{quota.kind} attempts",
            quota.per_day,
            given_back,
        )
    else:
        amount = format_html("{} of {} {} left today", quota.remaining_today, quota.per_day, noun)
    return format_html(
        '{}; {} <time datetime="{}" title="{}" data-local="clock">{}</time>, {}',
        amount,
        lead,
        reset.astimezone(dt.UTC).isoformat(),
        zoned(reset, zone_name),
        clock(reset, zone_name),
        countdown(reset, now),
    )
