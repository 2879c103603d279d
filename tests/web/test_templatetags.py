"""The display filters: exact milliseconds, zoned times, plain sizes."""

from __future__ import annotations

import datetime as dt

import pytest

from portal.contests.templatetags import podium

KST = dt.timezone(dt.timedelta(hours=9))


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (123_456_000, "123.456 ms"),
        (123_456_789, "123.457 ms"),
        (930_000, "0.930 ms"),
        (61_234_567_891, "61,234.568 ms"),
        (0, "0.000 ms"),
        (None, "-"),
    ],
)
def test_ns_shows_milliseconds_with_three_decimals(value, shown):
    assert podium.ns(value) == shown


def test_zoned_shows_seoul_time_then_utc():
    opens = dt.datetime(2026, 8, 10, 0, 0, tzinfo=KST)

    assert podium.zoned(opens) == "2026-08-10 00:00 KST (2026-08-09 15:00 UTC)"
    assert podium.zoned(opens, "UTC") == "2026-08-09 15:00 UTC"
    assert podium.zoned(None) == "-"


def test_zoned_follows_a_benchmarks_own_zone():
    moment = dt.datetime(2026, 7, 1, 12, 0, tzinfo=dt.UTC)

    assert podium.zoned(moment, "Europe/Berlin") == "2026-07-01 14:00 CEST (2026-07-01 12:00 UTC)"


def test_clock_shows_the_time_of_day_in_the_zone():
    reset = dt.datetime(2026, 8, 12, 15, 0, tzinfo=dt.UTC)

    assert podium.clock(reset) == "00:00 KST"
    assert podium.clock(reset, "UTC") == "15:00 UTC"


@pytest.mark.parametrize(
    ("value", "shown"),
    [(16 * 1024**3, "16 GiB"), (64 * 1024**2, "64 MiB"), (1536, "1.5 KiB"), (12, "12 B")],
)
def test_binary_size(value, shown):
    assert podium.binary_size(value) == shown


def test_minutes_and_thousands():
    assert podium.minutes(1800) == "30 minutes"
    assert podium.minutes(60) == "1 minute"
    assert podium.minutes(90) == "1 min 30 s"
    assert podium.thousands(9900) == "9,900"
