"""Nominations are a team's: at most two for the whole team, set by any member from any
member's passing official submissions; the final rerun counts the team once. An entrant on
their own is a team of one, as before."""

from __future__ import annotations

from typing import Any

import pytest

from portal.core import errors
from portal.standings.models import FinalEntry, Nomination
from portal.standings.nominations import counted_for, nominations_of, nominations_set
from portal.standings.rerun import final_rerun_decision
from portal.submissions.models import Run
from portal.teams import services as teams
from portal.teams.models import Team
from tests import factories
from tests.standings.test_rerun import play, start
from tests.web.boards import official_run


def team_of(benchmark: Any, captain: Any, *others: Any, name: str = "Night Owls") -> Team:
    team = teams.team_create(user=captain, benchmark=benchmark, name=name)
    for user in others:
        invitation = teams.team_invite(user=captain, benchmark=benchmark, username=user.username)
        teams.invitation_accept(user=user, invitation_id=invitation.pk)
    return team


def passed(benchmark: Any, user: Any, wall: int) -> int:
    return int(official_run(benchmark, user, wall).submission_id)


@pytest.fixture
def five(alice, bob):
    return [alice, bob, *(factories.UserFactory(username=n) for n in ("carol", "dave", "erin"))]


def test_a_five_member_team_that_each_nominate_two_counts_two_in_the_rerun(
    closing, five, staff, after_close
):
    team = team_of(closing, *five)
    own = {
        user.pk: [passed(closing, user, 100 + 10 * i + j) for j in (0, 1)]
        for i, user in enumerate(five)
    }
    for user in five:  # each member names two of their own: each replaces the team's
        nominations_set(entrant=user, benchmark=closing, submission_ids=own[user.pk])

    last = own[five[-1].pk]
    assert Nomination.objects.filter(benchmark=closing).count() == 2
    assert counted_for(closing) == {-team.pk: last}
    start(closing, staff, after_close)
    queued = set(Run.objects.filter(purpose=Run.FINAL).values_list("submission_id", flat=True))
    assert queued == set(last)
    assert FinalEntry.objects.count() == 2


def test_without_a_nomination_a_team_counts_its_two_best_whoever_uploaded_them(
    closing, five, staff, after_close
):
    team = team_of(closing, *five)
    walls = {
        user.pk: [passed(closing, user, 500 - 10 * i - j) for j in (0, 1)]
        for i, user in enumerate(five)
    }
    erin = walls[five[-1].pk]
    dave = walls[five[-2].pk]
    assert counted_for(closing) == {-team.pk: [erin[1], erin[0]]}
    state = nominations_of(closing, five[0])
    assert state.default and state.counted == [erin[1], erin[0]]
    assert state.eligible[:3] == [erin[1], erin[0], dave[1]] and len(state.eligible) == 10

    start(closing, staff, after_close)
    play({sid: [400] for ids in walls.values() for sid in ids})
    decision = final_rerun_decision(closing)
    assert decision is not None
    assert [row.entrant for row in decision.rows] == ["Night Owls"]


def test_any_member_names_any_members_submission_and_the_page_says_who(closing, alice, bob):
    team_of(closing, alice, bob)
    hers = passed(closing, alice, 300)
    his = passed(closing, bob, 200)

    state = nominations_set(entrant=bob, benchmark=closing, submission_ids=[hers])

    assert state.team == "Night Owls" and state.set_by == "bob" and state.counted == [hers]
    seen = nominations_of(closing, alice)
    assert (seen.nominated, seen.set_by, seen.default) == ([hers], "bob", False)
    assert his in seen.eligible


def test_a_submission_of_someone_outside_the_team_is_not_found(closing, alice, bob):
    team_of(closing, alice)
    theirs = passed(closing, bob, 100)
    with pytest.raises(errors.NotFound):
        nominations_set(entrant=alice, benchmark=closing, submission_ids=[theirs])
    assert not Nomination.objects.exists()


def test_three_for_a_team_are_refused_and_change_nothing(closing, alice, bob):
    team_of(closing, alice, bob)
    first = passed(closing, alice, 100)
    nominations_set(entrant=alice, benchmark=closing, submission_ids=[first])
    ids = [passed(closing, alice, 200), passed(closing, bob, 300), passed(closing, bob, 400)]
    with pytest.raises(errors.InvalidParameter, match="at most 2"):
        nominations_set(entrant=bob, benchmark=closing, submission_ids=ids)
    assert nominations_of(closing, bob).nominated == [first]


def test_a_member_who_leaves_takes_their_submissions_out_of_the_teams_nominations(
    closing, alice, bob
):
    team = team_of(closing, alice, bob)
    hers = passed(closing, alice, 100)
    his = passed(closing, bob, 200)
    nominations_set(entrant=alice, benchmark=closing, submission_ids=[hers, his])

    teams.team_leave(user=bob, benchmark=closing)

    assert counted_for(closing) == {-team.pk: [hers], bob.pk: [his]}
    assert nominations_of(closing, alice).nominated == [hers]
    bobs = nominations_of(closing, bob)
    assert bobs.team == "" and bobs.default and bobs.counted == [his]


def test_joining_a_team_gives_up_ones_own_nominations_for_the_teams(closing, alice, bob):
    team = team_of(closing, alice)
    hers = passed(closing, alice, 100)
    nominations_set(entrant=alice, benchmark=closing, submission_ids=[hers])
    his_slow = passed(closing, bob, 300)
    passed(closing, bob, 200)
    nominations_set(entrant=bob, benchmark=closing, submission_ids=[his_slow])

    invitation = teams.team_invite(user=alice, benchmark=closing, username="bob")
    teams.invitation_accept(user=bob, invitation_id=invitation.pk)

    assert counted_for(closing) == {-team.pk: [hers]}
    assert list(Nomination.objects.values_list("submission_id", flat=True)) == [hers]


def test_an_entrant_on_their_own_is_a_team_of_one(closing, alice, bob):
    team_of(closing, bob)
    mine = [passed(closing, alice, wall) for wall in (300, 100, 200)]
    state = nominations_of(closing, alice)
    assert state.team == "" and state.counted == [mine[1], mine[2]]
    state = nominations_set(entrant=alice, benchmark=closing, submission_ids=[mine[0]])
    assert state.set_by == "alice" and state.counted == [mine[0]]
    assert counted_for(closing)[alice.pk] == [mine[0]]


def test_the_page_and_the_api_show_the_teams_nominations_and_who_set_them(
    client, client_for, closing, alice, bob
):
    team_of(closing, alice, bob)
    his = passed(closing, bob, 100)
    response = client_for(alice).put(
        f"/api/v1/benchmarks/{closing.slug}/nominations/",
        {"submission_ids": [his]},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = client_for(bob).get(f"/api/v1/benchmarks/{closing.slug}/nominations/").json()
    assert (body["team"], body["nominated"], body["set_by"]) == ("Night Owls", [his], "alice")
    assert body["set_at"] is not None and body["counted"] == [his]

    client.force_login(bob)
    page = " ".join(client.get(f"/b/{closing.slug}/nominations/").content.decode().split())
    assert "Team Night Owls's nominations" in page and "Named by alice" in page
