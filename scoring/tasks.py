"""Thin Celery tasks: they take ids, call one function, and let Celery handle delivery.

Each function they call claims its work with a conditional update, so a redelivered
message (acks_late, a worker lost mid-task) does nothing twice.
"""

from __future__ import annotations

from celery import shared_task

from scoring import builds, engine, reaper, runner


@shared_task(name="scoring.build_environment")
def build_environment(environment_id: int) -> None:
    builds.build_environment(environment_id)


@shared_task(name="scoring.build_submission")
def build_submission(submission_id: int) -> None:
    builds.build_submission(submission_id)


@shared_task(name="scoring.score_submission")
def score_submission(submission_id: int, waits: int = 0) -> None:
    """``waits``: how often the submission had waited for the machine when this was sent."""
    runner.score_submission(submission_id, waits)


@shared_task(name="scoring.remove_image")
def remove_image(image_tag: str) -> None:
    engine.remove_image(image_tag)


@shared_task(name="scoring.reap")
def reap() -> None:
    reaper.reap()
