"""The quota says when the next attempt can really be used, window included."""

from __future__ import annotations

import datetime as dt

from portal.submissions.attempts import quota_for
from portal.submissions.models import Submission
from tests import factories

UTC = dt.UTC


def benchmark_at(opens: dt.datetime, closes: dt.datetime):
    return factories.BenchmarkFactory(opens_at=opens, closes_at=closes)


def test_before_opening_the_next_attempt_is_at_the_opening(alice):
    opens = dt.datetime(2026, 8, 9, 15, 0, tzinfo=UTC)  # 00:00 KST
    benchmark = benchmark_at(opens, opens + dt.timedelta(days=21))

    quota = quota_for(alice, benchmark, Submission.OFFICIAL, opens - dt.timedelta(days=3))

    assert quota.remaining_today == 2
    assert quota.next_available_at == opens


def test_while_open_with_attempts_left_the_next_attempt_is_now(alice):
    opens = dt.datetime(2026, 8, 9, 15, 0, tzinfo=UTC)
    benchmark = benchmark_at(opens, opens + dt.timedelta(days=21))
    now = opens + dt.timedelta(hours=5)

    assert quota_for(alice, benchmark, Submission.OFFICIAL, now).next_available_at == now


def test_after_closing_there_is_no_next_attempt(alice):
    opens = dt.datetime(2026, 8, 9, 15, 0, tzinfo=UTC)
    closes = opens + dt.timedelta(days=21)
    benchmark = benchmark_at(opens, closes)

    quota = quota_for(alice, benchmark, Submission.OFFICIAL, closes + dt.timedelta(hours=1))

    assert quota.next_available_at is None
