"""Nominations: up to two of the entrant's own passing official submissions, changeable
until the nomination deadline; without one the two best count."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine

from portal.core import errors
from portal.standings.models import FinalSettings, Nomination
from portal.standings.nominations import counted_for, nominations_of, nominations_set
from portal.submissions.models import Submission
from tests.web.boards import official_run


def sub(run):
    return run.submission


def test_it_counts_the_two_best_without_a_nomination(closing, alice):
    slow = sub(official_run(closing, alice, 300))
    best = sub(official_run(closing, alice, 100))
    second = sub(official_run(closing, alice, 200))
    state = nominations_of(closing, alice)
    assert state.default and state.nominated == []
    assert state.counted == [best.pk, second.pk]
    assert counted_for(closing) == {alice.pk: [best.pk, second.pk]}
    assert slow.pk in state.eligible


def test_it_takes_a_nomination_instead(closing, alice):
    slow = sub(official_run(closing, alice, 300))
    official_run(closing, alice, 100)
    state = nominations_set(entrant=alice, benchmark=closing, submission_ids=[slow.pk])
    assert state.nominated == [slow.pk] and state.counted == [slow.pk] and not state.default
    assert counted_for(closing) == {alice.pk: [slow.pk]}


def test_an_empty_nomination_restores_the_default(closing, alice):
    first = sub(official_run(closing, alice, 300))
    nominations_set(entrant=alice, benchmark=closing, submission_ids=[first.pk])
    state = nominations_set(entrant=alice, benchmark=closing, submission_ids=[])
    assert state.default and Nomination.objects.count() == 0


def test_it_refuses_another_entrants_submission_as_not_found(closing, alice, bob):
    theirs = sub(official_run(closing, bob, 100))
    with pytest.raises(errors.NotFound):
        nominations_set(entrant=alice, benchmark=closing, submission_ids=[theirs.pk])


def test_it_refuses_a_failed_submission(closing, alice):
    failed = sub(official_run(closing, alice, 100, passed=False))
    with pytest.raises(errors.InvalidParameter, match="has not passed"):
        nominations_set(entrant=alice, benchmark=closing, submission_ids=[failed.pk])


def test_it_refuses_a_disqualified_submission(closing, alice, staff):
    run = official_run(closing, alice, 100)
    Submission.objects.filter(pk=run.submission_id).update(disqualified_at=closing.opens_at)
    with pytest.raises(errors.InvalidParameter, match="disqualified"):
        nominations_set(entrant=alice, benchmark=closing, submission_ids=[run.submission_id])


def test_it_refuses_a_practice_submission(closing, alice):
    practice = sub(official_run(closing, alice, 100, kind=Submission.PRACTICE))
    with pytest.raises(errors.InvalidParameter, match="practice"):
        nominations_set(entrant=alice, benchmark=closing, submission_ids=[practice.pk])


def test_it_refuses_a_submission_of_another_benchmark(closing, benchmark, alice):
    elsewhere = sub(official_run(benchmark, alice, 100))
    with pytest.raises(errors.NotFound):
        nominations_set(entrant=alice, benchmark=closing, submission_ids=[elsewhere.pk])


def test_it_refuses_three_or_a_repeat(closing, alice):
    ids = [sub(official_run(closing, alice, wall)).pk for wall in (100, 200, 300)]
    with pytest.raises(errors.InvalidParameter, match="at most 2"):
        nominations_set(entrant=alice, benchmark=closing, submission_ids=ids)
    with pytest.raises(errors.InvalidParameter, match="twice"):
        nominations_set(entrant=alice, benchmark=closing, submission_ids=[ids[0], ids[0]])
    assert Nomination.objects.count() == 0


def test_it_refuses_after_the_deadline_at_the_close_by_default(closing, alice):
    mine = sub(official_run(closing, alice, 100))
    with time_machine.travel(closing.closes_at - dt.timedelta(seconds=1), tick=False):
        nominations_set(entrant=alice, benchmark=closing, submission_ids=[mine.pk])
    with (
        time_machine.travel(closing.closes_at, tick=False),
        pytest.raises(errors.WindowClosed),
    ):
        nominations_set(entrant=alice, benchmark=closing, submission_ids=[])
    assert Nomination.objects.filter(submission=mine).exists()


def test_a_deadline_set_by_staff_moves_the_refusal(closing, alice):
    mine = sub(official_run(closing, alice, 100))
    FinalSettings.objects.create(
        benchmark=closing, nomination_deadline=closing.closes_at + dt.timedelta(days=1)
    )
    with time_machine.travel(closing.closes_at + dt.timedelta(hours=23), tick=False):
        state = nominations_set(entrant=alice, benchmark=closing, submission_ids=[mine.pk])
    assert state.open
    with (
        time_machine.travel(closing.closes_at + dt.timedelta(days=1), tick=False),
        pytest.raises(errors.WindowClosed),
    ):
        nominations_set(entrant=alice, benchmark=closing, submission_ids=[])
