"""Staff requeue: stuck or platform-failed work goes back in line, and nothing is charged."""

from __future__ import annotations

import pytest
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.audit.services import Origin
from portal.core import errors, jobs
from portal.submissions import staff as staff_actions
from portal.submissions.models import AttemptLedger, Submission


def _set(submission: Submission, **fields) -> Submission:
    Submission.objects.filter(pk=submission.pk).update(**fields)
    submission.refresh_from_db()
    return submission


@pytest.fixture
def requeue(staff, django_capture_on_commit_callbacks):
    """Requeue as staff and let the transaction's enqueued tasks go out."""

    def run(submission: Submission) -> Submission:
        with django_capture_on_commit_callbacks(execute=True):
            return staff_actions.submission_requeue(
                submission=submission,
                actor=staff,
                reason="lost message",
                origin=Origin("192.0.2.9", "curl/8"),
            )

    return run


def test_an_accepted_submission_is_sent_to_the_build_queue_again(submission, staff, sent, requeue):
    sent.clear()

    requeue(submission)

    assert submission.status == Submission.ACCEPTED
    assert sent == [(jobs.BUILD_SUBMISSION, (submission.pk,))]
    assert submission.events.last().note == "requeued by staff: lost message"
    event = AuditEvent.objects.get(action="submission.requeue")
    assert (event.actor, event.reason, event.remote_addr, event.user_agent) == (
        staff,
        "lost message",
        "192.0.2.9",
        "curl/8",
    )
    assert event.details == {"from": "accepted", "to": "accepted"}


def test_a_queued_submission_is_scored_afresh(submission, staff, sent, requeue):
    _set(submission, status=Submission.QUEUED, image_digest="sha256:" + "1" * 64)
    sent.clear()

    requeue(submission)

    assert sent == [(jobs.SCORE_NEXT, (submission.benchmark.hardware_class_id, 0))]


@pytest.mark.parametrize(
    ("image_digest", "status", "task"),
    [
        ("sha256:" + "1" * 64, Submission.QUEUED, jobs.SCORE_NEXT),
        ("", Submission.ACCEPTED, jobs.BUILD_SUBMISSION),
    ],
)
def test_an_infra_failed_submission_goes_back_where_it_failed_and_stays_refunded(
    image_digest, status, task, submission, staff, sent, requeue
):
    _set(
        submission,
        status=Submission.INFRA_FAILED,
        image_digest=image_digest,
        failure_reason="The platform failed twice",
    )
    staff_actions.attempt_refund(submission=submission, reason="platform failure")
    sent.clear()

    requeue(submission)

    assert (submission.status, submission.failure_reason) == (status, "")
    assert [name for name, _ in sent] == [task]
    deltas = list(
        AttemptLedger.objects.filter(submission=submission).values_list("delta", flat=True)
    )
    assert sorted(deltas) == [-1, 1]  # charged once, refunded once: the requeue is free


@pytest.mark.parametrize(
    "status",
    [Submission.BUILDING, Submission.RUNNING, Submission.PASSED, Submission.CANCELLED],
)
def test_work_in_progress_or_finished_is_not_requeued(status, submission, staff, sent, requeue):
    _set(submission, status=status)
    sent.clear()

    with pytest.raises(errors.InvalidParameter, match=f"this one is {status}"):
        requeue(submission)

    assert sent == []
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize("action", ["submission_requeue", "submission_rescore"])
def test_nothing_is_built_or_scored_again_after_the_purge(action, submission, staff, sent):
    _set(submission, status=Submission.INFRA_FAILED)
    submission.benchmark.artifacts_purged_at = timezone.now()
    submission.benchmark.save()
    sent.clear()

    with pytest.raises(errors.InvalidParameter, match="purged"):
        getattr(staff_actions, action)(submission=submission, actor=staff, reason="again")

    assert sent == []
