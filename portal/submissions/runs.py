"""Scored runs (worker side): a host claims the next waiting submission and records its
run's start, its verdict (a passing official run may go to verification first), a
platform fault (requeued once) and its overhead; and a submission waits while the
scoring machine is not ready (``scoring/host/machine.py``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.contests.models import Cohort
from portal.core import errors
from portal.submissions import anomalies, pool, waiting
from portal.submissions.attempts import attempt_refund
from portal.submissions.final import final_infra_failure
from portal.submissions.leaderboard import leaderboard_refresh_entrant
from portal.submissions.models import Run, Submission, SubmissionEvent
from portal.submissions.services import (
    cohort_kind_for,
    event_record,
    run_finish,
    submission_transition,
)
from portal.submissions.verification import (
    VERIFY_NOTE,
    verification_due,
    verification_infra_failure,
    verification_queue,
)
from portal.submissions.wakeups import score_enqueue, score_wake

MACHINE_WAIT_NOTE = "waiting for the scoring machine"


def run_claim_next(*, hardware_class: str, lease_s: int, host: str = "") -> Run | None:
    """Claim for ``host`` the next waiting submission of ``hardware_class`` in the fair
    order (``waiting.lock_next_waiting``: rows other hosts hold are skipped); None when
    nothing waits.

    A submission that :func:`run_claim` refuses (``errors.PodiumError``: a reason of the
    submission's own, not the host's, such as its benchmark having no cohort of its kind
    any more) is ended at once by :func:`submission_unrunnable` and the next one is
    claimed in the same call, so one such submission never holds up its class. Anything
    else raised (the database, a bug) is the host's and propagates, the claim undone.
    """
    while True:
        with transaction.atomic():
            submission = waiting.lock_next_waiting(hardware_class=hardware_class)
            if submission is None:
                return None
            try:
                with transaction.atomic():
                    return run_claim(int(submission.pk), lease_s=lease_s, host=host)
            except errors.PodiumError as refusal:
                if not submission_unrunnable(int(submission.pk), reason=refusal.detail):
                    raise


def submission_unrunnable(submission_id: int, *, reason: str) -> bool:
    """End a queued submission that no host can run, for a reason that is not the host's
    (``reason``: a refusal's sentence, such as its benchmark having no cohort of its kind
    any more): ``queued -> infra_failed`` (the platform's fault, as after repeated platform
    failures) with a failure reason the entrant reads, and the
    attempt refunded (the platform cannot score it), unless an earlier run of it reached
    a verdict (a staff rescore: that verdict used the attempt and stands, as in
    :func:`run_record_infra_failure`). Staff may rescore it once the cause is fixed.
    False, changing nothing, for a submission that is not ``queued``.
    """
    text = reason.strip().rstrip(".")
    text = f"{text[:1].lower()}{text[1:]}"
    with transaction.atomic():
        submission = Submission.objects.filter(pk=submission_id).first()
        if submission is None:
            return False
        rescore = submission.runs.filter(status=Run.FINISHED).exists()
        outcome = "the earlier verdict stands" if rescore else "the attempt was refunded"
        done = submission_transition(
            submission_id,
            frm=[Submission.QUEUED],
            to=Submission.INFRA_FAILED,
            note=f"cannot be scored, {outcome}: {text}",
            failure_reason=f"The platform cannot score this submission: {text}; {outcome}.",
        )
        if done and not rescore:
            attempt_refund(submission=submission, reason=f"cannot be scored: {text}")
        return done


def run_claim(submission_id: int, *, lease_s: int, host: str = "") -> Run | None:
    """queued -> staging for the submission, creating its next Run. None if already claimed.

    A ``verifying`` submission's queued verification run is claimed instead (queued ->
    staging); the submission itself stays ``verifying`` until that run's verdict. So is
    a ``passed`` submission's queued final-rerun run (``final``), while none of its runs
    is under way; it stays ``passed``.
    """
    with transaction.atomic():
        submission = Submission.objects.select_for_update().filter(pk=submission_id).first()
        if submission is None:
            return None
        if submission.status == Submission.PASSED:
            return _claim_final(submission, lease_s=lease_s, host=host)
        if submission.status not in Submission.WAITING_FOR_SCORE:
            return None
        if submission.status == Submission.VERIFYING:
            pending = submission.runs.filter(purpose=Run.VERIFY, status=Run.QUEUED).first()
            if pending is None or pool.set_take(pending) is None:
                return None  # no prepared set ready: the claim steps over it (waiting.py)
            now = timezone.now()
            Run.objects.filter(pk=pending.pk).update(
                status=Run.STAGING,
                host=host,
                started_at=now,
                lease_expires_at=now + dt.timedelta(seconds=lease_s),
            )
            pending.refresh_from_db()
            return pending
        kind = cohort_kind_for(submission.kind)
        cohort = Cohort.objects.filter(benchmark_id=submission.benchmark_id, kind=kind).first()
        if cohort is None:
            raise errors.NoCohort(f"This benchmark has no {kind} cohort to score it on.")
        try_number = submission.runs.count() + 1
        run = Run.objects.create(
            submission=submission,
            cohort=cohort,
            try_number=try_number,
            status=Run.STAGING,
            host=host,
            started_at=timezone.now(),
            lease_expires_at=timezone.now() + dt.timedelta(seconds=lease_s),
        )
        submission_transition(submission_id, frm=[Submission.QUEUED], to=Submission.STAGING)
        return run


def _claim_final(submission: Submission, *, lease_s: int, host: str) -> Run | None:
    """queued -> staging for the oldest queued final run of a ``passed`` submission (held
    locked by the caller); None when it has none, or a run of it is under way."""
    runs = submission.runs
    if runs.filter(status__in=[Run.STAGING, Run.RUNNING]).exists():
        return None
    pending = runs.filter(purpose=Run.FINAL, status=Run.QUEUED).order_by("try_number").first()
    if pending is None:
        return None
    now = timezone.now()
    Run.objects.filter(pk=pending.pk, status=Run.QUEUED).update(
        status=Run.STAGING,
        host=host,
        started_at=now,
        lease_expires_at=now + dt.timedelta(seconds=lease_s),
    )
    pending.refresh_from_db()
    return pending


def run_mark_running(*, run_id: int, lease_s: int, **fields: Any) -> bool:
    """staging -> running, just before the container starts."""
    with transaction.atomic():
        done = Run.objects.filter(pk=run_id, status=Run.STAGING).update(
            status=Run.RUNNING,
            lease_expires_at=timezone.now() + dt.timedelta(seconds=lease_s),
            **fields,
        )
        if done:
            run = Run.objects.get(pk=run_id)
            if run.purpose == Run.FINAL:
                return True  # the submission stays passed
            submission_transition(
                run.submission_id, frm=[Submission.STAGING], to=Submission.RUNNING
            )
        return bool(done)


def run_record_verdict(*, run_id: int, status: str, reason: str, **fields: Any) -> bool:
    """Write the run's verdict once, the submission's final status and the leaderboard.

    ``status`` is passed, failed or errored. All in one transaction, holding the
    submission's row lock (see :func:`run_finish`). A passing official run that must be
    verified first leaves the submission ``verifying`` with a queued verification run.
    """
    with transaction.atomic():
        run = run_finish(
            run_id,
            status=status,
            reason=reason,
            submission_statuses=[Submission.STAGING, Submission.RUNNING],
            fields=fields,
        )
        if run is None:
            return False
        submission = run.submission
        if submission.kind == Submission.OFFICIAL:
            transaction.on_commit(lambda: anomalies.anomaly_scan_after_commit(run_id))
        if status == Submission.PASSED and verification_due(run):
            submission_transition(
                submission.pk,
                frm=[Submission.STAGING, Submission.RUNNING],
                to=Submission.VERIFYING,
                note=VERIFY_NOTE,
                failure_reason="",
            )
            verification_queue(submission)
            return True
        submission_transition(
            submission.pk,
            frm=[Submission.STAGING, Submission.RUNNING],
            to=status,
            note=reason,
            failure_reason="" if status == Submission.PASSED else reason,
        )
        if submission.kind == Submission.OFFICIAL:
            leaderboard_refresh_entrant(
                benchmark=submission.benchmark, entrant_id=submission.entrant_id
            )
        return True


def run_add_overhead(run_id: int, **phases_ms: float) -> None:
    """Add phases (milliseconds) to a run's host overhead: what a host measured after
    the run's record was written (cleaning up and giving the machine back)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is not None:
            run.overhead_ms = {**run.overhead_ms, **phases_ms}
            run.save(update_fields=["overhead_ms"])


def run_record_infra_failure(*, run_id: int, reason: str, **fields: Any) -> bool:
    """A platform fault: requeue once; a second fault in a row ends it ``infra_failed``.

    "In a row" counts from the run before this one, so a staff rescore (whose first run
    is try 2 or later) is also requeued once. The second fault refunds the attempt,
    unless an earlier run of the submission already reached a verdict (a rescore): that
    verdict used the attempt and stands, so nothing is given back.
    """
    with transaction.atomic():
        done = Run.objects.filter(pk=run_id, status__in=[Run.STAGING, Run.RUNNING]).update(
            status=Run.INFRA_FAILED,
            verdict_reason=reason,
            finished_at=timezone.now(),
            lease_expires_at=None,
            **fields,
        )
        if not done:
            return False
        run = Run.objects.select_related("submission").get(pk=run_id)
        submission = run.submission
        if run.purpose == Run.VERIFY:
            verification_infra_failure(run, reason)
            return True
        if run.purpose == Run.FINAL:
            final_infra_failure(run, reason)
            return True
        active = [Submission.STAGING, Submission.RUNNING]
        earlier = submission.runs.filter(try_number__lt=run.try_number)
        previous = earlier.order_by("-try_number").values_list("status", flat=True).first()
        if previous != Run.INFRA_FAILED:
            if submission_transition(
                submission.pk,
                frm=active,
                to=Submission.QUEUED,
                note=f"platform failure, requeued: {reason}",
            ):
                score_enqueue(submission.pk, kind=submission.kind)
        elif earlier.filter(status=Run.FINISHED).exists():
            submission_transition(
                submission.pk,
                frm=active,
                to=Submission.INFRA_FAILED,
                note=f"platform failure during a rescore: {reason}",
                failure_reason=(
                    f"The platform failed twice while rescoring ({reason}); "
                    "the earlier verdict stands."
                ),
            )
        elif submission_transition(
            submission.pk,
            frm=active,
            to=Submission.INFRA_FAILED,
            note=f"platform failure, attempt refunded: {reason}",
            failure_reason=f"The platform failed twice ({reason}); the attempt was refunded.",
        ):
            attempt_refund(submission=submission, reason=f"platform failure: {reason}")
        return True


def submission_machine_waits(submission_id: int) -> int:
    """How many times in a row the queued submission has waited for the scoring machine.

    Counted from the end of its timeline: the consecutive ``queued`` events noted
    :data:`MACHINE_WAIT_NOTE`. Any other event (it was queued again after a platform
    failure, say) starts the count afresh.
    """
    count = 0
    events = SubmissionEvent.objects.filter(submission_id=submission_id).order_by("-at", "-id")
    for status, note in events.values_list("status", "note").iterator():
        if status not in Submission.WAITING_FOR_SCORE or not note.startswith(MACHINE_WAIT_NOTE):
            break
        count += 1
    return count


def submission_wait_for_machine(
    *, submission_id: int, reason: str, retry_in_s: float, waits: int
) -> bool:
    """The scoring machine is not ready (a health gate failed, or it is busy): try later.

    Only while the submission is still ``queued`` (or ``verifying``): adds a timeline
    event of that status noting why (the entrant sees it waiting, not failed; nothing is
    charged or refunded) and wakes a host of its class again after ``retry_in_s``
    seconds, numbered ``waits``.
    """
    with transaction.atomic():
        waiting = (
            Submission.objects.select_for_update()
            .filter(pk=submission_id, status__in=Submission.WAITING_FOR_SCORE)
            .values("status", "benchmark__hardware_class__name")
            .first()
        )
        if waiting is None:
            return False
        event_record(submission_id, waiting["status"], f"{MACHINE_WAIT_NOTE}: {reason}")
        score_wake(
            hardware_class=waiting["benchmark__hardware_class__name"],
            waits=waits,
            countdown=retry_in_s,
        )
    return True
