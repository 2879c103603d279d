"""No prize before review: on a benchmark with a validation-data boundary, each row in a
prize position of the final standings enters provenance review, and publishing (or a
correction bringing a new row into a prize position) is refused, naming the rows, until
each is cleared or its submission disqualified."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.urls import reverse

from portal.audit.models import AuditEvent
from portal.core import errors
from portal.standings import rules
from portal.standings.models import FinalSettings, Standings
from portal.standings.prizes import prize_rows
from portal.standings.publishing import standings_correct, standings_publish
from portal.standings.selectors import published
from portal.submissions.models import ProvenanceReview, Submission
from portal.submissions.review import review_decide
from portal.submissions.staff import submission_disqualify
from tests import factories
from tests.standings.test_rerun import play, start
from tests.web.boards import official_run

BOUNDARY = "No validation image may be in, or have helped make, an entry."


@pytest.fixture
def bounded(closing):
    """``closing`` with a validation-data boundary: its apparent winners are reviewed."""
    closing.validation_boundary = BOUNDARY
    closing.save(update_fields=["validation_boundary"])
    return closing


@pytest.fixture
def carol(db):
    return factories.UserFactory(username="carol")


@pytest.fixture
def dave(db):
    return factories.UserFactory(username="dave")


def publish(benchmark, staff, at):
    with time_machine.travel(at, tick=False):
        return standings_publish(benchmark=benchmark, actor=staff, reason="results")


def correct(benchmark, staff, at):
    with time_machine.travel(at, tick=False):
        return standings_correct(benchmark=benchmark, actor=staff, reason="a disqualification")


def decide(submission, staff, decision):
    review = ProvenanceReview.objects.get(submission=submission)
    return review_decide(review=review, actor=staff, decision=decision, reason="looked at it")


def state(submission):
    found = ProvenanceReview.objects.filter(submission=submission).first()
    return found.status if found else None


def test_a_tie_at_the_last_prize_rank_brings_every_tied_row_in():
    def row(rank, sid, tied=False):
        return rules.Row(rank, sid, f"e{sid}", sid, 100 * sid, 3, tied)

    rows = [row(1, 1), row(2, 2, True), row(2, 3, True), row(4, 4)]
    assert [r.submission_id for r in prize_rows(rows, 2)] == [1, 2, 3]
    assert [r.submission_id for r in prize_rows(rows, 3)] == [1, 2, 3]
    assert [r.submission_id for r in prize_rows(rows, 1)] == [1]


def test_publishing_while_the_leader_is_under_review_is_refused_naming_it(
    bounded, staff, alice, bob, after_close
):
    leader = official_run(bounded, alice, 100).submission
    second = official_run(bounded, bob, 200).submission
    with pytest.raises(errors.InvalidParameter) as refused:
        publish(bounded, staff, after_close)
    said = refused.value.detail
    assert f"rank 1, alice, submission {leader.pk} (under_review)" in said
    assert f"rank 2, bob, submission {second.pk} (under_review)" in said
    assert not Standings.objects.exists()
    assert not AuditEvent.objects.filter(action="standings.published").exists()
    # The refused attempt opened both reviews, and they stay open for staff to decide.
    review = ProvenanceReview.objects.get(submission=leader)
    assert review.opened_because == "rank 1 of the final standings (a prize position)"
    assert state(second) == ProvenanceReview.UNDER_REVIEW
    decide(leader, staff, ProvenanceReview.CLEARED)
    with pytest.raises(errors.InvalidParameter) as refused:
        publish(bounded, staff, after_close)
    assert "alice" not in refused.value.detail and f"submission {second.pk}" in refused.value.detail


def test_once_every_prize_row_is_cleared_it_publishes_and_marks_them(
    bounded, staff, alice, bob, carol, dave, after_close, client
):
    runs = [official_run(bounded, who, wall) for who, wall in ((alice, 100), (bob, 200))]
    runs += [official_run(bounded, who, wall) for who, wall in ((carol, 300), (dave, 400))]
    with pytest.raises(errors.InvalidParameter):
        publish(bounded, staff, after_close)
    for run in runs[:3]:
        decide(run.submission, staff, ProvenanceReview.CLEARED)
    # Rank 4 is no prize position (3 by default): never reviewed, not waited for.
    assert state(runs[3].submission) is None
    standings = publish(bounded, staff, after_close)
    assert [row.entrant for row in standings.rows.order_by("position")] == [
        "alice",
        "bob",
        "carol",
        "dave",
    ]
    page = client.get(f"/b/{bounded.slug}/standings/").content.decode()
    assert page.count('class="status status-cleared"') == 3
    body = client.get(f"/api/v1/benchmarks/{bounded.slug}/standings/").json()
    assert [row["review"] for row in body["rows"]] == ["cleared", "cleared", "cleared", None]
    exported = client.get(f"/api/v1/benchmarks/{bounded.slug}/standings.json").json()
    assert exported["rows"][0]["review"] == "cleared"


def test_a_benchmark_without_a_boundary_publishes_without_review(
    closing, staff, alice, after_close
):
    official_run(closing, alice, 100)
    publish(closing, staff, after_close)
    assert Standings.objects.filter(benchmark=closing).exists()
    assert not ProvenanceReview.objects.exists()


def test_a_rerun_winner_outside_the_boards_top_three_is_reviewed_when_it_settles(
    bounded, staff, alice, bob, carol, dave, after_close, django_capture_on_commit_callbacks
):
    a = official_run(bounded, alice, 100).submission
    b = official_run(bounded, bob, 110).submission
    c = official_run(bounded, carol, 120).submission
    d = official_run(bounded, dave, 400).submission  # fourth on the board at the close
    start(bounded, staff, after_close)
    with django_capture_on_commit_callbacks(execute=True):
        play({a.pk: [300], b.pk: [310], c.pk: [320], d.pk: [50]})
    # The rerun settled: its prize positions are under review, the board's fourth first.
    review = ProvenanceReview.objects.get(submission=d)
    assert review.opened_because == "rank 1 of the final standings (a prize position)"
    assert state(c) is None  # rank 4 of the rerun
    with pytest.raises(errors.InvalidParameter) as refused:
        publish(bounded, staff, after_close + dt.timedelta(hours=5))
    assert f"rank 1, dave, submission {d.pk} (under_review)" in refused.value.detail
    for submission in (d, a, b):
        decide(submission, staff, ProvenanceReview.CLEARED)
    publish(bounded, staff, after_close + dt.timedelta(hours=5))
    assert [row.entrant for row in published(bounded).rows] == ["dave", "alice", "bob", "carol"]


def test_a_disqualified_prize_row_makes_way_and_the_next_one_is_reviewed(
    bounded, staff, alice, bob, carol, after_close
):
    FinalSettings.objects.create(benchmark=bounded, prize_positions=1)
    a = official_run(bounded, alice, 100).submission
    b = official_run(bounded, bob, 200).submission
    official_run(bounded, carol, 300)
    with pytest.raises(errors.InvalidParameter, match=f"rank 1, alice, submission {a.pk}"):
        publish(bounded, staff, after_close)
    assert state(b) is None  # rank 2: no prize position
    decide(a, staff, ProvenanceReview.DISQUALIFIED)
    # Bob moves up into the prize position: his own review opens, and it is waited for.
    with pytest.raises(errors.InvalidParameter) as refused:
        publish(bounded, staff, after_close)
    assert f"rank 1, bob, submission {b.pk} (under_review)" in refused.value.detail
    assert "alice" not in refused.value.detail
    decide(b, staff, ProvenanceReview.CLEARED)
    publish(bounded, staff, after_close)
    assert [row.entrant for row in published(bounded).rows] == ["bob", "carol"]


def test_an_entrants_other_submission_moving_up_needs_its_own_review(
    bounded, staff, alice, bob, after_close, django_capture_on_commit_callbacks
):
    FinalSettings.objects.create(benchmark=bounded, prize_positions=1)
    best = official_run(bounded, alice, 100).submission
    other = official_run(bounded, alice, 150).submission  # also counted for alice
    b = official_run(bounded, bob, 200).submission
    start(bounded, staff, after_close)
    with django_capture_on_commit_callbacks(execute=True):
        play({best.pk: [100], other.pk: [120], b.pk: [200]})
    assert state(best) == ProvenanceReview.UNDER_REVIEW and state(other) is None
    decide(best, staff, ProvenanceReview.DISQUALIFIED)
    with pytest.raises(errors.InvalidParameter) as refused:
        publish(bounded, staff, after_close + dt.timedelta(hours=5))
    assert f"rank 1, alice, submission {other.pk} (under_review)" in refused.value.detail
    decide(other, staff, ProvenanceReview.CLEARED)
    publish(bounded, staff, after_close + dt.timedelta(hours=5))
    assert [(r.entrant, r.submission_id) for r in published(bounded).rows] == [
        ("alice", other.pk),
        ("bob", b.pk),
    ]


def test_a_correction_waits_for_the_review_of_a_row_new_to_a_prize_position(
    bounded, staff, alice, bob, carol, after_close
):
    FinalSettings.objects.create(benchmark=bounded, prize_positions=2)
    a = official_run(bounded, alice, 100).submission
    b = official_run(bounded, bob, 200).submission
    c = official_run(bounded, carol, 300).submission
    with pytest.raises(errors.InvalidParameter):
        publish(bounded, staff, after_close)
    decide(a, staff, ProvenanceReview.CLEARED)
    decide(b, staff, ProvenanceReview.CLEARED)
    before = publish(bounded, staff, after_close).digest
    # A late disqualification (not from review) takes alice off; carol moves to rank 2.
    submission_disqualify(submission=a, actor=staff, reason="shared an account")
    with pytest.raises(errors.InvalidParameter) as refused:
        correct(bounded, staff, after_close + dt.timedelta(days=1))
    assert f"rank 2, carol, submission {c.pk} (under_review)" in refused.value.detail
    assert f"submission {b.pk}" not in refused.value.detail
    assert Standings.objects.get(benchmark=bounded).digest == before
    decide(c, staff, ProvenanceReview.CLEARED)
    correct(bounded, staff, after_close + dt.timedelta(days=1))
    assert [row.entrant for row in published(bounded).rows] == ["bob", "carol"]


def test_the_api_and_the_admin_refuse_and_name_the_rows(
    bounded, staff, alice, after_close, client_for, admin_client
):
    leader = official_run(bounded, alice, 100).submission
    with time_machine.travel(after_close, tick=False):
        answer = client_for(staff).post(
            f"/api/v1/benchmarks/{bounded.slug}/standings/publish/", {"reason": "results"}
        )
    assert answer.status_code == 400 and answer.json()["code"] == "invalid_parameter"
    assert f"rank 1, alice, submission {leader.pk} (under_review)" in answer.json()["detail"]
    settings = FinalSettings.objects.create(benchmark=bounded)
    with time_machine.travel(after_close, tick=False):
        page = admin_client.post(
            reverse("admin:standings_finalsettings_changelist"),
            {"action": "publish", "_selected_action": [settings.pk], "apply": "yes", "reason": "r"},
            follow=True,
        ).content.decode()
    assert f"submission {leader.pk} (under_review)" in page
    assert not Standings.objects.exists()
    assert Submission.objects.get(pk=leader.pk).disqualified_at is None
