"""The allowance cannot be multiplied by changing teams: a charge counts against its
uploader wherever they go and against the team it was made in even after they left, and
a join must fit the team's allowance over the days run as well as today's. A team's net
charges over the contest never exceed the allowance times the attempt days run."""

from __future__ import annotations

import contextlib
import datetime as dt
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import time_machine

from portal.core import errors
from portal.submissions.attempts import identity_rows
from portal.submissions.models import AttemptLedger, Submission
from portal.teams import services
from portal.teams.models import Team
from portal.teams.selectors import identity_of
from tests import factories
from tests.teams.test_services import Uploads, join

# Attempt days in Asia/Seoul run from 15:00 to 15:00 UTC: 03:00 UTC is mid-day.
DAY_1 = dt.datetime(2026, 3, 2, 3, 0, tzinfo=dt.UTC)


def day(n: int) -> dt.datetime:
    return DAY_1 + dt.timedelta(days=n - 1)


@pytest.fixture(autouse=True)
def _no_broker(sent: Any) -> None:
    """Uploads enqueue their builds; nothing is sent anywhere."""


@pytest.fixture
def opened(db: Any) -> Any:
    """A benchmark that opened at the start of attempt day 1: 2 official attempts a day."""
    return factories.BenchmarkFactory(
        opens_at=dt.datetime(2026, 3, 1, 15, 0, tzinfo=dt.UTC),
        closes_at=dt.datetime(2026, 4, 1, 15, 0, tzinfo=dt.UTC),
    )


@pytest.fixture
def uploads(opened: Any, tmp_path: Path) -> Iterator[Uploads]:
    yield Uploads(opened, tmp_path)


def settle() -> None:
    """The day's builds are done (an entrant has a bounded number of builds in flight)."""
    Submission.objects.update(status=Submission.FAILED)


def upload_all(uploads: Uploads, user: Any) -> int:
    """Upload official attempts as ``user`` until refused; how many were accepted."""
    accepted = 0
    while True:
        try:
            uploads.upload(user)
        except errors.QuotaExhausted:
            settle()
            return accepted
        accepted += 1


def counted(team: Team) -> int:
    """The team's net official charges over the contest, as its allowance counts them."""
    identity = identity_of(team.benchmark_id, team.captain_id)
    rows = AttemptLedger.objects.filter(identity_rows(identity), kind=Submission.OFFICIAL)
    return sum(rows.values_list("delta", flat=True))


def official_on(n: int) -> int:
    return Submission.objects.filter(
        kind=Submission.OFFICIAL,
        submitted_at__gte=day(n) - dt.timedelta(hours=12),
        submitted_at__lt=day(n) + dt.timedelta(hours=12),
    ).count()


def test_leaving_then_rejoining_never_gives_a_team_of_two_four_attempts_a_day(
    opened, uploads, alice, bob
):
    with time_machine.travel(day(1), tick=False):
        team = services.team_create(user=alice, benchmark=opened, name="T")
        join(team, bob)
        assert upload_all(uploads, alice) == 2
        services.team_leave(user=alice, benchmark=opened)
        # Bob's team still counts alice's two of today; alice keeps them too.
        with pytest.raises(errors.QuotaExhausted, match="used all 2"):
            uploads.upload(bob)
        with pytest.raises(errors.QuotaExhausted, match="used all 2"):
            uploads.upload(alice)
        assert official_on(1) == 2
    with time_machine.travel(day(2), tick=False):
        join(team, alice, inviter=bob)  # her two are the team's already: 2 <= 2 x 1
        assert upload_all(uploads, bob) == 2
        assert counted(team) == 4 == official_on(1) + official_on(2)


def test_a_joiner_whose_past_does_not_fit_the_days_run_is_refused_until_it_does(
    opened, uploads, alice, bob
):
    with time_machine.travel(day(1), tick=False):
        team = services.team_create(user=bob, benchmark=opened, name="T")
        assert upload_all(uploads, alice) == 2
        assert upload_all(uploads, bob) == 2
    with time_machine.travel(day(2), tick=False):
        invitation = services.team_invite(user=bob, benchmark=opened, username="alice")
        # 4 charged on 1 earlier day: a merged team would hold twice its allowance.
        with pytest.raises(errors.InvalidParameter, match="from the attempt day 2026-03-04"):
            services.invitation_accept(user=alice, invitation_id=invitation.pk)
        assert identity_of(opened.pk, alice.pk).team_id is None
    with time_machine.travel(day(3), tick=False):
        services.invitation_accept(user=alice, invitation_id=invitation.pk)
        assert upload_all(uploads, alice) == 2
        assert counted(team) == 6 == 2 * 3


def test_a_leaver_cannot_carry_the_teams_day_into_another_team(opened, uploads, alice, bob):
    carol = factories.UserFactory(username="carol")
    with time_machine.travel(day(1), tick=False):
        team = services.team_create(user=alice, benchmark=opened, name="T")
        join(team, bob)
        other = services.team_create(user=carol, benchmark=opened, name="U")
        assert upload_all(uploads, bob) == 2
        services.team_leave(user=bob, benchmark=opened)
        invitation = services.team_invite(user=carol, benchmark=opened, username="bob")
        # Today's two are bob's wherever he goes: carol's team (0) and his (2) fit.
        services.invitation_accept(user=bob, invitation_id=invitation.pk)
        assert upload_all(uploads, carol) == 0
        assert upload_all(uploads, alice) == 0
        assert counted(team) == 2 and counted(other) == 2
        assert official_on(1) == 2


def test_uploads_leaves_and_rejoins_in_any_order_never_exceed_the_allowance_times_the_days(
    opened, uploads, alice, bob
):
    """A seeded random run of uploads by either, alice leaving and alice rejoining, six a
    day for six days: after every step the team's count, and alice's own, stay within 2
    a day run; the run both rejoined and was refused a rejoin."""
    chance = random.Random(42)
    seen = {"joined": 0, "refused": 0}

    def rejoin(team: Team) -> None:
        invitation = services.team_invite(user=bob, benchmark=opened, username="alice")
        try:
            services.invitation_accept(user=alice, invitation_id=invitation.pk)
        except errors.InvalidParameter:
            seen["refused"] += 1
            services.invitation_decline(user=alice, invitation_id=invitation.pk)
        else:
            seen["joined"] += 1

    with time_machine.travel(day(1), tick=False):
        team = services.team_create(user=bob, benchmark=opened, name="T")
    for n in range(1, 7):
        with time_machine.travel(day(n), tick=False):
            for _ in range(6):
                alone = identity_of(opened.pk, alice.pk).team_id is None
                step = chance.choice(["alice", "bob", "leave" if not alone else "rejoin"])
                if step in ("alice", "bob"):
                    with contextlib.suppress(errors.QuotaExhausted):
                        uploads.upload(alice if step == "alice" else bob)
                    settle()
                elif step == "leave":
                    services.team_leave(user=alice, benchmark=opened)
                else:
                    rejoin(team)
                assert counted(team) <= 2 * n
                mine = AttemptLedger.objects.filter(entrant=alice, kind=Submission.OFFICIAL)
                assert sum(mine.values_list("delta", flat=True)) <= 2 * n
    assert seen["joined"] and seen["refused"]


def test_an_ordinary_team_uses_two_a_day_as_before(opened, uploads, alice, bob):
    with time_machine.travel(day(1), tick=False):
        assert upload_all(uploads, alice) == 2
    with time_machine.travel(day(2), tick=False):
        team = services.team_create(user=alice, benchmark=opened, name="T")
        uploads.upload(bob)
        join(team, bob)  # 2 + 0 on day 1 <= 2; 0 + 1 today <= 2
        assert upload_all(uploads, alice) == 1
    with time_machine.travel(day(3), tick=False):
        assert upload_all(uploads, bob) == 2
        assert counted(team) == 6 == 2 * 3


def test_the_page_keeps_showing_a_leavers_charge_as_the_teams_until_it_is_refunded(
    client, opened, uploads, alice, bob
):
    from django.core.cache import cache

    from portal.submissions.attempts import attempt_refund

    def left() -> str:
        text = " ".join(client.get(f"/b/{opened.slug}/").content.decode().split())
        start = text.index("official attempts left today") - 12
        return text[start : text.index(" official attempts left today")].rsplit(">", 1)[-1]

    client.force_login(alice)
    cache.clear()
    with time_machine.travel(day(1), tick=False):
        team = services.team_create(user=alice, benchmark=opened, name="T")
        join(team, bob)
        assert left() == "2 of 2"
        his = uploads.upload(bob)
        assert left() == "1 of 2"
        services.team_leave(user=bob, benchmark=opened)
        assert left() == "1 of 2"  # made in the team: still the team's
        assert attempt_refund(submission=his, reason="platform failure")
        assert left() == "2 of 2"


def test_practice_days_run_count_from_the_first_practice_charge_before_the_opening(
    alice, bob, tmp_path
):
    upcoming = factories.BenchmarkFactory(opens_at=day(10), closes_at=day(30), practice_per_day=1)
    practice = Uploads(upcoming, tmp_path)
    with time_machine.travel(day(1), tick=False):
        practice.upload(alice, kind=Submission.PRACTICE)
    with time_machine.travel(day(2), tick=False):
        settle()
        practice.upload(alice, kind=Submission.PRACTICE)
        practice.upload(bob, kind=Submission.PRACTICE)
        settle()
        team = services.team_create(user=bob, benchmark=upcoming, name="T")
    with time_machine.travel(day(3), tick=False):
        invitation = services.team_invite(user=bob, benchmark=upcoming, username="alice")
        # 3 practice runs on the 2 days since alice's first: more than 1 a day.
        with pytest.raises(errors.InvalidParameter, match="practice allowance for the contest"):
            services.invitation_accept(user=alice, invitation_id=invitation.pk)
    with time_machine.travel(day(4), tick=False):
        services.invitation_accept(user=alice, invitation_id=invitation.pk)
        assert identity_of(upcoming.pk, alice.pk).team_id == team.pk
