"""The display filters: exact milliseconds, zoned times, plain sizes."""

from __future__ import annotations

import datetime as dt
import re

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


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0 s"),
        (59.9, "59 s"),
        (61, "1 min 1 s"),
        (5 * 3600 + 12 * 60 + 59, "5 h 12 min"),
        (3 * 86400 + 4 * 3600 + 59 * 60, "3 d 4 h"),
        (-5, "0 s"),
    ],
)
def test_span_shows_the_two_largest_units_rounded_down(seconds, shown):
    assert podium.span(seconds) == shown


def test_until_counts_down_and_then_says_now():
    now = dt.datetime(2026, 8, 12, 18, 48, tzinfo=KST)
    reset = dt.datetime(2026, 8, 13, 0, 0, tzinfo=KST)

    assert podium.until(reset, now) == "in 5 h 12 min"
    assert podium.until(now, now) == "now"
    assert podium.until(None) == "-"


def test_moment_is_a_time_element_in_utc_with_the_kst_text():
    opens = dt.datetime(2026, 8, 10, 0, 0, tzinfo=KST)

    assert podium.moment(opens) == (
        '<time datetime="2026-08-09T15:00:00+00:00" data-local>'
        "2026-08-10 00:00 KST (2026-08-09 15:00 UTC)</time>"
    )


def test_quota_sentence_states_what_is_left_and_when_more_comes():
    from portal.submissions.attempts import Quota

    now = dt.datetime(2026, 8, 12, 18, 48, tzinfo=KST)
    reset = dt.datetime(2026, 8, 13, 0, 0, tzinfo=KST)
    quota = Quota("official", 2, 1, 1, reset, now)

    html = podium.quota_sentence(quota, "Asia/Seoul", now)

    text = re.sub(r"<[^>]+>", "", html)
    assert text == "1 of 2 official attempts left today; the next one at 00:00 KST, in 5 h 12 min"
    assert 'title="2026-08-13 00:00 KST (2026-08-12 15:00 UTC)"' in html
    assert 'data-countdown="2026-08-12T15:00:00+00:00"' in html
    full = podium.quota_sentence(Quota("practice", 1, 0, 1, reset, now), "Asia/Seoul", now)
    assert re.sub(r"<[^>]+>", "", full).startswith(
        "1 of 1 practice attempt left today; they renew at 00:00 KST"
    )
    restored = podium.quota_sentence(Quota("official", 2, 0, 3, reset, now), "Asia/Seoul", now)
    assert re.sub(r"<[^>]+>", "", restored).startswith(
        "3 official attempts left today (2 a day and 1 given back by a refund); they renew at"
    )


def test_timelines_show_seconds_in_kst_and_utc():
    moment = dt.datetime(2026, 8, 10, 0, 0, 7, tzinfo=KST)

    assert podium.zoned_seconds(moment) == "2026-08-10 00:00:07 KST (2026-08-09 15:00:07 UTC)"
    assert podium.zoned_seconds(moment, "UTC") == "2026-08-09 15:00:07 UTC"
