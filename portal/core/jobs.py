"""The web's only way to reach the worker side: enqueue a task by name after commit.

``portal`` never imports ``scoring``; the tasks' names come from ``portal.core.task_names``
and the queue for each from ``CELERY_TASK_ROUTES``.
"""

from __future__ import annotations

from django.db import transaction

from portal.core.celery import app
from portal.core.task_names import (
    BUILD_ENVIRONMENT,
    BUILD_SUBMISSION,
    REMOVE_IMAGE,
    RUN_ROUND,
    SCORE_NEXT,
    SEND_ANNOUNCEMENT_MAIL,
    SEND_VERDICT_MAIL,
    VERIFICATION_POOL_FILL,
)

__all__ = [
    "BUILD_ENVIRONMENT",
    "BUILD_SUBMISSION",
    "REMOVE_IMAGE",
    "RUN_ROUND",
    "SCORE_NEXT",
    "SEND_ANNOUNCEMENT_MAIL",
    "SEND_VERDICT_MAIL",
    "VERIFICATION_POOL_FILL",
    "enqueue",
    "score_priority",
    "scoring_queue",
]

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
