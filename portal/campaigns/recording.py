"""Recording a round: the host's outcome judged (verdicts, scores and the crown), or a
void, with its evidence; then each entry's submission settled.

Submission states in a campaign (official submissions; practice ones take the ordinary
timed path on the practice cohort):

``accepted -> building -> bench_queued`` (or ``duplicate_image``, refunded). In a
scored round a challenger ends ``passed`` (it passed the gate, scored or not, crowned or
not), ``failed`` (failed correctness: the attempt counts), ``errored`` (disqualified: its
own process died; the reason says so), or on a platform fault (``infra_failed`` entry)
is queued again once, and ends ``infra_failed`` with its attempt refunded the second
time. The leader's submission stays ``passed`` whatever happens to the crown: each of its
rounds adds a line to its timeline. A void round changes no submission's status: its
challengers get a new queued event (their wait starts again) and keep their place in the
queue (``QueuePlace``: their first queued time), except a challenger whose own entry
caused the void, which goes to the back; the leader keeps the crown unless its own entry
voided ``leader_void_limit`` rounds in a row (``rules.leader_void_streak``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.campaigns import rules
from portal.campaigns.crown import crown_apply, crown_count_leader_void
from portal.campaigns.models import Campaign, QueuePlace, Round, RoundEntry
from portal.campaigns.outcomes import RoundOutcome
from portal.campaigns.rounds import (
    campaign_limits,
    round_maybe_start_after_commit,
    submission_event,
)
from portal.submissions.attempts import attempt_refund
from portal.submissions.models import Submission
from portal.submissions.services import submission_transition


def round_record(outcome: RoundOutcome, now: dt.datetime | None = None) -> bool:
    """Record what the host saw: verdicts, scores and the crown, or a void. Once.

    Only a ``running`` round claimed by ``outcome.host`` is recorded (False otherwise:
    a staff void or a stale heartbeat got there first). The judgement is
    ``rules.decide_round``. The evidence (the round's facts, every run's per-slice times,
    the host's environment, the verdicts, the crown change) and its digest are stored on
    the round; the digest is the next round's material. Submission states: see the
    module docstring. Holds the campaign's row lock, so the crown moves one round at a time.
    """
    now = now or timezone.now()
    with transaction.atomic():
        campaign_id = (
            Round.objects.filter(pk=outcome.round_id).values_list("campaign_id", flat=True).first()
        )
        if campaign_id is None:
            return False
        campaign = (
            Campaign.objects.select_for_update().select_related("benchmark").get(pk=campaign_id)
        )
        round_ = Round.objects.filter(
            pk=outcome.round_id, status=Round.RUNNING, host=outcome.host
        ).first()
        if round_ is None:
            return False
        entries = list(round_.entries.order_by("position"))
        planned = [
            rules.PlannedEntry(
                entry_id=entry.pk,
                submission_id=entry.submission_id,
                role=entry.role,
                position=entry.position,
                image_digest=entry.image_digest,
            )
            for entry in entries
        ]
        bounds = rules.slice_bounds(len(round_.request_positions), round_.slice_count)
        excluded = frozenset(
            Submission.objects.filter(
                pk__in=[entry.submission_id for entry in entries], disqualified_at__isnull=False
            ).values_list("pk", flat=True)
        )
        decision = rules.decide_round(
            outcome,
            planned=planned,
            request_digest=round_.request_digest,
            baseline_digest=campaign.baseline_image_digest,
            slice_totals=[end - start for start, end in bounds],
            limits=campaign_limits(campaign),
            excluded=excluded,
        )
        for entry in entries:
            result = decision.entries[entry.pk]
            entry.verdict = result.verdict
            entry.score = result.score
            entry.agreement = result.agreement
            entry.reason = result.reason
            entry.slices = result.slices
            entry.save(update_fields=["verdict", "score", "agreement", "reason", "slices"])
        evidence = {
            **round_facts(round_, campaign),
            "host": outcome.host,
            "outcome": dataclasses.asdict(outcome),
            "environment": dict(outcome.environment),
            "baseline": {
                "opening": dataclasses.asdict(decision.baseline_open),
                "closing": dataclasses.asdict(decision.baseline_close),
                "drift": decision.drift,
            },
            "verdicts": [
                {
                    "entry_id": entry.pk,
                    "submission_id": entry.submission_id,
                    "role": entry.role,
                    "position": entry.position,
                    "image_digest": entry.image_digest,
                    "verdict": entry.verdict,
                    "score": entry.score,
                    "agreement": entry.agreement,
                    "reason": entry.reason,
                }
                for entry in entries
            ],
            "crown": dataclasses.asdict(decision.crown) if decision.crown else None,
        }
        transaction.on_commit(lambda: round_maybe_start_after_commit(campaign.pk))
        leader_id = next((e.submission_id for e in entries if e.role == RoundEntry.LEADER), None)
        if decision.void_reason:
            round_void_record(
                round_,
                decision.void_reason,
                evidence,
                now,
                cause=decision.void_cause,
                void_by=decision.void_by,
            )
            crown_count_leader_void(campaign, round_, decision, leader_id)
            return True
        _finish(round_, status=Round.SCORED, void_reason="", evidence=evidence)
        if decision.crown is not None:
            crown_apply(campaign, round_, decision.crown, now)
        for entry in entries:
            if entry.submission_id in excluded:
                submission_event(
                    entry.submission_id,
                    Submission.objects.get(pk=entry.submission_id).status,
                    f"round {round_.ordinal}: {rules.STAFF_DISQUALIFIED}; no verdict counts",
                )
                continue
            _settle(entry, round_, decision.crown, now)
        return True


def round_facts(round_: Round, campaign: Campaign) -> dict[str, Any]:
    """What every round's evidence starts with: the round, its request set and limits."""
    return {
        "campaign": campaign.slug,
        "campaign_id": campaign.pk,
        "round_id": round_.pk,
        "ordinal": round_.ordinal,
        "cohort_id": round_.cohort_id,
        "material": round_.material,
        "request_positions": list(round_.request_positions),
        "request_digest": round_.request_digest,
        "slices": [
            list(bounds)
            for bounds in rules.slice_bounds(len(round_.request_positions), round_.slice_count)
        ],
        "baseline_image_digest": campaign.baseline_image_digest,
        "scoring_rule": campaign.scoring_rule,
        "limits": dataclasses.asdict(campaign_limits(campaign)),
    }


def _finish(
    round_: Round,
    *,
    status: str,
    void_reason: str,
    evidence: dict[str, Any],
    cause: str = "",
    void_by: tuple[int, ...] = (),
) -> None:
    evidence = {
        **evidence,
        "status": status,
        "void_reason": void_reason,
        "void_cause": cause,
        "void_by": list(void_by),
    }
    Round.objects.filter(pk=round_.pk).update(
        status=status,
        void_reason=void_reason,
        void_cause=cause,
        void_by=list(void_by),
        finished_at=timezone.now(),
        evidence=evidence,
        evidence_digest=rules.evidence_digest(evidence),
        next_try_at=None,
    )


def round_void_record(
    round_: Round,
    reason: str,
    evidence: dict[str, Any],
    now: dt.datetime,
    *,
    cause: str,
    void_by: tuple[int, ...] = (),
) -> None:
    """Void: record why and who caused it, requeue the challengers (a new queued event;
    a challenger whose own entry caused the void loses its place), change nothing else."""
    _finish(
        round_,
        status=Round.VOID,
        void_reason=reason,
        evidence=evidence,
        cause=cause,
        void_by=void_by,
    )
    for entry in round_.entries.all():
        if entry.role == RoundEntry.CHALLENGER:
            own = entry.submission_id in void_by
            _requeue(
                entry.submission_id,
                f"round {round_.ordinal} was void ({reason}); queued again"
                + (", at the back: its own entry caused the void" if own else ""),
                now,
                lose_place=own,
            )


def _requeue(submission_id: int, note: str, now: dt.datetime, *, lose_place: bool = False) -> bool:
    """A new queued event for a ``bench_queued`` submission: its wait starts again. It
    keeps its place in the queue (its first queued time) unless ``lose_place``."""
    done = Submission.objects.filter(pk=submission_id, status=Submission.BENCH_QUEUED).update(
        queued_at=now
    )
    if done:
        if lose_place:
            QueuePlace.objects.update_or_create(
                submission_id=submission_id, defaults={"since": now}
            )
        submission_event(submission_id, Submission.BENCH_QUEUED, note)
    return bool(done)


def _settle(
    entry: RoundEntry, round_: Round, crown: rules.CrownChange | None, now: dt.datetime
) -> None:
    """An entry's submission after a scored round (module docstring)."""
    label = f"round {round_.ordinal}"
    crowned = crown is not None and crown.holder == entry.submission_id
    score = f"score {entry.score:+.4f}" if entry.score is not None else "no score"
    if entry.role == RoundEntry.LEADER:
        kept = "kept the crown" if crowned else "lost the crown"
        submission_event(
            entry.submission_id,
            Submission.PASSED,
            f"{label}: leader, {entry.verdict}, {score}; "
            f"{kept}" + (f" ({entry.reason})" if entry.reason else ""),
        )
        return
    frm = [Submission.BENCH_QUEUED]
    if entry.verdict == RoundEntry.PASSED:
        took = "took the crown" if crowned else "did not take the crown"
        submission_transition(
            entry.submission_id, frm=frm, to=Submission.PASSED, note=f"{label}: {score}; {took}"
        )
    elif entry.verdict == RoundEntry.FAILED_CORRECTNESS:
        submission_transition(
            entry.submission_id,
            frm=frm,
            to=Submission.FAILED,
            note=f"{label}: failed correctness",
            failure_reason=f"Failed correctness in {label}: {entry.reason}",
        )
    elif entry.verdict == RoundEntry.DISQUALIFIED:
        submission_transition(
            entry.submission_id,
            frm=frm,
            to=Submission.ERRORED,
            note=f"{label}: disqualified",
            failure_reason=f"Disqualified in {label}: {entry.reason}",
        )
    elif entry.verdict == RoundEntry.INFRA_FAILED:
        _infra_failed(entry, label, now)


def _infra_failed(entry: RoundEntry, label: str, now: dt.datetime) -> None:
    """Requeued once; the second infra_failed entry (in scored rounds) ends it, refunded."""
    earlier = (
        RoundEntry.objects.filter(
            submission_id=entry.submission_id,
            verdict=RoundEntry.INFRA_FAILED,
            round__status=Round.SCORED,
        )
        .exclude(pk=entry.pk)
        .exists()
    )
    if not earlier:
        _requeue(entry.submission_id, f"{label}: infra_failed ({entry.reason}); queued again", now)
        return
    submission = Submission.objects.get(pk=entry.submission_id)
    if submission_transition(
        submission.pk,
        frm=[Submission.BENCH_QUEUED],
        to=Submission.INFRA_FAILED,
        note=f"{label}: infra_failed again, attempt refunded",
        failure_reason=(
            f"The platform could not score this image twice ({entry.reason}); "
            "the attempt was refunded."
        ),
    ):
        attempt_refund(submission=submission, reason=f"platform failure in {label}")
