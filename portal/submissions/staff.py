"""What staff do to submissions: cancel, requeue, rescore, disqualify, read a source.

Each action is a conditional update (so a double click does nothing twice) and writes
an audit event (actor, origin, reason) in the same transaction.

Who may call: being staff (``is_staff``) opens the admin and the staff endpoints, and
lets staff read entrants' records for review; each action below, and each download
that hands out an entrant's source or a run's evidence, needs its own permission
(:data:`STAFF_PERMISSIONS`, held by the "contest staff" group; superusers hold them
all). The admin and the API check it with :func:`portal.core.errors.staff_permission_check` before
calling the service, so a refused request changes nothing and records nothing.
"""

from __future__ import annotations

from typing import IO, Any

from django.db import transaction
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.core import errors, jobs
from portal.submissions import hooks
from portal.submissions.attempts import attempt_refund
from portal.submissions.intake import source_path
from portal.submissions.leaderboard import leaderboard_refresh_entrant
from portal.submissions.models import Run, Submission
from portal.submissions.services import submission_transition
from portal.submissions.verification import verification_requeue
from portal.submissions.wakeups import score_enqueue

UNFINISHED = tuple(status for status, _ in Submission.STATUSES if status not in Submission.FINAL)
RESCORABLE = (
    Submission.PASSED,
    Submission.FAILED,
    Submission.ERRORED,
    Submission.INFRA_FAILED,
    Submission.REJECTED_VERIFICATION,
)


DOWNLOAD_SOURCE = "submissions.download_source"
DOWNLOAD_EVIDENCE = "submissions.download_evidence"
REQUEUE = "submissions.requeue_submission"
RESCORE = "submissions.rescore_submission"
CANCEL = "submissions.cancel_submission"
DISQUALIFY = "submissions.disqualify_submission"
DECIDE_REVIEW = "submissions.decide_review"
STAFF_PERMISSIONS = (
    DOWNLOAD_SOURCE,
    DOWNLOAD_EVIDENCE,
    REQUEUE,
    RESCORE,
    CANCEL,
    DISQUALIFY,
    DECIDE_REVIEW,
)


def _target(submission: Submission) -> str:
    return f"submission:{submission.pk}"


def _refuse_after_purge(submission: Submission) -> None:
    if submission.benchmark.artifacts_purged_at is not None:
        raise errors.InvalidParameter(
            "This benchmark's images and sources were purged after its retention period; "
            "it cannot be built or scored again."
        )


def submission_cancel(
    *, submission: Submission, actor: Any, reason: str, origin: Origin = NOWHERE
) -> Submission:
    """Cancel an unfinished submission and refund its attempt (once).

    Refuses a submission that already reached a final status. A worker that is
    building or scoring it finds the status changed and records nothing more. A
    cancelled (refunded) submission holds no place on the leaderboard: cancelling a
    rescore of a passed submission takes its earlier runs off the board, in the same
    transaction, and the entrant's next best passing run takes the place. A verification
    run still waiting for a host (``queued``: nothing of it ran) is withdrawn with it, so
    no host claims it and nothing keeps its image as needed.
    """
    note = f"cancelled by staff: {reason}" if reason else "cancelled by staff"
    with transaction.atomic():
        done = submission_transition(
            submission.pk,
            frm=UNFINISHED,
            to=Submission.CANCELLED,
            note=note,
            failure_reason="Cancelled by the organizers; the attempt was refunded.",
        )
        if not done:
            submission.refresh_from_db(fields=["status"])
            raise errors.InvalidParameter(
                f"Only an unfinished submission can be cancelled; this one is {submission.status}."
            )
        Run.objects.filter(submission=submission, status=Run.QUEUED).delete()
        attempt_refund(submission=submission, reason=note)
        if submission.kind == Submission.OFFICIAL:
            leaderboard_refresh_entrant(
                benchmark=submission.benchmark, entrant_id=submission.entrant_id
            )
        audit_record(
            actor=actor,
            action="submission.cancel",
            target=_target(submission),
            origin=origin,
            reason=reason,
        )
    submission.refresh_from_db()
    return submission


def submission_disqualify(
    *, submission: Submission, actor: Any, reason: str, origin: Origin = NOWHERE
) -> Submission:
    """Flag a submission as disqualified (once) and take its runs off the leaderboard.

    The entrant's next best passing run takes the place, in the same transaction. A
    campaign's leader loses the crown at once (its kind's ``entry_disqualified``:
    ``campaign_entry_disqualified``, see ``portal.submissions.hooks``).
    """
    reason = reason.strip()
    if not reason:
        raise errors.InvalidParameter("Give the reason for the disqualification.")
    with transaction.atomic():
        done = Submission.objects.filter(pk=submission.pk, disqualified_at__isnull=True).update(
            disqualified_at=timezone.now(),
            disqualified_by=actor,
            disqualification_reason=reason,
        )
        if not done:
            raise errors.InvalidParameter("This submission is already disqualified.")
        leaderboard_refresh_entrant(
            benchmark=submission.benchmark, entrant_id=submission.entrant_id
        )
        entry = hooks.official_entry(submission)
        if entry is not None:
            entry.entry_disqualified(submission, actor=actor, reason=reason, origin=origin)
        audit_record(
            actor=actor,
            action="submission.disqualify",
            target=_target(submission),
            origin=origin,
            reason=reason,
        )
    submission.refresh_from_db()
    return submission


def _in_campaign(submission: Submission) -> bool:
    """An official submission of a campaign benchmark waits for a round, not a score
    (its benchmark's kind registered hooks: ``portal.submissions.hooks``)."""
    return hooks.official_entry(submission) is not None


def _enter_rounds(submission: Submission, note: str) -> bool:
    """Back to ``bench_queued`` (a new queued event: its wait starts again), then the
    campaign's duplicate check and round trigger (its kind's ``entry_queued``:
    ``campaign_entry_queue``)."""
    entry = hooks.official_entry(submission)
    if entry is None:  # the callers ask _in_campaign first
        raise ValueError(f"Submission {submission.pk} waits for no round.")
    done = submission_transition(
        submission.pk,
        frm=[submission.status],
        to=Submission.BENCH_QUEUED,
        note=note,
        failure_reason="",
        queued_at=timezone.now(),
    )
    return done and entry.entry_queued(submission)


def submission_requeue(
    *, submission: Submission, actor: Any, reason: str = "", origin: Origin = NOWHERE
) -> Submission:
    """Put a waiting or infra-failed submission back in its queue. Charges nothing.

    - ``accepted`` or ``queued`` (its queue message lost, say): the build is sent again,
      or a scoring host of its class is woken again. Workers claim with a conditional
      update (scores from the database, in the fair order), so a message that was not
      lost after all does nothing twice.
    - ``infra_failed`` (the platform failed twice; the attempt was refunded and stays
      refunded): back to ``queued`` when its submission image exists, else to
      ``accepted`` for a new build.
    - ``verifying`` with no verification run under way (its message lost, or the
      platform failed twice while verifying): its verification is sent again.
    - An official submission of a campaign benchmark goes back to ``bench_queued`` (when
      its image exists) to wait for a round, instead of ``queued``.

    Anything building, staging or running is refused: the reaper takes back work whose
    worker stopped answering, and staff may cancel it.
    """
    note = f"requeued by staff: {reason}" if reason else "requeued by staff"
    with transaction.atomic():
        current = Submission.objects.select_for_update().get(pk=submission.pk)
        _refuse_after_purge(current)
        if current.status == Submission.INFRA_FAILED and current.image_digest:
            target = Submission.BENCH_QUEUED if _in_campaign(current) else Submission.QUEUED
        elif current.status == Submission.INFRA_FAILED:
            target = Submission.ACCEPTED
        elif current.status in (Submission.ACCEPTED, Submission.QUEUED, Submission.VERIFYING):
            target = current.status
        else:
            raise errors.InvalidParameter(
                "Only an accepted, queued, verifying or infra-failed submission can be "
                f"requeued; this one is {current.status}."
            )
        if target == Submission.VERIFYING:
            verification_requeue(current)
        if target == Submission.BENCH_QUEUED:
            _enter_rounds(current, note)
        else:
            submission_transition(
                current.pk, frm=[current.status], to=target, note=note, failure_reason=""
            )
        if target == Submission.BENCH_QUEUED:
            pass  # the campaign's round trigger took it
        elif target in (Submission.QUEUED, Submission.VERIFYING):
            score_enqueue(
                current.pk, kind=current.kind, verification=target == Submission.VERIFYING
            )
        else:
            jobs.enqueue(jobs.BUILD_SUBMISSION, current.pk)
        audit_record(
            actor=actor,
            action="submission.requeue",
            target=_target(submission),
            origin=origin,
            reason=reason,
            details={"from": current.status, "to": target},
        )
    submission.refresh_from_db()
    return submission


def submission_rescore(
    *,
    submission: Submission,
    actor: Any,
    reason: str = "",
    origin: Origin = NOWHERE,
    note: str = "",
) -> Submission:
    """Queue a new scored run of a finished submission (passed, failed, errored,
    infra_failed, rejected_verification).

    Charges nothing; the new run is the next try, and the leaderboard keeps the
    entrant's best passing run whatever the new one measures. An official submission of
    a campaign benchmark goes back to ``bench_queued`` to run in the next round instead.
    ``note``: the timeline's line, when not staff's ("rescore requested by staff").
    """
    if not note:
        note = f"rescore requested by staff: {reason}" if reason else "rescore requested by staff"
    _refuse_after_purge(submission)
    with transaction.atomic():
        if _in_campaign(submission):
            current = Submission.objects.select_for_update().get(pk=submission.pk)
            if current.status not in RESCORABLE:
                raise errors.InvalidParameter(
                    "Only a passed, failed, errored, infra-failed or rejected submission can "
                    f"be rescored; this one is {current.status}."
                )
            _enter_rounds(current, note)
            audit_record(
                actor=actor,
                action="submission.rescore",
                target=_target(submission),
                origin=origin,
                reason=reason,
            )
            submission.refresh_from_db()
            return submission
        done = submission_transition(
            submission.pk,
            frm=RESCORABLE,
            to=Submission.QUEUED,
            note=note,
            failure_reason="",
        )
        if not done:
            submission.refresh_from_db(fields=["status"])
            raise errors.InvalidParameter(
                "Only a passed, failed, errored, infra-failed or rejected submission can be "
                "rescored; "
                f"this one is {submission.status}."
            )
        score_enqueue(submission.pk, kind=submission.kind)
        audit_record(
            actor=actor,
            action="submission.rescore",
            target=_target(submission),
            origin=origin,
            reason=reason,
        )
    submission.refresh_from_db()
    return submission


def submission_source_review(
    *, submission: Submission, actor: Any, reason: str, origin: Origin = NOWHERE
) -> IO[bytes]:
    """Open another entrant's source archive for staff review, audited before it is read.

    The caller has checked :data:`DOWNLOAD_SOURCE` (a plain staff read does not hand out
    a source).
    """
    reason = reason.strip()
    if not reason:
        raise errors.InvalidParameter("Staff must give a reason (?reason=...) to read a source.")
    audit_record(
        actor=actor,
        action="source.download",
        target=_target(submission),
        origin=origin,
        reason=reason,
    )
    return source_open(submission)


def source_open(submission: Submission) -> IO[bytes]:
    try:
        return source_path(submission).open("rb")
    except FileNotFoundError as exc:
        raise errors.NotFound("This submission's source archive is no longer kept.") from exc
