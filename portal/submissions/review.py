"""Provenance review of apparent winners, against the benchmark's validation-data boundary.

A benchmark that states a boundary (``Benchmark.validation_boundary``) asks every
official upload to confirm it (``intake.submission_accept`` stores the SHA-256 of the
text confirmed) and reviews its apparent winners. :func:`review_sweep` (Celery beat,
every minute) opens a :class:`ProvenanceReview` for the submission that holds first
place on the board, and, once the benchmark has closed, for each of the top
``review_top`` rows; ``portal.standings`` opens one (:func:`review_open`) for each row in
a prize position of the final standings, which wait for them. Each open asks the worker
side to list the image's artifacts for staff. The entrant answers with a provenance
statement (:func:`review_statement`); staff clear the submission or disqualify it
(:func:`review_decide`), with a reason, audited. Reviews never change a time or a rank
by themselves: only a disqualification takes the row off the board.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.contests.models import Benchmark, LeaderboardEntry
from portal.contests.selectors import RANK_ORDER
from portal.core import errors, jobs
from portal.core.task_names import REVIEW_ARTIFACTS
from portal.submissions.models import ProvenanceReview, Submission
from portal.submissions.staff import submission_disqualify

STATEMENT_MAX_CHARS = 20_000
NEW_FIRST_PLACE = "first place on the board"


def _target(submission: Submission) -> str:
    return f"submission:{submission.pk}"


def review_open(*, submission: Submission, because: str, now: dt.datetime) -> bool:
    """Open the review of ``submission`` (once; False when it already had one).

    Only an official submission of a benchmark that states a boundary is reviewed. The
    worker side is asked to list the image's artifacts once the review is committed.
    """
    if submission.kind != Submission.OFFICIAL or not submission.benchmark.validation_boundary:
        return False
    if ProvenanceReview.objects.filter(submission=submission).exists():
        return False  # the usual case of a sweep: reviewed already
    try:
        with transaction.atomic():
            ProvenanceReview.objects.create(
                submission=submission, opened_at=now, opened_because=because
            )
            audit_record(
                actor=None,
                action="review.open",
                target=_target(submission),
                reason=because,
            )
    except IntegrityError:
        return False  # opened already (or by a concurrent sweep)
    jobs.enqueue(REVIEW_ARTIFACTS, submission.pk, robust=True)
    return True


def _board_top(benchmark: Benchmark, count: int) -> list[Submission]:
    """The submissions of the board's first ``count`` rows, in rank order."""
    ids = list(
        LeaderboardEntry.objects.filter(benchmark=benchmark)
        .order_by(*RANK_ORDER)
        .values_list("submission_id", flat=True)[:count]
    )
    found = Submission.objects.select_related("benchmark").in_bulk(ids)
    return [found[pk] for pk in ids if pk in found]


def review_sweep(now: dt.datetime | None = None) -> int:
    """Open the reviews that are due; how many were opened.

    For every benchmark with a boundary: the submission in first place (while it is
    open, and at the close), and after the close the top ``review_top`` rows.
    Idempotent: a submission is reviewed once, whatever later sweeps see.
    """
    now = now or timezone.now()
    opened = 0
    for benchmark in Benchmark.objects.exclude(validation_boundary="").filter(opens_at__lte=now):
        closed = benchmark.closes_at <= now
        count = max(1, benchmark.review_top) if closed else 1
        for rank, submission in enumerate(_board_top(benchmark, count), start=1):
            because = NEW_FIRST_PLACE if rank == 1 else f"rank {rank} at the close"
            opened += review_open(submission=submission, because=because, now=now)
    return opened


def review_statement(
    *, submission: Submission, entrant: Any, text: str, now: dt.datetime | None = None
) -> ProvenanceReview:
    """The entrant's provenance statement, replacing any earlier one, while under review."""
    review = ProvenanceReview.objects.filter(
        submission=submission, submission__entrant=entrant
    ).first()
    if review is None:
        raise errors.NotFound("This submission is not under review.")
    text = text.strip()
    if not text:
        raise errors.InvalidParameter(
            "Write the statement: the data, the checkpoints with their sources and "
            "SHA-256 hashes, and the training code behind this submission."
        )
    if len(text) > STATEMENT_MAX_CHARS:
        raise errors.InvalidParameter(
            f"The statement is {len(text):,} characters; at most {STATEMENT_MAX_CHARS:,}."
        )
    if review.status != ProvenanceReview.UNDER_REVIEW:
        raise errors.InvalidParameter(f"The review has been decided ({review.status}).")
    with transaction.atomic():
        ProvenanceReview.objects.filter(pk=review.pk).update(
            statement=text, statement_at=now or timezone.now()
        )
        audit_record(
            actor=entrant,
            action="review.statement",
            target=_target(submission),
            details={"chars": len(text)},
        )
    review.refresh_from_db()
    return review


def review_decide(
    *,
    review: ProvenanceReview,
    actor: Any,
    decision: str,
    reason: str,
    origin: Origin = NOWHERE,
) -> ProvenanceReview:
    """Staff's decision: ``cleared``, or ``disqualified`` (the submission is disqualified
    with the same reason and leaves the board). Once; audited."""
    reason = reason.strip()
    if decision not in (ProvenanceReview.CLEARED, ProvenanceReview.DISQUALIFIED):
        raise errors.InvalidParameter("decision must be 'cleared' or 'disqualified'.")
    if not reason:
        raise errors.InvalidParameter("Give the reason for the decision.")
    with transaction.atomic():
        done = ProvenanceReview.objects.filter(
            pk=review.pk, status=ProvenanceReview.UNDER_REVIEW
        ).update(
            status=decision,
            decided_at=timezone.now(),
            decided_by=actor,
            decision_reason=reason,
        )
        if not done:
            raise errors.InvalidParameter("This review has been decided already.")
        if decision == ProvenanceReview.DISQUALIFIED:
            submission_disqualify(
                submission=review.submission,
                actor=actor,
                reason=f"provenance review: {reason}",
                origin=origin,
            )
        audit_record(
            actor=actor,
            action=f"review.{decision}",
            target=_target(review.submission),
            origin=origin,
            reason=reason,
        )
    review.refresh_from_db()
    return review


def review_record_artifacts(*, submission_id: int, artifacts: dict[str, Any]) -> bool:
    """Keep the worker's listing of the image's artifacts on the review (the latest)."""
    return bool(
        ProvenanceReview.objects.filter(submission_id=submission_id).update(
            artifacts=artifacts, artifacts_at=timezone.now()
        )
    )
