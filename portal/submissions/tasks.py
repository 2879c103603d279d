"""The submissions' minute check, run by Celery beat (``CELERY_BEAT_SCHEDULE``): apparent
winners enter provenance review (``portal.submissions.review``). Database work only, on
the ``builds`` queue; a doubled sweep is harmless (a submission is reviewed once)."""

from __future__ import annotations

from celery import shared_task

from portal.core.task_names import REVIEW_SWEEP
from portal.submissions.review import review_sweep


@shared_task(name=REVIEW_SWEEP)
def sweep_reviews() -> None:
    review_sweep()
