"""Waking scoring hosts for a submission waiting for one (a score, or the verification
of a passed run).

A wake-up goes to its hardware class's queue and names no submission: the host claims
the next waiting one in the fair order (``waiting``). Celery beat's minute sweep sends
one again where a wake-up was lost.
"""

from __future__ import annotations

import datetime as dt

from django.db import transaction

from portal.core import jobs
from portal.submissions import waiting
from portal.submissions.models import Submission


def score_wake(
    *,
    hardware_class: str,
    waits: int = 0,
    countdown: float | None = None,
    priority: int | None = None,
) -> None:
    """Wake a scoring host of ``hardware_class`` (after commit): its class queue's message
    names no submission; the host claims the next waiting one in the fair order
    (``waiting``). ``waits`` counts the tries of a machine that was not ready. Noted as
    in flight (``waiting.wake_sent``) for :func:`score_sweep`."""
    jobs.enqueue(
        jobs.SCORE_NEXT,
        hardware_class,
        waits,
        countdown=countdown,
        priority=priority,
        queue=jobs.scoring_queue(hardware_class),
    )
    transaction.on_commit(
        lambda: waiting.wake_sent(hardware_class, countdown=countdown), robust=True
    )


def score_sweep(now: dt.datetime | None = None) -> list[str]:
    """Celery beat's minute sweep: wake each hardware class again that has something
    waiting for longer than a minute and no wake-up in flight (``dispatch``: why a
    marker and not a wake-up every minute), so a lost wake-up delays its class by about
    a minute at most. Returns the classes woken."""
    woken = [
        hardware_class
        for hardware_class in waiting.classes_waiting(now=now)
        if not waiting.wake_in_flight(hardware_class)
    ]
    for hardware_class in woken:
        score_wake(hardware_class=hardware_class, priority=jobs.OFFICIAL_PRIORITY)
    return woken


def score_enqueue(submission_id: int, *, kind: str, verification: bool = False) -> None:
    """One wake-up for a submission that starts waiting for a score (or its verification),
    on its benchmark's class queue, at its priority: official scores first, then
    verifications, then practice."""
    hardware_class = Submission.objects.values_list(
        "benchmark__hardware_class__name", flat=True
    ).get(pk=submission_id)
    priority = jobs.score_priority(practice=kind == Submission.PRACTICE, verification=verification)
    score_wake(hardware_class=hardware_class, priority=priority)
