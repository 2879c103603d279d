"""The final rerun: started by staff after the close, it queues ``final_runs`` runs of
each counted submission on the final cohort, claimed and recorded like any run; close
neighbours get extra runs, then tie; a failed run drops the submission."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.conf import settings

from portal.audit.models import AuditEvent
from portal.contests.models import Cohort
from portal.core import errors
from portal.standings.models import FinalEntry, FinalSettings
from portal.standings.nominations import nominations_set
from portal.standings.rerun import (
    OFFICIAL_COHORT_CONFIRMATION,
    final_rerun_advance,
    final_rerun_decision,
    final_rerun_start,
)
from portal.submissions import waiting
from portal.submissions.final import run_record_final
from portal.submissions.models import Run, Submission
from portal.submissions.runs import run_claim_next, run_record_infra_failure
from tests import factories
from tests.web.boards import official_run

CLASS = settings.PODIUM_HARDWARE_CLASS


def start(benchmark, staff, at):
    """Start the final rerun at ``at``, confirming the official cohort when there is no
    final one."""
    with time_machine.travel(at, tick=False):
        return final_rerun_start(
            benchmark=benchmark,
            actor=staff,
            reason="contest over",
            confirm_official_cohort=OFFICIAL_COHORT_CONFIRMATION,
        )


def play(walls_by_submission, *, fail=None):
    """Claim every queued final run in the fair order and record it: the next wall time
    of its submission from ``walls_by_submission`` (a failed verdict for ``fail``)."""
    played = 0
    while (run := run_claim_next(hardware_class=CLASS, lease_s=60)) is not None:
        assert run.purpose == Run.FINAL
        assert Submission.objects.get(pk=run.submission_id).status == Submission.PASSED
        walls = walls_by_submission[run.submission_id]
        wall = walls.pop(0) if len(walls) > 1 else walls[0]
        if fail == run.submission_id:
            run_record_final(run_id=run.pk, status="failed", reason="980 of 1000 matched")
        else:
            run_record_final(
                run_id=run.pk, status="passed", reason="ok", wall_time_ns=wall, matches=10_000
            )
        played += 1
    return played


def test_it_is_refused_before_the_close(closing, staff):
    with pytest.raises(errors.InvalidParameter, match="after the benchmark closes"):
        final_rerun_start(benchmark=closing, actor=staff, reason="too early")


def test_it_is_refused_without_the_permission(closing, alice, after_close):
    with pytest.raises(errors.PermissionDenied):
        start(closing, alice, after_close)


def test_it_queues_final_runs_of_each_counted_submission_audited(
    closing, alice, bob, staff, after_close, sent, django_capture_on_commit_callbacks
):
    a1 = official_run(closing, alice, 100).submission
    a2 = official_run(closing, alice, 120).submission
    official_run(closing, alice, 200)  # third best: not counted
    b1 = official_run(closing, bob, 150).submission
    with django_capture_on_commit_callbacks(execute=True):
        rerun = start(closing, staff, after_close)
    assert rerun.cohort.kind == Cohort.OFFICIAL and rerun.final_runs == 3
    queued = Run.objects.filter(purpose=Run.FINAL, status=Run.QUEUED)
    assert sorted(queued.values_list("submission_id", flat=True)) == sorted(
        [a1.pk] * 3 + [a2.pk] * 3 + [b1.pk] * 3
    )
    assert len([name for name, _ in sent if name == "scoring.score_next"]) == 9
    event = AuditEvent.objects.get(action="standings.final_rerun_started")
    assert event.reason == "contest over" and event.details["runs_queued"] == 9
    with pytest.raises(errors.InvalidParameter, match="already started"):
        start(closing, staff, after_close)


def test_it_uses_the_final_cohort_when_staff_imported_one(closing, alice, staff, after_close):
    official_run(closing, alice, 100)
    final = Cohort.objects.create(benchmark=closing, kind="final")
    rerun = start(closing, staff, after_close)
    assert rerun.cohort == final
    assert set(Run.objects.filter(purpose=Run.FINAL).values_list("cohort", flat=True)) == {final.pk}


def test_it_uses_the_nominations_and_the_settings(closing, alice, staff, after_close):
    slow = official_run(closing, alice, 300).submission
    official_run(closing, alice, 100)
    nominations_set(entrant=alice, benchmark=closing, submission_ids=[slow.pk])
    FinalSettings.objects.create(benchmark=closing, final_runs=5)
    start(closing, staff, after_close)
    assert (
        list(Run.objects.filter(purpose=Run.FINAL).values_list("submission_id", flat=True))
        == [slow.pk] * 5
    )


def test_final_runs_are_claimed_one_at_a_time_per_submission(closing, alice, staff, after_close):
    official_run(closing, alice, 100)
    start(closing, staff, after_close)
    first = run_claim_next(hardware_class=CLASS, lease_s=60)
    assert first is not None and first.status == Run.STAGING
    assert run_claim_next(hardware_class=CLASS, lease_s=60) is None  # its other runs wait
    assert CLASS in waiting.classes_waiting(now=after_close + dt.timedelta(hours=1))


def test_it_ranks_by_the_median_and_leaves_the_board_alone(
    closing, alice, bob, staff, after_close, band
):
    band(1.0)
    a = official_run(closing, alice, 100).submission
    b = official_run(closing, bob, 150).submission
    start(closing, staff, after_close)
    assert play({a.pk: [500, 200, 210], b.pk: [180, 190, 185]}) == 6
    decision = final_rerun_decision(closing)
    assert decision.complete
    assert [(r.entrant, r.wall_time_ns, r.runs) for r in decision.rows] == [
        ("bob", 185, 3),
        ("alice", 210, 3),
    ]
    assert Submission.objects.get(pk=a.pk).status == Submission.PASSED
    assert closing.leaderboard.get(entrant=alice).wall_time_ns == 100  # the board is as it was


def test_a_failed_final_run_drops_the_submission(closing, alice, bob, staff, after_close):
    a = official_run(closing, alice, 100).submission
    b = official_run(closing, bob, 150).submission
    start(closing, staff, after_close)
    play({a.pk: [100], b.pk: [150]}, fail=a.pk)
    decision = final_rerun_decision(closing)
    assert [r.entrant for r in decision.rows] == ["bob"]
    assert decision.dropped == {a.pk: "980 of 1000 matched"}


SECOND = 1_000_000_000


def test_a_final_run_far_faster_than_its_official_run_does_not_rank(
    closing, alice, bob, staff, after_close
):
    """Hostile: honest until the close (2 s official runs), a lookup table after it
    (0.5 s final runs). Its runs are recorded as failed, the reason kept, and it drops."""
    table = official_run(closing, alice, 2 * SECOND).submission
    honest = official_run(closing, bob, 3 * SECOND).submission
    start(closing, staff, after_close)

    play({table.pk: [SECOND // 2], honest.pk: [3 * SECOND]})

    decision = final_rerun_decision(closing)
    assert [r.entrant for r in decision.rows] == ["bob"]
    reason = decision.dropped[table.pk]
    assert reason.startswith("Not ranked: the final run took 0.500 s against the official 2.000 s")
    assert "more than 10% (at least 100 ms) slower" in reason
    runs = Run.objects.filter(submission=table, purpose=Run.FINAL)
    assert {(run.passed, run.verdict) for run in runs} == {(False, Submission.FAILED)}
    assert all(run.verification_note.startswith("rejected: the final run took") for run in runs)
    assert Submission.objects.get(pk=table.pk).status == Submission.PASSED  # never charged


def test_a_final_run_within_the_tolerance_of_its_official_run_ranks(
    closing, alice, bob, staff, after_close
):
    """Honest: a little faster (a warm host, 9% under 10%) or slower, both rank."""
    faster = official_run(closing, alice, 2 * SECOND).submission
    slower = official_run(closing, bob, 2 * SECOND).submission
    start(closing, staff, after_close)

    play({faster.pk: [int(1.83 * SECOND)], slower.pk: [5 * SECOND]})

    decision = final_rerun_decision(closing)
    assert decision.dropped == {}
    assert [r.entrant for r in decision.rows] == ["alice", "bob"]
    assert not Run.objects.filter(purpose=Run.FINAL).exclude(verification_note="").exists()


def test_a_final_cohort_of_another_size_is_compared_per_image(
    closing, alice, bob, staff, after_close
):
    """The official runs took 2 s on 10,000 images; the final cohort has 5,000. A final
    run of 1.0 s is the same speed an image and ranks; one of 0.5 s is twice as fast an
    image (a table after the close) and drops, its reason naming the scaled time."""
    same = official_run(closing, alice, 2 * SECOND).submission
    table = official_run(closing, bob, 2 * SECOND).submission
    start(closing, staff, after_close)
    Run.objects.filter(purpose=Run.FINAL).update(total=5_000)

    play({same.pk: [SECOND], table.pk: [SECOND // 2]})

    decision = final_rerun_decision(closing)
    assert [r.entrant for r in decision.rows] == ["alice"]
    assert decision.dropped[table.pk].startswith(
        "Not ranked: the final run took 0.500 s against the official 1.000 s"
    )


def test_close_neighbours_get_extra_runs_then_tie(closing, alice, bob, staff, after_close, band):
    band(2.0)
    a = official_run(closing, alice, 100).submission
    b = official_run(closing, bob, 150).submission
    start(closing, staff, after_close)
    play({a.pk: [1000], b.pk: [1010]})
    assert not final_rerun_decision(closing).complete
    assert final_rerun_advance(closing.pk) == sorted([a.pk, b.pk])
    assert final_rerun_advance(closing.pk) == []  # asked once
    assert Run.objects.filter(purpose=Run.FINAL, status=Run.QUEUED).count() == 4
    assert FinalEntry.objects.filter(extra_requested=True).count() == 2
    play({a.pk: [1000], b.pk: [1010]})
    decision = final_rerun_decision(closing)
    assert decision.complete
    assert [(r.rank, r.tied, r.runs) for r in decision.rows] == [(1, True, 5), (1, True, 5)]


def test_the_verdict_hook_asks_for_extra_runs_after_commit(
    closing, alice, bob, staff, after_close, band, django_capture_on_commit_callbacks
):
    band(2.0)
    a = official_run(closing, alice, 100).submission
    b = official_run(closing, bob, 150).submission
    start(closing, staff, after_close)
    with django_capture_on_commit_callbacks(execute=True):
        play({a.pk: [1000], b.pk: [1010]})
    assert Run.objects.filter(purpose=Run.FINAL, status=Run.QUEUED).count() == 4


def test_a_platform_fault_is_retried_once(closing, alice, staff, after_close):
    official_run(closing, alice, 100)
    FinalSettings.objects.create(benchmark=closing, final_runs=1)
    start(closing, staff, after_close)
    run = run_claim_next(hardware_class=CLASS, lease_s=60)
    run_record_infra_failure(run_id=run.pk, reason="engine gone")
    again = run_claim_next(hardware_class=CLASS, lease_s=60)
    assert again is not None and again.pk != run.pk
    run_record_infra_failure(run_id=again.pk, reason="engine gone")
    assert run_claim_next(hardware_class=CLASS, lease_s=60) is None
    assert Submission.objects.get(pk=run.submission_id).status == Submission.PASSED


def test_it_is_refused_before_the_nomination_deadline_and_after_publishing(
    closing, alice, staff, after_close
):
    from portal.standings.publishing import standings_publish

    official_run(closing, alice, 100)
    FinalSettings.objects.create(
        benchmark=closing, nomination_deadline=after_close + dt.timedelta(hours=1)
    )
    with pytest.raises(errors.InvalidParameter, match="nomination deadline"):
        start(closing, staff, after_close)
    later = after_close + dt.timedelta(hours=2)
    with time_machine.travel(later, tick=False):
        standings_publish(benchmark=closing, actor=staff, reason="from the board")
    with pytest.raises(errors.InvalidParameter, match="correct them instead"):
        start(closing, staff, later)


def test_a_team_ranks_once_with_its_members_best_under_its_name(
    closing, alice, bob, staff, after_close
):
    from portal.teams import services as teams

    carol = factories.UserFactory(username="carol")
    a = official_run(closing, alice, 100).submission
    b = official_run(closing, bob, 150).submission
    c = official_run(closing, carol, 120).submission
    teams.team_create(user=alice, benchmark=closing, name="Night Owls")
    invitation = teams.team_invite(user=alice, benchmark=closing, username="bob")
    teams.invitation_accept(user=bob, invitation_id=invitation.pk)
    start(closing, staff, after_close)
    play({a.pk: [300], b.pk: [200], c.pk: [250]})  # bob's is the team's best here

    decision = final_rerun_decision(closing)
    assert decision is not None and decision.complete
    assert [(row.rank, row.entrant, row.submission_id) for row in decision.rows] == [
        (1, "Night Owls", b.pk),
        (2, "carol", c.pk),
    ]
