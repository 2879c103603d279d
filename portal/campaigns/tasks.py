"""The campaigns' minute check, run by Celery beat (``CELERY_BEAT_SCHEDULE``).

Database work only (no Docker): it lives with the campaigns, on the ``builds`` queue
beside the reaper. A redelivered or doubled sweep is harmless (every step is claimed).
"""

from __future__ import annotations

from celery import shared_task

from portal.campaigns.sweep import campaigns_sweep
from portal.core.task_names import CAMPAIGNS_SWEEP


@shared_task(name=CAMPAIGNS_SWEEP)
def sweep() -> None:
    campaigns_sweep()
