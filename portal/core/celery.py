"""The Celery application shared by the web (to enqueue) and the workers."""

import os

from celery import Celery
from celery.signals import beat_init, worker_init, worker_process_init

from portal.core.cpus import CpuListError, pin_off_scoring

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("podium")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(
    ["scoring", "portal.campaigns", "portal.notifications", "portal.submissions"]
)


def _pin_off_scoring(**_: object) -> None:
    try:
        pin_off_scoring()
    except CpuListError as exc:  # a bad setting stops the process (signals log Exceptions)
        raise SystemExit(str(exc)) from exc


# Every worker process (the main one and each pool child) and beat stay off the CPUs that
# time scored runs (portal/core/cpus.py); a scored container is put on them by its spec.
worker_init.connect(_pin_off_scoring, dispatch_uid="portal.core.cpus.pin_worker")
worker_process_init.connect(_pin_off_scoring, dispatch_uid="portal.core.cpus.pin_worker_process")
beat_init.connect(_pin_off_scoring, dispatch_uid="portal.core.cpus.pin_beat")
