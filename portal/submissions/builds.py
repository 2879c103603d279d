"""A submission's build (worker side): its outcome (queued for a score, waiting for a
campaign round, or ``build_failed``), a platform fault during it (retried once, then
refunded) and the wait for the build network's rules.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from portal.core import jobs
from portal.environments.services import BUILD_NETWORK_WAIT_NOTE
from portal.submissions import hooks
from portal.submissions.attempts import attempt_refund
from portal.submissions.models import Submission, SubmissionEvent
from portal.submissions.services import event_record, submission_transition
from portal.submissions.wakeups import score_enqueue

PLATFORM_RETRY_NOTE = "platform error, build will be retried"
PLATFORM_RETRY_DELAY_S = 60.0


def submission_build_finished(
    *,
    submission_id: int,
    ok: bool,
    image_tag: str = "",
    image_digest: str = "",
    image_bytes: int | None = None,
    reason: str = "",
) -> bool:
    """building -> queued (and the score enqueued) or -> build_failed (the attempt counts).

    An official submission of a campaign benchmark goes ``bench_queued`` instead, to wait
    for a round (its kind's ``entry_queued``, ``portal.submissions.hooks``: for a campaign,
    ``portal.campaigns.queue.campaign_entry_queue``, where duplicates collapse).
    """
    with transaction.atomic():
        if not ok:
            return submission_transition(
                submission_id,
                frm=[Submission.BUILDING],
                to=Submission.BUILD_FAILED,
                note=reason,
                failure_reason=reason,
            )
        submission = Submission.objects.select_related("benchmark").get(pk=submission_id)
        entry = hooks.official_entry(submission)
        if entry is not None:
            done = submission_transition(
                submission_id,
                frm=[Submission.BUILDING],
                to=Submission.BENCH_QUEUED,
                note="built; waiting for a round",
                image_tag=image_tag,
                image_digest=image_digest,
                image_bytes=image_bytes,
                queued_at=timezone.now(),
            )
            return entry.entry_queued(submission) if done else False
        done = submission_transition(
            submission_id,
            frm=[Submission.BUILDING],
            to=Submission.QUEUED,
            image_tag=image_tag,
            image_digest=image_digest,
            image_bytes=image_bytes,
        )
        if done:
            kind = Submission.objects.values_list("kind", flat=True).get(pk=submission_id)
            score_enqueue(submission_id, kind=kind)
        return done


def submission_build_platform_failure(submission_id: int, *, reason: str) -> bool:
    """A platform fault during a submission build: requeue once, then refund.

    The first fault moves building -> accepted (with a timeline note) and enqueues the
    build again after a short delay; a second fault ends the submission
    ``infra_failed`` and refunds its attempt, as a platform failure of a scored run
    does. Safe to call twice: each step is a conditional transition.
    """
    with transaction.atomic():
        earlier_faults = SubmissionEvent.objects.filter(
            submission_id=submission_id,
            status=Submission.ACCEPTED,
            note__startswith=PLATFORM_RETRY_NOTE,
        ).count()
        if earlier_faults == 0:
            done = submission_transition(
                submission_id,
                frm=[Submission.BUILDING],
                to=Submission.ACCEPTED,
                note=f"{PLATFORM_RETRY_NOTE}: {reason}",
            )
            if done:
                jobs.enqueue(jobs.BUILD_SUBMISSION, submission_id, countdown=PLATFORM_RETRY_DELAY_S)
            return done
        done = submission_transition(
            submission_id,
            frm=[Submission.BUILDING],
            to=Submission.INFRA_FAILED,
            note=f"platform failure during the build, attempt refunded: {reason}",
            failure_reason=(
                f"The platform failed twice while building ({reason}); the attempt was refunded."
            ),
        )
        if done:
            attempt_refund(
                submission=Submission.objects.get(pk=submission_id),
                reason=f"platform failure during the build: {reason}",
            )
        return done


def submission_wait_for_build_network(*, submission_id: int, retry_in_s: float) -> bool:
    """The build network's rules are not in place: the build.sh build waits.

    Only while the submission is still ``accepted`` (its build not claimed): notes the
    wait on its timeline (once per wait) and enqueues the build again after
    ``retry_in_s``. Nothing is charged or refunded by waiting.
    """
    with transaction.atomic():
        accepted = (
            Submission.objects.select_for_update()
            .filter(pk=submission_id, status=Submission.ACCEPTED)
            .exists()
        )
        if not accepted:
            return False
        last = (
            SubmissionEvent.objects.filter(submission_id=submission_id)
            .order_by("-at", "-id")
            .values_list("note", flat=True)
            .first()
        )
        if last != BUILD_NETWORK_WAIT_NOTE:
            event_record(submission_id, Submission.ACCEPTED, BUILD_NETWORK_WAIT_NOTE)
        jobs.enqueue(jobs.BUILD_SUBMISSION, submission_id, countdown=retry_in_s)
    return True
