"""Race-free charging of a team's allowance: two members upload at once with one attempt
left, and exactly one of them is charged.

Real concurrent HTTP requests from threads against a live server (``crowd_server``), each
request its own database connection, on PostgreSQL with its row locks (the test is
skipped on another database: what it checks is how those locks serialize).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from django.db import connection

from portal.accounts.models import ApiToken
from portal.submissions.models import AttemptLedger, Submission
from portal.teams import services
from tests import factories
from tests.submissions.test_concurrent_charging import source_archive

ROUNDS = 6  # one benchmark each, so each round starts with one attempt left
PER_MEMBER_LAST_ROUND = 10

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="needs PostgreSQL's row locks"
)


@pytest.fixture
def fast_uploads(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"tokens": "1000/min", "uploads": "1000/min"},
    }
    monkeypatch.setattr("portal.core.jobs.app.send_task", lambda name, args, **kw: None)


def team_of_two(alice: Any, bob: Any) -> Any:
    """A benchmark of 2 official attempts a day with alice and bob's team on it."""
    # Builds in flight are capped per entrant; with the cap out of reach, what refuses
    # the losers is the allowance alone.
    benchmark = factories.BenchmarkFactory(attempts_per_day=2, max_concurrent_builds=100)
    factories.cohorts(benchmark)
    team = services.team_create(user=alice, benchmark=benchmark, name="Pair")
    invitation = services.team_invite(user=alice, benchmark=benchmark, username="bob")
    services.invitation_accept(user=bob, invitation_id=invitation.pk)
    assert team.pk
    return benchmark


def race(
    server: str, benchmark: Any, members: list[tuple[str, int]], per_member: int
) -> list[requests.Response]:
    """Every member sends ``per_member`` uploads at once (a barrier releases them
    together); (token, environment id) per member."""
    source = source_archive()
    senders = [member for member in members for _ in range(per_member)]
    barrier = threading.Barrier(len(senders))

    def upload(member: tuple[str, int]) -> requests.Response:
        token, environment = member
        barrier.wait()
        return requests.post(
            f"{server}/api/v1/benchmarks/{benchmark.slug}/submissions/",
            headers={"Authorization": f"Token {token}"},
            data={"environment": environment, "kind": "official"},
            files={"source": ("kit.tar.gz", source)},
            timeout=120,
        )

    with ThreadPoolExecutor(max_workers=len(senders)) as pool:
        return list(pool.map(upload, senders))


def test_two_members_uploading_at_once_with_one_attempt_left_are_charged_once(
    crowd_server: str, fast_uploads: None
) -> None:
    alice = factories.UserFactory(username="alice")
    bob = factories.UserFactory(username="bob")
    tokens = {user.pk: ApiToken.objects.create(user=user).key for user in (alice, bob)}
    for round_number in range(ROUNDS + 1):
        benchmark = team_of_two(alice, bob)
        members = [
            (tokens[user.pk], factories.EnvironmentFactory(owner=user, benchmark=benchmark).pk)
            for user in (alice, bob)
        ]
        # The team's first attempt of today, spent by alice alone: one is left.
        assert [r.status_code for r in race(crowd_server, benchmark, members[:1], 1)] == [201]
        per_member = PER_MEMBER_LAST_ROUND if round_number == ROUNDS else 1

        responses = race(crowd_server, benchmark, members, per_member)

        accepted = [r for r in responses if r.status_code == 201]
        refused = [r.json() for r in responses if r.status_code != 201]
        assert len(accepted) == 1, [r.text for r in responses]
        assert {error["code"] for error in refused} == {"quota_exhausted"}
        assert len(refused) == 2 * per_member - 1
        charges = AttemptLedger.objects.filter(benchmark=benchmark, delta=AttemptLedger.CHARGE)
        assert charges.count() == 2  # the one spent before, and the race's winner
        assert Submission.objects.filter(benchmark=benchmark).count() == 2
