"""The web's only way to reach the worker side: enqueue a task by name after commit.

``portal`` never imports ``scoring``; the queue for each task comes from
``CELERY_TASK_ROUTES``.
"""

from __future__ import annotations

from django.db import transaction

from portal.celery import app

BUILD_ENVIRONMENT = "scoring.build_environment"
BUILD_SUBMISSION = "scoring.build_submission"
SCORE_SUBMISSION = "scoring.score_submission"
REMOVE_IMAGE = "scoring.remove_image"


def enqueue(task_name: str, *args: object, countdown: float | None = None) -> None:
    """Send ``task_name(*args)`` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: app.send_task(task_name, args=args, countdown=countdown))
