"""What staff do to submissions after review, and the audit export.

Each action is a conditional update (so a double click does nothing twice) and writes
an audit event in the same transaction. Callers have already checked ``is_staff``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import IO, Any

from django.db import transaction
from django.utils import timezone

from portal import errors, jobs
from portal.audit.models import AuditEvent
from portal.audit.services import audit_record
from portal.contests.services import leaderboard_refresh_entrant
from portal.submissions.models import Submission
from portal.submissions.services import attempt_refund, source_path, submission_transition

UNFINISHED = tuple(status for status, _ in Submission.STATUSES if status not in Submission.FINAL)
RESCORABLE = (
    Submission.PASSED,
    Submission.FAILED,
    Submission.ERRORED,
    Submission.INFRA_FAILED,
)


def _target(submission: Submission) -> str:
    return f"submission:{submission.pk}"


def submission_cancel(*, submission: Submission, actor: Any, reason: str) -> Submission:
    """Cancel an unfinished submission and refund its attempt (once).

    Refuses a submission that already reached a final status. A worker that is
    building or scoring it finds the status changed and records nothing more. A
    cancelled (refunded) submission holds no place on the leaderboard: cancelling a
    rescore of a passed submission takes its earlier runs off the board, in the same
    transaction, and the entrant's next best passing run takes the place.
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
        attempt_refund(submission=submission, reason=note)
        if submission.kind == Submission.OFFICIAL:
            leaderboard_refresh_entrant(
                benchmark=submission.benchmark, entrant_id=submission.entrant_id
            )
        audit_record(
            actor=actor, action="submission.cancel", target=_target(submission), reason=reason
        )
    submission.refresh_from_db()
    return submission


def submission_disqualify(*, submission: Submission, actor: Any, reason: str) -> Submission:
    """Flag a submission as disqualified (once) and take its runs off the leaderboard.

    The entrant's next best passing run takes the place, in the same transaction.
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
        audit_record(
            actor=actor,
            action="submission.disqualify",
            target=_target(submission),
            reason=reason,
        )
    submission.refresh_from_db()
    return submission


def submission_rescore(*, submission: Submission, actor: Any, reason: str = "") -> Submission:
    """Queue a new scored run of a finished submission (passed, failed, errored, infra_failed).

    Charges nothing; the new run is the next try, and the leaderboard keeps the
    entrant's best passing run whatever the new one measures.
    """
    note = f"rescore requested by staff: {reason}" if reason else "rescore requested by staff"
    with transaction.atomic():
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
                "Only a passed, failed, errored or infra-failed submission can be rescored; "
                f"this one is {submission.status}."
            )
        jobs.enqueue(jobs.SCORE_SUBMISSION, submission.pk)
        audit_record(
            actor=actor, action="submission.rescore", target=_target(submission), reason=reason
        )
    submission.refresh_from_db()
    return submission


def submission_source_review(
    *, submission: Submission, actor: Any, remote_addr: str, reason: str
) -> IO[bytes]:
    """Open another entrant's source archive for staff review, audited before it is read."""
    reason = reason.strip()
    if not reason:
        raise errors.InvalidParameter("Staff must give a reason (?reason=...) to read a source.")
    audit_record(
        actor=actor,
        action="source.download",
        target=_target(submission),
        remote_addr=remote_addr,
        reason=reason,
    )
    return source_open(submission)


def source_open(submission: Submission) -> IO[bytes]:
    try:
        return source_path(submission).open("rb")
    except FileNotFoundError as exc:
        raise errors.NotFound("This submission's source archive is no longer kept.") from exc


# Audit export -----------------------------------------------------------------------

AUDIT_FORMATS = ("csv", "jsonl")
AUDIT_COLUMNS = ["at", "actor", "action", "target", "remote_addr", "reason", "details"]


def _audit_dicts() -> Iterator[dict[str, Any]]:
    events = AuditEvent.objects.select_related("actor").order_by("at", "id")
    for event in events.iterator(chunk_size=1000):
        yield {
            "at": event.at.isoformat(),
            "actor": event.actor.get_username() if event.actor else None,
            "action": event.action,
            "target": event.target,
            "remote_addr": event.remote_addr,
            "reason": event.reason,
            "details": event.details,
        }


def audit_export(*, fmt: str) -> Iterator[str]:
    """Every audit event, oldest first, as CSV (with a header) or JSON lines, streamed."""
    if fmt not in AUDIT_FORMATS:
        raise errors.InvalidParameter("format must be 'csv' or 'jsonl'.")
    if fmt == "jsonl":
        return (json.dumps(row, sort_keys=True) + "\n" for row in _audit_dicts())
    return _csv_lines()


def _csv_lines() -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values: list[Any]) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(values)
        return buffer.getvalue()

    yield line(AUDIT_COLUMNS)
    for row in _audit_dicts():
        row["actor"] = row["actor"] or ""
        row["details"] = json.dumps(row["details"], sort_keys=True)
        yield line([row[column] for column in AUDIT_COLUMNS])
