"""The reaper (run by beat every minute): finds work whose worker died and settles it.

- A run in staging or running whose lease expired: its container is killed and the
  run is a platform failure (requeued once, refunded the second time).
- An environment building for longer than its cap plus a grace period: failed, so
  the entrant can rebuild (environments are attempt-free).
- A submission building for longer than its cap plus a grace period: a platform fault
  (its build is retried once, then the attempt is refunded).
"""

from __future__ import annotations

import datetime as dt
import logging

from django.utils import timezone

from portal.environments.models import Environment
from portal.environments.services import environment_finish_build
from portal.submissions.models import Run, Submission, SubmissionEvent
from portal.submissions.services import (
    run_record_infra_failure,
    submission_build_platform_failure,
)
from scoring import engine

log = logging.getLogger(__name__)
BUILD_GRACE = dt.timedelta(minutes=5)


def reap(now: dt.datetime | None = None) -> None:
    now = now or timezone.now()
    expired = Run.objects.filter(
        status__in=[Run.STAGING, Run.RUNNING], lease_expires_at__lt=now
    ).values_list("id", "container_id")
    for run_id, container_id in expired:
        if container_id:
            try:
                engine.kill(container_id)
                engine.remove_container(container_id)
            except engine.EngineError:
                log.exception("could not remove the container of run %s", run_id)
        run_record_infra_failure(run_id=run_id, reason="the scoring worker stopped answering")
    for environment in Environment.objects.filter(
        status=Environment.BUILDING, build_started_at__isnull=False
    ).select_related("benchmark"):
        cap = dt.timedelta(seconds=environment.benchmark.build_timeout_s) + BUILD_GRACE
        if environment.build_started_at and environment.build_started_at + cap < now:
            environment_finish_build(
                environment_id=environment.pk,
                status=Environment.FAILED,
                reason="platform error: the build worker stopped answering; rebuild it.",
            )
    for submission in Submission.objects.filter(status=Submission.BUILDING).select_related(
        "benchmark"
    ):
        started = (
            SubmissionEvent.objects.filter(submission=submission, status=Submission.BUILDING)
            .order_by("-at")
            .values_list("at", flat=True)
            .first()
        )
        cap = dt.timedelta(seconds=submission.benchmark.build_timeout_s) + BUILD_GRACE
        if started and started + cap < now:
            submission_build_platform_failure(
                submission.pk, reason="the build worker stopped answering"
            )
