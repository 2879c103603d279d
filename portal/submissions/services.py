"""Submission lifecycle: the steps its stages share.

Rules of the road:
- An attempt is charged in the same transaction that accepts the upload, and refunded
  only for platform failures and staff cancellations.
- Every transition is a conditional update plus a timeline event, so running a step
  twice (a redelivered task) changes nothing the second time.
- A verdict is written at most once per run, in the same transaction as the leaderboard.

The stages have modules of their own: ``intake`` (accepting and charging an upload, the
web side), ``builds`` (a submission's build), ``runs`` (claiming and recording scored
runs, waiting for the scoring machine) and ``verification`` (verifying a passed run
before it ranks); ``wakeups`` wakes the scoring hosts, and ``attempts`` charges,
refunds and counts attempts. This module holds what the stages share: a transition
with its timeline event (:func:`submission_transition`), a run's verdict written once
(:func:`run_finish`) and the cohort a kind of submission is scored on
(:func:`cohort_kind_for`). A stage imports no other stage, only this module,
``attempts`` and ``wakeups``; but ``runs`` imports
``verification`` (a passing official run may be verified before it ranks).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from portal.contests.models import Cohort
from portal.submissions import hooks
from portal.submissions.models import Run, Submission, SubmissionEvent


def event_record(submission_id: int, status: str, note: str = "") -> None:
    """Add an event to the submission's timeline: the status it entered or is in, and why."""
    SubmissionEvent.objects.create(
        submission_id=submission_id, status=status, at=timezone.now(), note=note
    )


def cohort_kind_for(kind: str) -> str:
    """The cohort a submission of ``kind`` is scored on (a campaign's official rounds draw
    their requests from the official cohort too)."""
    return Cohort.PRACTICE if kind == Submission.PRACTICE else Cohort.OFFICIAL


def submission_transition(
    submission_id: int, *, frm: Iterable[str], to: str, note: str = "", **fields: Any
) -> bool:
    """Move a submission from one of ``frm`` to ``to`` (once) and record the event.

    Entering a waiting status stamps ``queued_at`` (the fair order's "oldest first",
    dispatch.py); staying in it (a staff requeue of a lost message) keeps its place.
    Entering a final status (a verdict) mails the entrant once, after the commit
    (``portal.notifications``).
    """
    if to in Submission.WAITING_FOR_SCORE and "queued_at" not in fields:
        fields["queued_at"] = models.Case(
            models.When(status=to, queued_at__isnull=False, then=models.F("queued_at")),
            default=models.Value(timezone.now()),
        )
    with transaction.atomic():
        done = Submission.objects.filter(pk=submission_id, status__in=list(frm)).update(
            status=to, **fields
        )
        if done:
            event_record(submission_id, to, note)
            hooks.status_entered(submission_id=submission_id, status=to)
        return bool(done)


def run_finish(
    run_id: int,
    *,
    status: str,
    reason: str,
    submission_statuses: list[str],
    fields: dict[str, Any],
) -> Run | None:
    """Write a run's verdict once, holding its submission's row lock; the run, or None
    when the submission is no longer in ``submission_statuses`` or the run no longer open.

    Concurrent writers (a redelivered task, the reaper, a staff cancel) serialize on the
    lock, and the conditional update filters on the run's own columns only, which
    PostgreSQL re-checks after waiting for a lock (a filter through a join would be a
    subquery evaluated once, before the wait). Call inside a transaction.
    """
    if status not in (Submission.PASSED, Submission.FAILED, Submission.ERRORED):
        raise ValueError(f"not a verdict: {status}")
    submission_ids = list(Run.objects.filter(pk=run_id).values_list("submission_id", flat=True))
    active = list(
        Submission.objects.select_for_update()
        .filter(pk__in=submission_ids, status__in=submission_statuses)
        .values_list("pk", flat=True)
    )
    if not active:
        return None
    done = Run.objects.filter(pk=run_id, status__in=[Run.STAGING, Run.RUNNING]).update(
        status=Run.FINISHED,
        verdict=status,
        verdict_reason=reason,
        passed=status == Submission.PASSED,
        finished_at=timezone.now(),
        lease_expires_at=None,
        **fields,
    )
    if not done:
        return None
    return Run.objects.select_related("submission__benchmark").get(pk=run_id)
