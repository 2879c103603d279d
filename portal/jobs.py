"""The web's only way to reach the worker side: enqueue a task by name after commit.

``portal`` never imports ``scoring``; the queue for each task comes from
``CELERY_TASK_ROUTES``.
"""

from __future__ import annotations

from django.db import transaction

from portal.celery import app

BUILD_ENVIRONMENT = "scoring.build_environment"
BUILD_SUBMISSION = "scoring.build_submission"
SCORE_NEXT = "scoring.score_next"
REMOVE_IMAGE = "scoring.remove_image"
VERIFICATION_POOL_FILL = "scoring.verification_pool_fill"  # on the builds side
RUN_ROUND = "scoring.run_round"  # a campaign round, on a host of its class
SEND_VERDICT_MAIL = "portal.notifications.send_verdict_mail"

# Scoring priorities (0 first; a Redis broker keeps one list per step, see settings):
# official scores, then verifications of passing official runs, then practice. The
# embedded filesystem broker has no priorities and keeps the order of arrival.
OFFICIAL_PRIORITY = 0
VERIFY_PRIORITY = 1
PRACTICE_PRIORITY = 2


def score_priority(*, practice: bool, verification: bool = False) -> int:
    """The message priority of a score: see :data:`OFFICIAL_PRIORITY`."""
    if verification:
        return VERIFY_PRIORITY
    return PRACTICE_PRIORITY if practice else OFFICIAL_PRIORITY


def scoring_queue(hardware_class: str) -> str:
    """The queue that the scoring hosts of ``hardware_class`` consume (one per class)."""
    return f"scoring.{hardware_class}"


def enqueue(
    task_name: str,
    *args: object,
    countdown: float | None = None,
    priority: int | None = None,
    queue: str | None = None,
    robust: bool = False,
) -> None:
    """Send ``task_name(*args)`` once the current transaction commits (at once outside one),
    to ``queue`` or else the queue ``CELERY_TASK_ROUTES`` names for it. ``robust``: a
    message that cannot be sent is logged instead of raising in the committing code."""
    transaction.on_commit(
        lambda: app.send_task(
            task_name, args=args, countdown=countdown, priority=priority, queue=queue
        ),
        robust=robust,
    )
