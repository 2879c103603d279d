"""The data migrations that give existing rows their team: a ledger charge made since its
uploader joined their current team is that team's (a refund follows its charge), earlier
ones stay their uploader's alone; a member's nominations become their team's."""

from __future__ import annotations

import datetime as dt
import importlib
from types import SimpleNamespace
from typing import Any

from django.apps import apps
from django.db import connection
from django.utils import timezone

from portal.standings.models import Nomination
from portal.submissions.models import AttemptLedger
from portal.teams import services
from portal.teams.models import TeamMember
from tests.web.boards import official_run

EDITOR = SimpleNamespace(connection=connection)


def migration(name: str) -> Any:
    return importlib.import_module(name)


def ledger_row(submission, delta: int, at: dt.datetime) -> AttemptLedger:
    return AttemptLedger.objects.create(
        entrant=submission.entrant,
        benchmark=submission.benchmark,
        submission=submission,
        kind=submission.kind,
        attempt_day=at.date(),
        delta=delta,
        reason="test",
        at=at,
    )


def test_charges_since_joining_become_the_teams_and_refunds_follow_their_charge(
    alice, bob, benchmark
):
    team = services.team_create(user=bob, benchmark=benchmark, name="T")
    joined = timezone.now()
    before = ledger_row(
        official_run(benchmark, alice, 100).submission, 1, joined - dt.timedelta(hours=2)
    )
    TeamMember.objects.create(team=team, benchmark=benchmark, user=alice, joined_at=joined)
    since = ledger_row(
        official_run(benchmark, alice, 100).submission, 1, joined + dt.timedelta(hours=1)
    )
    refund = ledger_row(before.submission, -1, joined + dt.timedelta(hours=2))
    AttemptLedger.objects.update(team=None)  # as the rows were before the migration

    module = migration("portal.submissions.migrations.0019_attempt_ledger_team")
    module.charges_to_teams(apps, EDITOR)

    teams = dict(AttemptLedger.objects.values_list("pk", "team_id"))
    assert teams == {before.pk: None, since.pk: team.pk, refund.pk: None}


def test_a_members_nominations_become_their_teams(alice, bob, benchmark):
    team = services.team_create(user=bob, benchmark=benchmark, name="T")
    hers = official_run(benchmark, alice, 100).submission
    theirs = official_run(benchmark, bob, 100).submission
    now = timezone.now()
    Nomination.objects.create(benchmark=benchmark, entrant=alice, submission=hers, nominated_at=now)
    Nomination.objects.create(benchmark=benchmark, entrant=bob, submission=theirs, nominated_at=now)

    module = migration("portal.standings.migrations.0005_nomination_team")
    module.nominations_to_teams(apps, EDITOR)

    assert dict(Nomination.objects.values_list("entrant_id", "team_id")) == {
        alice.pk: None,
        bob.pk: team.pk,
    }
