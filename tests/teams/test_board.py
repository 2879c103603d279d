"""The board ranks each team's best: one row per team, the best passing official run of
any member, under the team's name; entrants on their own are unchanged."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from portal.contests.models import Benchmark, LeaderboardEntry
from portal.contests.selectors import leaderboard_rows, leaderboard_standing, leaderboard_version
from portal.submissions import staff
from portal.submissions.models import Run, Submission
from portal.submissions.verification import verification_due
from portal.teams import services
from portal.teams.selectors import teammate_ids
from tests.contests.test_leaderboard import BASE, Contest


@pytest.fixture(autouse=True)
def _no_broker(sent: Any) -> None:
    """Uploads enqueue their builds; nothing is sent anywhere."""


@pytest.fixture
def contest(db: Any, tmp_path: Path) -> Contest:
    return Contest(tmp_path)


def passes(contest: Contest, who: str, wall_time_ns: int, minute: int) -> Submission:
    submission = contest.submit(who, Submission.OFFICIAL, BASE + dt.timedelta(minutes=minute))
    contest.settle(submission, "passed", wall_time_ns)
    return submission


def board(contest: Contest) -> list[tuple[str, int, bool]]:
    return [
        (row.entrant, row.wall_time_ns, row.team) for row in leaderboard_rows(contest.benchmark)
    ]


def form_team(contest: Contest, name: str, *who: str) -> Any:
    captain, *others = who
    users = contest.users
    team = services.team_create(
        user=users[captain], benchmark=contest.benchmark, name=name, now=BASE
    )
    for other in others:
        invitation = services.team_invite(
            user=users[captain], benchmark=contest.benchmark, username=other, now=BASE
        )
        services.invitation_accept(user=users[other], invitation_id=invitation.pk, now=BASE)
    return team


def test_a_team_has_one_row_its_fastest_members_run_under_its_name(contest):
    form_team(contest, "Fast Cats", "alice", "bob")
    passes(contest, "alice", 2_000, 0)
    bobs = passes(contest, "bob", 1_000, 1)
    passes(contest, "carol", 1_500, 2)

    assert board(contest) == [("Fast Cats", 1_000, True), ("carol", 1_500, False)]
    assert leaderboard_rows(contest.benchmark)[0].submission_id == bobs.pk
    standing = leaderboard_standing(
        contest.benchmark,
        contest.users["alice"],
        teammates=teammate_ids(contest.benchmark.pk, contest.users["alice"].pk),
        version=leaderboard_version(contest.benchmark),
    )
    assert standing is not None
    assert (standing.rank, standing.entrant) == (1, "Fast Cats")


def test_a_tie_between_a_team_and_an_entrant_goes_to_the_earlier_upload(contest):
    form_team(contest, "Fast Cats", "alice", "bob")
    passes(contest, "carol", 1_000, 0)
    passes(contest, "bob", 1_000, 5)

    assert board(contest) == [("carol", 1_000, False), ("Fast Cats", 1_000, True)]


def test_joining_merges_the_rows_and_leaving_splits_them(contest):
    passes(contest, "alice", 2_000, 0)
    passes(contest, "bob", 1_000, 1)
    assert board(contest) == [("bob", 1_000, False), ("alice", 2_000, False)]

    form_team(contest, "Pair", "alice", "bob")
    assert board(contest) == [("Pair", 1_000, True)]
    assert LeaderboardEntry.objects.filter(benchmark=contest.benchmark).count() == 1

    services.team_leave(user=contest.users["bob"], benchmark=contest.benchmark, now=BASE)
    assert board(contest) == [("bob", 1_000, False), ("Pair", 2_000, True)]


def test_a_disqualified_best_gives_the_team_its_next_members_run(contest):
    form_team(contest, "Pair", "alice", "bob")
    passes(contest, "alice", 2_000, 0)
    bobs = passes(contest, "bob", 1_000, 1)

    staff.submission_disqualify(submission=bobs, actor=contest.staff, reason="hard-coded answers")

    assert board(contest) == [("Pair", 2_000, True)]


def test_a_run_slower_than_its_teams_best_is_not_verified(contest):
    """Verification is for a new best of the board identity: a teammate's slower run
    changes no row, so it needs no verification run."""
    form_team(contest, "Pair", "alice", "bob")
    passes(contest, "alice", 1_000, 0)
    bobs = contest.submit("bob", Submission.OFFICIAL, BASE + dt.timedelta(minutes=1))
    started = contest.start(bobs)
    assert started is not None
    Benchmark.objects.filter(pk=contest.benchmark.pk).update(verify_top=20)
    run = Run.objects.select_related("submission__benchmark").get(pk=started.pk)
    run.wall_time_ns = 2_000
    run.passed = True

    assert not verification_due(run)
    run.wall_time_ns = 500  # faster than the team's best: a new best, at the top
    assert verification_due(run)


def test_a_team_formed_by_someone_on_the_board_changes_the_boards_version(contest):
    passes(contest, "alice", 2_000, 0)
    before = leaderboard_version(contest.benchmark).key
    services.team_create(
        user=contest.users["alice"], benchmark=contest.benchmark, name="Solo Act", now=BASE
    )
    assert board(contest) == [("Solo Act", 2_000, True)]  # same run, new name
    assert leaderboard_version(contest.benchmark).key != before  # no cached page keeps "alice"
