"""Provisional after the close, then published: frozen rows with a digest; a later
change only through an audited correction, shown on the page."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest
import time_machine

from portal.audit.models import AuditEvent
from portal.core import errors
from portal.standings.publishing import standings_correct, standings_publish
from portal.standings.rerun import OFFICIAL_COHORT_CONFIRMATION as OFFICIAL
from portal.standings.rerun import final_rerun_start
from portal.standings.selectors import FINAL, LIVE, PROVISIONAL, board_state, published
from portal.submissions.leaderboard import leaderboard_refresh_entrant
from portal.submissions.models import Submission
from tests.web.boards import official_run


def publish(benchmark, staff, at, reason="results"):
    with time_machine.travel(at, tick=False):
        return standings_publish(benchmark=benchmark, actor=staff, reason=reason)


def correct(benchmark, staff, at, reason="a late disqualification"):
    with time_machine.travel(at, tick=False):
        return standings_correct(benchmark=benchmark, actor=staff, reason=reason)


def test_the_board_is_provisional_after_the_close_until_published(closing, staff, alice):
    official_run(closing, alice, 100)
    assert board_state(closing, closing.closes_at - dt.timedelta(seconds=1)) == LIVE
    assert board_state(closing, closing.closes_at) == PROVISIONAL
    publish(closing, staff, closing.closes_at + dt.timedelta(hours=1))
    assert board_state(closing, closing.closes_at + dt.timedelta(hours=2)) == FINAL


def test_it_is_refused_before_the_close_and_twice(closing, staff, alice, after_close):
    with pytest.raises(errors.InvalidParameter, match="after the benchmark closes"):
        standings_publish(benchmark=closing, actor=staff, reason="early")
    publish(closing, staff, after_close)
    with pytest.raises(errors.InvalidParameter, match="already published"):
        publish(closing, staff, after_close)


def test_it_is_refused_while_the_final_rerun_runs(closing, staff, alice, after_close):
    official_run(closing, alice, 100)
    with time_machine.travel(after_close, tick=False):
        final_rerun_start(
            benchmark=closing, actor=staff, reason="over", confirm_official_cohort=OFFICIAL
        )
    with pytest.raises(errors.InvalidParameter, match="still running"):
        publish(closing, staff, after_close)


def test_publishing_freezes_the_rows_audited(closing, staff, alice, bob, after_close):
    official_run(closing, alice, 200)
    official_run(closing, bob, 100)
    standings = publish(closing, staff, after_close)
    # A later, faster run lands on the board (a rescore, say): the standings stay.
    official_run(closing, alice, 50)
    found = published(closing)
    assert [(r.rank, r.entrant, r.wall_time_ns) for r in found.rows] == [
        (1, "bob", 100),
        (2, "alice", 200),
    ]
    assert found.standings.source == "board"
    assert standings.digest == "sha256:" + hashlib.sha256(found.csv.encode()).hexdigest()
    event = AuditEvent.objects.get(action="standings.published")
    assert event.reason == "results" and event.details["digest"] == standings.digest


def test_a_correction_is_audited_keeps_the_previous_digest_and_is_shown(
    closing, staff, alice, bob, after_close, client
):
    bad = official_run(closing, alice, 50)
    official_run(closing, bob, 100)
    standings = publish(closing, staff, after_close)
    before = standings.digest
    Submission.objects.filter(pk=bad.submission_id).update(disqualified_at=after_close)
    leaderboard_refresh_entrant(benchmark=closing, entrant_id=alice.pk)
    correction = correct(closing, staff, after_close + dt.timedelta(days=1))
    found = published(closing)
    assert [r.entrant for r in found.rows] == ["bob"]
    assert correction.previous_digest == before
    assert found.standings.digest == correction.digest != before
    event = AuditEvent.objects.get(action="standings.corrected")
    assert event.details == {"previous_digest": before, "digest": correction.digest}
    page = client.get(f"/b/{closing.slug}/standings/").content.decode()
    assert "a late disqualification" in page and before in page and correction.digest in page
    with pytest.raises(errors.InvalidParameter, match="Nothing would change"):
        correct(closing, staff, after_close + dt.timedelta(days=2))


def test_a_correction_needs_published_standings_and_a_reason(closing, staff, after_close):
    with pytest.raises(errors.NotFound):
        correct(closing, staff, after_close)
    publish(closing, staff, after_close)
    with pytest.raises(errors.InvalidParameter, match="reason"):
        correct(closing, staff, after_close, reason=" ")


def test_publishing_takes_the_final_rerun_when_one_ran(closing, staff, alice, bob, after_close):
    from tests.standings.test_rerun import play

    a = official_run(closing, alice, 100).submission
    b = official_run(closing, bob, 150).submission
    with time_machine.travel(after_close, tick=False):
        final_rerun_start(
            benchmark=closing, actor=staff, reason="over", confirm_official_cohort=OFFICIAL
        )
    play({a.pk: [300], b.pk: [200]})
    publish(closing, staff, after_close + dt.timedelta(hours=5))
    found = published(closing)
    assert found.standings.source == "final_rerun"
    assert [(r.entrant, r.wall_time_ns, r.runs) for r in found.rows] == [
        ("bob", 200, 3),
        ("alice", 300, 3),
    ]
