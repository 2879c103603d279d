"""Campaign services with the database: queueing, duplicates, triggers, rounds, voids,
the crown, waiting for capacity, staff controls, and what the selectors show."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.campaigns import controls, creation, recording, rounds, rules, selectors, sweep
from portal.campaigns.models import Campaign, Crown, Round, RoundEntry
from portal.core import errors, jobs
from portal.submissions import staff
from portal.submissions.models import AttemptLedger, Submission, SubmissionEvent
from tests import factories
from tests.campaigns.conftest import HOST, Enter, report

NOW = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)
MINUTE = dt.timedelta(minutes=1)


def status(submission: Submission) -> str:
    submission.refresh_from_db()
    return submission.status


def refunded(submission: Submission) -> bool:
    return AttemptLedger.objects.filter(submission=submission, delta=AttemptLedger.REFUND).exists()


def queued(
    campaign: Campaign, enter: Enter, count: int, start: dt.datetime = NOW
) -> list[Submission]:
    """``count`` submissions queued a minute apart, the last at ``start``."""
    return [enter(at=start - (count - 1 - n) * MINUTE) for n in range(count)]


def start_and_claim(campaign: Campaign, now: dt.datetime = NOW) -> rounds.RoundClaim:
    round_ = rounds.round_maybe_start(campaign, now, force=True)
    assert round_ is not None
    claim = rounds.round_claim(round_.pk, HOST, now)
    assert claim is not None
    return claim


def entry_of(claim: rounds.RoundClaim, submission: Submission) -> RoundEntry:
    return RoundEntry.objects.get(round_id=claim.round_id, submission=submission)


# Queueing ----------------------------------------------------------------------------------


def test_a_built_campaign_submission_waits_for_a_round(
    campaign: Campaign, enter: Enter, tasks: Any
) -> None:
    submission = enter(at=NOW)
    assert submission.status == Submission.BENCH_QUEUED
    assert submission.queued_at == NOW
    assert submission.image_digest.startswith("sha256:")
    assert not [t for t in tasks if t["name"] == jobs.SCORE_NEXT]  # no timed run
    assert selectors.waiting_submissions(campaign).get() == submission


def test_a_practice_submission_of_a_campaign_takes_the_ordinary_path(
    campaign: Campaign, enter: Enter, django_capture_on_commit_callbacks: Any, tasks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        practice = enter(kind=Submission.PRACTICE)
    assert practice.status == Submission.QUEUED
    assert [t["name"] for t in tasks] == [jobs.SCORE_NEXT]


def test_the_same_source_in_the_same_environment_collapses_to_the_earliest_and_is_refunded(
    campaign: Campaign, enter: Enter
) -> None:
    """Duplicates are judged on content: each build commits an image of its own digest,
    but the same source archive built in the same environment image is the same entry."""
    first = enter(source="same", at=NOW - MINUTE)
    copy = enter(source="same", at=NOW)
    assert first.image_digest != copy.image_digest
    other_source = enter(source="other", at=NOW)
    other_environment = enter(source="same", environment_digest="sha256:env2", at=NOW)
    assert status(first) == Submission.BENCH_QUEUED
    assert status(copy) == Submission.DUPLICATE_IMAGE
    assert copy.failure_reason.startswith("duplicate_image")
    assert f"#{first.pk}" in copy.failure_reason
    assert refunded(copy) and not refunded(first)
    assert status(other_source) == Submission.BENCH_QUEUED
    assert status(other_environment) == Submission.BENCH_QUEUED


def test_without_an_environment_digest_no_content_is_known_and_nothing_collapses(
    campaign: Campaign, enter: Enter
) -> None:
    """Content is the source and the environment image together: when the environment's
    digest was never recorded, equal sources are not called duplicates (nobody is
    refused on a guess)."""
    first = enter(source="same", environment_digest="", at=NOW - MINUTE)
    second = enter(source="same", environment_digest="", at=NOW)
    assert (status(first), status(second)) == (Submission.BENCH_QUEUED, Submission.BENCH_QUEUED)
    assert not refunded(second)


def test_an_earlier_submission_built_late_wins_over_a_copy_that_has_not_run(
    campaign: Campaign, enter: Enter
) -> None:
    later = enter(source="same", at=NOW, submitted_at=NOW - 2 * MINUTE)
    earlier = enter(source="same", at=NOW + MINUTE, submitted_at=NOW - 5 * MINUTE)
    assert status(earlier) == Submission.BENCH_QUEUED
    assert status(later) == Submission.DUPLICATE_IMAGE
    assert refunded(later)


def test_a_copy_of_an_image_that_already_ran_is_refused_even_if_submitted_earlier(
    campaign: Campaign, enter: Enter
) -> None:
    ran = enter(source="same", at=NOW, submitted_at=NOW - MINUTE)
    claim = start_and_claim(campaign)
    assert recording.round_record(report(claim))
    assert status(ran) == Submission.PASSED
    late = enter(source="same", at=NOW + MINUTE, submitted_at=NOW - 5 * MINUTE)
    assert status(late) == Submission.DUPLICATE_IMAGE
    assert status(ran) == Submission.PASSED


# Starting rounds ---------------------------------------------------------------------------


def test_five_queued_start_a_round_on_the_class_queue(
    campaign: Campaign, enter: Enter, tasks: Any, django_capture_on_commit_callbacks: Any
) -> None:
    subs = queued(campaign, enter, 4)
    assert rounds.round_maybe_start(campaign, NOW) is None
    subs.append(enter(at=NOW))
    with django_capture_on_commit_callbacks(execute=True):
        round_ = rounds.round_maybe_start(campaign, NOW)
    assert round_ is not None
    assert (round_.ordinal, round_.status, round_.material) == (1, Round.PENDING, rules.GENESIS)
    positions = rules.draw_requests(rules.round_seed(rules.GENESIS, campaign.pk), range(40), 20)
    assert round_.request_positions == positions
    assert round_.request_digest == rules.request_digest(positions)
    assert round_.slice_count == 4
    entries = list(round_.entries.order_by("position"))
    assert [e.submission_id for e in entries] == [s.pk for s in subs]
    assert {e.role for e in entries} == {RoundEntry.CHALLENGER}
    sent = [t for t in tasks if t["name"] == jobs.RUN_ROUND]
    assert sent == [
        {
            "name": jobs.RUN_ROUND,
            "args": (round_.pk,),
            "countdown": None,
            "priority": None,
            "queue": "scoring.gpu-h200",
        }
    ]
    # In the round, they are out of the queue, still bench_queued.
    assert not selectors.waiting_submissions(campaign).exists()
    assert {status(s) for s in subs} == {Submission.BENCH_QUEUED}


def test_one_queued_entry_starts_a_round_six_hours_after_its_queued_event(
    campaign: Campaign, enter: Enter
) -> None:
    enter(at=NOW)
    overview = selectors.campaign_overview(campaign, now=NOW)
    assert overview.next_round.due_at == NOW + dt.timedelta(hours=6)
    assert sweep.campaigns_sweep(NOW + dt.timedelta(hours=6) - MINUTE)["started"] == []
    started = sweep.campaigns_sweep(NOW + dt.timedelta(hours=6))["started"]
    assert len(started) == 1


def test_the_building_hook_starts_the_fifth_round_after_commit(
    campaign: Campaign, enter: Enter, django_capture_on_commit_callbacks: Any, tasks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        queued(campaign, enter, 5, start=timezone.now())
    assert Round.objects.filter(campaign=campaign, status=Round.PENDING).count() == 1


def test_a_round_holds_the_leader_and_five_oldest_challengers_the_rest_wait(
    campaign: Campaign, enter: Enter
) -> None:
    leader = enter(at=NOW - dt.timedelta(hours=1))
    claim = start_and_claim(campaign, NOW - dt.timedelta(hours=1))
    recording.round_record(report(claim))
    assert Crown.objects.get(campaign=campaign).submission_id == leader.pk
    subs = queued(campaign, enter, 7)
    round_ = rounds.round_maybe_start(campaign, NOW)
    assert round_ is not None and round_.ordinal == 2
    entries = list(round_.entries.order_by("position"))
    assert [(e.submission_id, e.role) for e in entries] == [(leader.pk, RoundEntry.LEADER)] + [
        (s.pk, RoundEntry.CHALLENGER) for s in subs[:5]
    ]
    assert list(selectors.waiting_submissions(campaign)) == subs[5:]
    # The second round's request set is drawn from the first round's evidence.
    first = Round.objects.get(campaign=campaign, ordinal=1)
    assert round_.material == first.evidence_digest
    assert round_.request_positions == rules.draw_requests(
        rules.round_seed(first.evidence_digest, campaign.pk), range(40), 20
    )


def test_no_round_starts_paused_without_a_baseline_or_beside_an_open_one(
    campaign: Campaign, enter: Enter
) -> None:
    queued(campaign, enter, 5)
    Campaign.objects.filter(pk=campaign.pk).update(paused=True)
    assert rounds.round_maybe_start(campaign, NOW) is None
    Campaign.objects.filter(pk=campaign.pk).update(paused=False, baseline_image_digest="")
    assert rounds.round_maybe_start(campaign, NOW) is None
    Campaign.objects.filter(pk=campaign.pk).update(baseline_image_digest="sha256:x")
    assert rounds.round_maybe_start(campaign, NOW) is not None
    queued(campaign, enter, 5)
    assert rounds.round_maybe_start(campaign, NOW) is None  # one round at a time


def test_a_disqualified_entry_never_enters_a_round(campaign: Campaign, enter: Enter) -> None:
    """Staff disqualified it while it waited: the round is composed without it, and it
    stays out of the queue (seed 002: a disqualified entry cannot become leader)."""
    subs = queued(campaign, enter, 6)
    cheat = subs[0]  # the oldest: it would be first in
    reviewer = factories.UserFactory(is_staff=True, is_superuser=True)
    staff.submission_disqualify(submission=cheat, actor=reviewer, reason="copied code")

    round_ = rounds.round_maybe_start(campaign, NOW)

    assert round_ is not None
    entered = set(round_.entries.values_list("submission_id", flat=True))
    assert cheat.pk not in entered
    assert entered == {s.pk for s in subs[1:]}
    assert cheat.pk not in selectors.waiting_submissions(campaign).values_list("id", flat=True)


def test_no_round_starts_once_the_campaign_has_closed_not_even_by_staff(
    campaign: Campaign, enter: Enter
) -> None:
    queued(campaign, enter, 5)
    closes_at = NOW + dt.timedelta(hours=1)
    campaign.benchmark.closes_at = closes_at
    campaign.benchmark.save(update_fields=["closes_at"])

    assert rounds.round_maybe_start(campaign, closes_at, force=True) is None
    assert sweep.campaigns_sweep(closes_at + dt.timedelta(hours=7))["started"] == []
    assert not Round.objects.filter(campaign=campaign).exists()
    # Before the close, the same queue starts one.
    assert rounds.round_maybe_start(campaign, closes_at - MINUTE) is not None


# Claiming and waiting for capacity ----------------------------------------------------------


def test_a_claim_moves_a_pending_round_to_running_once(campaign: Campaign, enter: Enter) -> None:
    sub = enter(at=NOW)
    round_ = rounds.round_maybe_start(campaign, NOW, force=True)
    assert round_ is not None
    claim = rounds.round_claim(round_.pk, HOST, NOW)
    assert claim is not None
    assert claim.baseline.image_digest == campaign.baseline_image_digest
    assert [(e.submission_id, e.image_digest) for e in claim.entries] == [
        (sub.pk, sub.image_digest)
    ]
    assert claim.request_positions == round_.request_positions
    assert claim.slices == [(0, 5), (5, 10), (10, 15), (15, 20)]
    assert rounds.round_claim(round_.pk, "other-host", NOW) is None
    round_.refresh_from_db()
    assert (round_.status, round_.host) == (Round.RUNNING, HOST)


def test_a_round_without_capacity_waits_with_a_doubling_backoff(
    campaign: Campaign, enter: Enter, tasks: Any, django_capture_on_commit_callbacks: Any
) -> None:
    enter(at=NOW)
    with django_capture_on_commit_callbacks(execute=True):
        round_ = rounds.round_maybe_start(campaign, NOW, force=True)
        assert round_ is not None
        positions = round_.request_positions
        assert rounds.round_claim(round_.pk, HOST, NOW) is not None
        assert rounds.round_wait_for_capacity(round_.pk, now=NOW) == NOW + 5 * MINUTE
        assert rounds.round_wait_for_capacity(round_.pk, now=NOW) == NOW + 10 * MINUTE
    round_.refresh_from_db()
    assert (round_.status, round_.tries, round_.ordinal, round_.host) == (Round.PENDING, 2, 1, "")
    assert round_.request_positions == positions
    resent = [t["countdown"] for t in tasks if t["name"] == jobs.RUN_ROUND]
    assert resent == [None, 300.0, 600.0]
    row = selectors.campaign_overview(campaign, now=NOW).rounds[0]
    assert row.waiting_for_capacity and row.next_try_at == NOW + 10 * MINUTE
    # A round nobody claimed waits for capacity too, from the sweep.
    assert sweep.campaigns_sweep(NOW + 15 * MINUTE)["retried"] == [round_.pk]
    round_.refresh_from_db()
    assert round_.tries == 3 and round_.next_try_at == NOW + 35 * MINUTE


# Recording a round -------------------------------------------------------------------------


def test_a_scored_round_settles_every_challenger_and_crowns_the_best(
    campaign: Campaign, enter: Enter
) -> None:
    fast, slow, wrong, crashed, killed = queued(campaign, enter, 5)
    claim = start_and_claim(campaign)
    outcome = report(
        claim,
        {
            fast.pk: {"seconds": 6.0},
            slow.pk: {"seconds": 9.0},
            wrong.pk: {"wrong": 5},
            crashed.pk: {"exit_code": 1},
            killed.pk: {"killed": True, "exit_code": None},
        },
    )
    assert recording.round_record(outcome, NOW)
    assert not recording.round_record(outcome, NOW)  # once
    round_ = Round.objects.get(pk=claim.round_id)
    assert round_.status == Round.SCORED
    assert round_.evidence_digest == rules.evidence_digest(round_.evidence)
    assert round_.evidence["environment"]["cpu_cores"] == 16
    assert round_.evidence["outcome"]["entries"][0]["slices"][0]["wall_ns"] == 6_000_000_000
    verdicts = {e.submission_id: (e.verdict, e.score) for e in round_.entries.all()}
    assert verdicts[fast.pk] == (RoundEntry.PASSED, pytest.approx(0.4))
    assert verdicts[slow.pk] == (RoundEntry.PASSED, pytest.approx(0.1))
    assert verdicts[wrong.pk] == (RoundEntry.FAILED_CORRECTNESS, None)
    assert verdicts[crashed.pk] == (RoundEntry.DISQUALIFIED, None)
    assert verdicts[killed.pk] == (RoundEntry.INFRA_FAILED, None)
    assert [status(s) for s in (fast, slow, wrong, crashed, killed)] == [
        Submission.PASSED,
        Submission.PASSED,
        Submission.FAILED,
        Submission.ERRORED,
        Submission.BENCH_QUEUED,  # requeued once, with a new queued event
    ]
    assert killed.queued_at == NOW
    assert crashed.failure_reason.startswith("Disqualified in round 1")
    crown = Crown.objects.get(campaign=campaign)
    assert (crown.submission_id, crown.score, crown.round_id) == (
        fast.pk,
        pytest.approx(0.4),
        round_.pk,
    )
    assert not any(refunded(s) for s in (fast, slow, wrong, crashed, killed))


def test_disqualifying_the_leader_vacates_the_crown_at_once_audited(
    campaign: Campaign, enter: Enter
) -> None:
    leader, other = queued(campaign, enter, 2)
    claim = start_and_claim(campaign)
    outcome = report(claim, {leader.pk: {"seconds": 6.0}, other.pk: {"seconds": 9.0}})
    assert recording.round_record(outcome, NOW)
    assert Crown.objects.get(campaign=campaign).submission_id == leader.pk
    reviewer = factories.UserFactory(is_staff=True, is_superuser=True)

    staff.submission_disqualify(submission=other, actor=reviewer, reason="not the leader")
    assert Crown.objects.get(campaign=campaign).submission_id == leader.pk  # others: no change
    staff.submission_disqualify(submission=leader, actor=reviewer, reason="copied code")

    assert not Crown.objects.filter(campaign=campaign).exists()  # now, not at the next round
    assert selectors.campaign_overview(campaign, now=NOW).crown is None
    event = AuditEvent.objects.get(action="campaign.crown_vacated")
    assert event.target == f"campaign:{campaign.pk}"
    assert "copied code" in event.reason and str(leader.pk) in event.reason


def test_a_second_infra_failure_ends_the_submission_and_refunds_it(
    campaign: Campaign, enter: Enter
) -> None:
    flaky = enter(at=NOW - MINUTE)
    for attempt in range(2):
        enter(at=NOW)  # a challenger with a verdict, or the round would be void
        claim = start_and_claim(campaign, NOW + attempt * MINUTE)
        spec = {flaky.pk: {"killed": True, "exit_code": None}}
        assert recording.round_record(report(claim, spec), NOW + attempt * MINUTE)
    assert status(flaky) == Submission.INFRA_FAILED
    assert refunded(flaky)


def test_a_challenger_must_beat_the_leader_by_the_moat(campaign: Campaign, enter: Enter) -> None:
    leader = enter(at=NOW)
    claim = start_and_claim(campaign)
    recording.round_record(report(claim, {leader.pk: {"seconds": 7.0}}))  # 0.3
    close = enter(at=NOW + MINUTE)
    claim = start_and_claim(campaign, NOW + MINUTE)
    # The leader re-measured at 0.3; the challenger at 0.302: under 0.3 * 1.01.
    recording.round_record(
        report(claim, {leader.pk: {"seconds": 7.0}, close.pk: {"seconds": 6.98}})
    )
    crown = Crown.objects.get(campaign=campaign)
    assert (crown.submission_id, crown.round_id) == (leader.pk, claim.round_id)
    assert status(close) == Submission.PASSED
    clear = enter(at=NOW + 2 * MINUTE)
    claim = start_and_claim(campaign, NOW + 2 * MINUTE)
    recording.round_record(report(claim, {leader.pk: {"seconds": 7.0}, clear.pk: {"seconds": 6.9}}))
    crown = Crown.objects.get(campaign=campaign)
    assert (crown.submission_id, crown.score) == (clear.pk, pytest.approx(0.31))
    assert status(leader) == Submission.PASSED  # the old leader's verdict stands


def test_a_leader_failing_correctness_vacates_the_crown_when_nobody_passes(
    campaign: Campaign, enter: Enter
) -> None:
    leader = enter(at=NOW)
    recording.round_record(report(start_and_claim(campaign)))
    challenger = enter(at=NOW + MINUTE)
    claim = start_and_claim(campaign, NOW + MINUTE)
    recording.round_record(
        report(claim, {leader.pk: {"wrong": 5}, challenger.pk: {"seconds": 11.0}})
    )
    assert not Crown.objects.filter(campaign=campaign).exists()  # vacant: no row
    assert status(challenger) == Submission.PASSED  # passed, scored -0.1: no crown
    assert status(leader) == Submission.PASSED
    assert "lost the crown" in SubmissionEvent.objects.filter(submission=leader).last().note


# Voids ---------------------------------------------------------------------------------------


def test_a_void_round_requeues_changes_nothing_and_spends_its_ordinal(
    campaign: Campaign, enter: Enter
) -> None:
    leader = enter(at=NOW - dt.timedelta(hours=1))
    recording.round_record(report(start_and_claim(campaign, NOW - dt.timedelta(hours=1))))
    challenger = enter(at=NOW - 30 * MINUTE)
    claim = start_and_claim(campaign, NOW)
    later = NOW + 20 * MINUTE
    # The closing baseline ran 8 % slower than the opening one: drift over 0.05.
    assert recording.round_record(report(claim, closing_s=10.8), later)
    round_ = Round.objects.get(pk=claim.round_id)
    assert round_.status == Round.VOID
    assert "drifted" in round_.void_reason
    assert round_.evidence_digest == rules.evidence_digest(round_.evidence)
    assert set(round_.entries.values_list("verdict", flat=True)) == {RoundEntry.NONE}
    assert status(challenger) == Submission.BENCH_QUEUED
    challenger.refresh_from_db()
    assert challenger.queued_at == later  # its wait starts again
    assert Crown.objects.get(campaign=campaign).submission_id == leader.pk
    assert rounds.round_maybe_start(campaign, later) is None  # waits six hours again
    nxt = rounds.round_maybe_start(campaign, later + dt.timedelta(hours=6))
    assert nxt is not None and nxt.ordinal == 3 and nxt.material == round_.evidence_digest


def test_a_leader_infra_failure_voids_the_round(campaign: Campaign, enter: Enter) -> None:
    leader = enter(at=NOW)
    recording.round_record(report(start_and_claim(campaign)))
    challenger = enter(at=NOW + MINUTE)
    claim = start_and_claim(campaign, NOW + MINUTE)
    recording.round_record(
        report(claim, {leader.pk: {"exit_code": 1}, challenger.pk: {"seconds": 5.0}})
    )
    round_ = Round.objects.get(pk=claim.round_id)
    assert round_.status == Round.VOID and "leader" in round_.void_reason
    assert Crown.objects.get(campaign=campaign).submission_id == leader.pk
    assert status(challenger) == Submission.BENCH_QUEUED


def test_a_host_side_void_and_a_stale_heartbeat_void_the_round(
    campaign: Campaign, enter: Enter
) -> None:
    sub = enter(at=NOW)
    claim = start_and_claim(campaign)
    recording.round_record(report(claim, void_reason="the host died"))
    assert Round.objects.get(pk=claim.round_id).void_reason == "the host died"
    claim = start_and_claim(campaign, NOW + MINUTE)
    assert rounds.round_heartbeat(claim.round_id, HOST, NOW + 5 * MINUTE)
    assert sweep.campaigns_sweep(NOW + 19 * MINUTE)["voided"] == []
    assert sweep.campaigns_sweep(NOW + 21 * MINUTE)["voided"] == [claim.round_id]
    assert Round.objects.get(pk=claim.round_id).void_reason == sweep.STALE_HEARTBEAT
    assert not rounds.round_heartbeat(claim.round_id, HOST)  # the host learns to stop
    assert not recording.round_record(report(claim))  # and its late report is ignored
    assert status(sub) == Submission.BENCH_QUEUED


# Staff controls ----------------------------------------------------------------------------


def test_staff_start_void_and_pause_are_audited(
    campaign: Campaign, enter: Enter, staff: Any
) -> None:
    enter(at=timezone.now())
    round_ = controls.round_start_now(campaign=campaign, actor=staff)
    assert round_.status == Round.PENDING
    with pytest.raises(errors.InvalidParameter):
        controls.round_start_now(campaign=campaign, actor=staff)  # one is open
    with pytest.raises(errors.InvalidParameter):
        controls.round_void(round_=round_, reason=" ", actor=staff)
    controls.round_void(round_=round_, reason="wrong driver on the host", actor=staff)
    assert round_.status == Round.VOID
    assert round_.void_reason == "voided by staff: wrong driver on the host"
    with pytest.raises(errors.InvalidParameter):
        controls.round_void(round_=round_, reason="again", actor=staff)
    controls.campaign_pause(campaign=campaign, actor=staff, paused=True, reason="driver update")
    with pytest.raises(errors.InvalidParameter):
        controls.round_start_now(campaign=campaign, actor=staff)
    assert sweep.campaigns_sweep(timezone.now() + dt.timedelta(days=1))["started"] == []
    controls.campaign_pause(campaign=campaign, actor=staff, paused=False)
    events = list(AuditEvent.objects.order_by("id").values_list("action", "actor", "reason"))
    assert [
        (a, r)
        for a, _, r in events
        if a.startswith("campaign.round") or "pause" in a or "resume" in a
    ] == [
        ("campaign.round_start", ""),
        ("campaign.round_void", "wrong driver on the host"),
        ("campaign.pause", "driver update"),
        ("campaign.resume", ""),
    ]
    assert {actor for a, actor, _ in events if a != "campaign.baseline"} == {staff.pk}


def test_the_baseline_cannot_change_once_rounds_exist(campaign: Campaign, enter: Enter) -> None:
    enter(at=NOW)
    start_and_claim(campaign)
    with pytest.raises(errors.InvalidParameter):
        creation.campaign_baseline_record(
            campaign=campaign, image_tag="x", image_digest="sha256:new"
        )


# What the pages read ---------------------------------------------------------------------------


def test_the_overview_and_the_entry_report(campaign: Campaign, enter: Enter) -> None:
    leader = enter(at=NOW)
    claim = start_and_claim(campaign)
    recording.round_record(report(claim, {leader.pk: {"seconds": 7.5}}))
    waiting = enter(at=NOW + MINUTE)
    overview = selectors.campaign_overview(campaign, now=NOW + MINUTE)
    assert overview.crown is not None and overview.crown.submission_id == leader.pk
    assert overview.crown.score == pytest.approx(0.25)
    assert [row.submission_id for row in overview.queue] == [waiting.pk]
    assert overview.next_round.queued == 1 and overview.next_round.blocked == ""
    assert "1 of 5 queued" in overview.next_round.waits_for
    assert [(r.ordinal, r.status) for r in overview.rounds] == [(1, Round.SCORED)]
    entry = overview.rounds[0].entries[0]
    assert (entry.verdict, entry.role) == (RoundEntry.PASSED, RoundEntry.CHALLENGER)
    report_ = selectors.round_entry_report(entry.id)
    assert report_ is not None
    assert [(r.slice, r.baseline_s, r.candidate_s) for r in report_.rows] == [
        (n, 10.0, 7.5) for n in range(4)
    ]
    assert all(r.speedup == pytest.approx(0.25) and r.reason == "" for r in report_.rows)
    assert (report_.summary.slices_scored, report_.summary.slices_under_tolerance) == (4, 0)
    assert report_.environment["cpu_model"] == "test CPU"
    assert selectors.round_entry_report(10**9) is None


def test_staff_requeue_and_rescore_send_a_campaign_entry_back_to_the_rounds(
    campaign: Campaign,
    enter: Enter,
    staff: Any,
    tasks: list[dict[str, Any]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    from portal.submissions import staff as staff_services

    flaky = enter(at=NOW - MINUTE)
    Submission.objects.filter(pk=flaky.pk).update(status=Submission.INFRA_FAILED)
    with django_capture_on_commit_callbacks(execute=True):
        staff_services.submission_requeue(submission=flaky, actor=staff, reason="host fixed")
    flaky.refresh_from_db()
    assert flaky.status == Submission.BENCH_QUEUED  # a round, never a plain timed score
    assert not any(t["name"] == jobs.SCORE_NEXT for t in tasks)
    assert flaky.queued_at is not None and flaky.queued_at > NOW

    Submission.objects.filter(pk=flaky.pk).update(status=Submission.PASSED)
    with django_capture_on_commit_callbacks(execute=True):
        staff_services.submission_rescore(submission=flaky, actor=staff, reason="next round")
    flaky.refresh_from_db()
    assert flaky.status == Submission.BENCH_QUEUED
    assert not any(t["name"] == jobs.SCORE_NEXT for t in tasks)
    assert not AttemptLedger.objects.filter(submission=flaky, delta=AttemptLedger.REFUND).exists()
    assert AuditEvent.objects.filter(action="submission.rescore").count() == 1

    Submission.objects.filter(pk=flaky.pk).update(status=Submission.BENCH_QUEUED)
    with pytest.raises(errors.InvalidParameter):
        staff_services.submission_rescore(submission=flaky, actor=staff)


# Issue: seed 002's order, voids with a cost, disqualified means out ---------------------------


def test_a_voided_challenger_keeps_its_place_by_first_queued_time(
    campaign: Campaign, enter: Enter
) -> None:
    """Rounds take entries by first queued time: a challenger requeued after a void that
    was not its doing goes ahead of newer entries, though its wait trigger restarted."""
    campaign.max_challengers = 1
    campaign.save()
    old = enter(at=NOW)
    claim = start_and_claim(campaign, NOW)
    later = NOW + 10 * MINUTE
    assert recording.round_record(report(claim, closing_s=10.8), later)  # drift: the baseline's
    assert Round.objects.get(pk=claim.round_id).void_cause == rules.VOID_BASELINE
    newer = enter(at=later + MINUTE)
    old.refresh_from_db()
    assert old.queued_at == later  # the wait trigger restarted
    assert [s.pk for s in selectors.waiting_submissions(campaign)] == [old.pk, newer.pk]
    nxt = rounds.round_maybe_start(campaign, later + 2 * MINUTE, force=True)
    assert nxt is not None
    assert [e.submission_id for e in nxt.entries.all()] == [old.pk]
    overview = selectors.campaign_overview(campaign, now=later + 2 * MINUTE)
    assert overview.voids_by_cause == {rules.VOID_BASELINE: 1}


def test_a_challenger_whose_own_entry_voided_the_round_goes_to_the_back(
    campaign: Campaign, enter: Enter
) -> None:
    noisy = enter(at=NOW)
    claim = start_and_claim(campaign, NOW)
    newer = enter(at=NOW + MINUTE)
    later = NOW + 10 * MINUTE
    # Killed at the deadline: infra_failed by its own doing; no challenger got a verdict.
    spec = {noisy.pk: {"killed": True, "exit_code": None}}
    assert recording.round_record(report(claim, spec), later)
    round_ = Round.objects.get(pk=claim.round_id)
    assert (round_.status, round_.void_cause, round_.void_by) == (
        Round.VOID,
        rules.VOID_CHALLENGERS,
        [noisy.pk],
    )
    assert [s.pk for s in selectors.waiting_submissions(campaign)] == [newer.pk, noisy.pk]
    assert "at the back" in SubmissionEvent.objects.filter(submission=noisy).last().note


def test_a_leader_voiding_rounds_by_its_own_entry_loses_the_crown_at_the_limit(
    campaign: Campaign, enter: Enter
) -> None:
    """An image with a time switch (exit 1 once it leads) must not hold the crown for ever
    by voiding every round: at two own voids in a row it loses it, and the page says why."""
    leader = enter(at=NOW)
    recording.round_record(report(start_and_claim(campaign, NOW)), NOW)
    assert Crown.objects.get(campaign=campaign).submission_id == leader.pk
    moment = NOW
    for number in (1, 2):
        moment += 10 * MINUTE
        challenger = enter(at=moment)
        claim = start_and_claim(campaign, moment)
        spec = {leader.pk: {"exit_code": 1}, challenger.pk: {"seconds": 9.0}}
        assert recording.round_record(report(claim, spec), moment)
        round_ = Round.objects.get(pk=claim.round_id)
        assert (round_.void_cause, round_.void_by) == (rules.VOID_LEADER, [leader.pk])
        crown = Crown.objects.filter(campaign=campaign).first()
        if number == 1:
            assert crown is not None and crown.own_voids == 1
    assert not Crown.objects.filter(campaign=campaign).exists()
    overview = selectors.campaign_overview(campaign, now=moment)
    assert "voided 2 rounds in a row" in overview.crown_note
    assert str(leader.pk) in overview.crown_note
    assert AuditEvent.objects.filter(action="campaign.crown_vacated").count() == 1
    assert status(leader) == Submission.PASSED  # its verdicts stand; only the crown moved


def test_a_void_the_leader_did_not_cause_neither_counts_nor_resets_and_a_scored_round_resets(
    campaign: Campaign, enter: Enter
) -> None:
    leader = enter(at=NOW)
    recording.round_record(report(start_and_claim(campaign, NOW)), NOW)
    moment = NOW

    def next_round(spec_for_leader: dict[str, Any], **kwargs: Any) -> None:
        nonlocal moment
        moment += 10 * MINUTE
        challenger = enter(at=moment)
        claim = start_and_claim(campaign, moment)
        spec = {leader.pk: spec_for_leader, challenger.pk: {"seconds": 9.5}}
        assert recording.round_record(report(claim, spec, **kwargs), moment)

    next_round({"exit_code": 1})  # own: 1
    next_round({}, closing_s=10.8)  # the baseline drifted: still 1
    assert Crown.objects.get(campaign=campaign).own_voids == 1
    next_round({})  # scored, the leader kept the crown: 0
    assert Crown.objects.get(campaign=campaign).own_voids == 0
    next_round({"exit_code": 1})  # own: 1 again, not 2
    assert Crown.objects.get(campaign=campaign).submission_id == leader.pk


def test_a_disqualified_challenger_leaves_a_pending_round_which_voids_when_empty(
    campaign: Campaign, enter: Enter
) -> None:
    first, second = queued(campaign, enter, 2)
    round_ = rounds.round_maybe_start(campaign, NOW, force=True)
    assert round_ is not None
    reviewer = factories.UserFactory(is_staff=True, is_superuser=True)
    staff.submission_disqualify(submission=first, actor=reviewer, reason="plagiarism")
    assert [e.submission_id for e in round_.entries.all()] == [second.pk]
    round_.refresh_from_db()
    assert round_.status == Round.PENDING
    staff.submission_disqualify(submission=second, actor=reviewer, reason="plagiarism too")
    round_.refresh_from_db()
    assert round_.status == Round.VOID and round_.void_cause == rules.VOID_STAFF
    assert "no challenger left" in round_.void_reason
    assert AuditEvent.objects.filter(action="campaign.entry_removed").count() == 2


def test_a_challenger_disqualified_in_a_running_round_cannot_take_the_crown(
    campaign: Campaign, enter: Enter
) -> None:
    cheat, honest = queued(campaign, enter, 2)
    claim = start_and_claim(campaign, NOW)  # running: the host has it
    reviewer = factories.UserFactory(is_staff=True, is_superuser=True)
    staff.submission_disqualify(submission=cheat, actor=reviewer, reason="lookup table")
    spec = {cheat.pk: {"seconds": 5.0}, honest.pk: {"seconds": 9.0}}
    assert recording.round_record(report(claim, spec), NOW)
    entry = entry_of(claim, cheat)
    assert (entry.verdict, entry.score) == (RoundEntry.DISQUALIFIED, None)
    assert rules.STAFF_DISQUALIFIED in entry.reason
    assert Crown.objects.get(campaign=campaign).submission_id == honest.pk
    assert status(cheat) == Submission.BENCH_QUEUED  # as staff left it: no second verdict


def test_the_page_says_why_the_crown_is_vacant_and_a_closed_campaign_is_final(
    campaign: Campaign, enter: Enter
) -> None:
    leader = enter(at=NOW)
    recording.round_record(report(start_and_claim(campaign, NOW)), NOW)
    reviewer = factories.UserFactory(is_staff=True, is_superuser=True)
    staff.submission_disqualify(submission=leader, actor=reviewer, reason="copied code")
    overview = selectors.campaign_overview(campaign, now=NOW)
    assert overview.crown is None and "copied code" in overview.crown_note
    assert not overview.closed
    after = campaign.benchmark.closes_at + MINUTE
    closed = selectors.campaign_overview(campaign, now=after)
    assert closed.closed and closed.next_round.blocked == "the campaign has closed"


def test_a_claim_carries_the_campaigns_slice_repeats(campaign: Campaign, enter: Enter) -> None:
    Campaign.objects.filter(pk=campaign.pk).update(slice_repeats=3)
    enter(at=NOW)
    round_ = rounds.round_maybe_start(campaign, NOW, force=True)
    assert round_ is not None
    claim = rounds.round_claim(round_.pk, HOST, NOW)
    assert claim is not None and claim.limits.slice_repeats == 3
