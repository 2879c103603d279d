"""A waiting submission's place in its class's queue, its ETA and its host, as shown.

The place is the fair order of portal.submissions.dispatch; the ETA is ``ceil(place /
live hosts) * mean run duration`` of the class's latest finished runs; with no live host
it is null and the page says so plainly.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from portal.contests.models import Cohort
from portal.hosts.models import ScoringHost
from portal.submissions.models import Run, Submission
from portal.submissions.runs import run_claim
from portal.submissions.selectors import queue_standing, submission_state
from tests import factories
from tests.scoring.test_staging import make_submission

MINUTE = dt.timedelta(minutes=1)


@pytest.fixture
def official(benchmark: Any) -> Cohort:
    return Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)


def host(benchmark: Any, name: str, *, seen: dt.timedelta = dt.timedelta(0)) -> ScoringHost:
    return ScoringHost.objects.create(
        name=name,
        hardware_class_id=benchmark.hardware_class_id,
        registered_at=timezone.now() - dt.timedelta(days=1),
        last_heartbeat_at=timezone.now() - seen,
    )


def finished(benchmark: Any, official: Cohort, minutes: float) -> Run:
    """A run of the class that took ``minutes`` from claim to verdict."""
    entrant = factories.UserFactory()
    now = timezone.now()
    return Run.objects.create(
        submission=make_submission(entrant, benchmark, status=Submission.PASSED),
        cohort=official,
        status=Run.FINISHED,
        started_at=now - minutes * MINUTE,
        finished_at=now,
    )


def waiting(benchmark: Any, count: int) -> list[Submission]:
    """``count`` entrants' first attempts, queued a second apart (so the oldest is first)."""
    made = []
    for index in range(count):
        submission = make_submission(factories.UserFactory(), benchmark)
        Submission.objects.filter(pk=submission.pk).update(
            queued_at=timezone.now() - dt.timedelta(seconds=100 - index)
        )
        submission.refresh_from_db()
        made.append(submission)
    return made


def test_places_and_etas_follow_the_fair_order_and_the_live_hosts(benchmark, official):
    for minutes in (1, 3):  # a mean of 2 minutes
        finished(benchmark, official, minutes)
    host(benchmark, "alpha")
    host(benchmark, "beta")
    host(benchmark, "silent", seen=dt.timedelta(hours=1))  # offline: not counted
    first, second, third = waiting(benchmark, 3)

    standings = [queue_standing(s) for s in (first, second, third)]

    assert [s.position for s in standings if s] == [1, 2, 3]
    assert [s.hosts_online for s in standings if s] == [2, 2, 2]
    assert [s.eta_seconds for s in standings if s] == [120, 120, 240]
    assert "number 3 in the queue" in standings[2].text()
    assert "about 4 min 0 s" in standings[2].text()


def test_with_no_live_host_the_eta_is_null_and_the_page_says_why(benchmark, official, alice):
    finished(benchmark, official, 2)
    (submission,) = waiting(benchmark, 1)

    state = submission_state(submission)

    assert state["queue_position"] == 1 and state["eta_seconds"] is None
    assert "No scoring host of this class is online" in state["display"]["queue"]


def test_a_claimed_run_names_its_host_and_leaves_the_queue(benchmark, official):
    host(benchmark, "alpha")
    first, second = waiting(benchmark, 2)

    run = run_claim(first.pk, lease_s=60, host="alpha")

    assert run is not None
    first.refresh_from_db()
    assert queue_standing(first) is None
    assert submission_state(first)["host"] == "alpha"
    assert queue_standing(second).position == 1


def test_the_api_shows_place_eta_and_host(client, benchmark, official, alice):
    host(benchmark, "alpha")
    finished(benchmark, official, 5)
    submission = make_submission(alice, benchmark)
    client.force_login(alice)

    data = client.get(f"/api/v1/submissions/{submission.pk}/").json()

    assert (data["queue_position"], data["eta_seconds"], data["host"]) == (1, 300, None)
