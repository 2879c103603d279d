"""The reaper (run by beat every minute): finds work whose worker died and settles it.

- A run in staging or running whose lease expired (its worker stopped heartbeating
  for ``PODIUM_LEASE_S``): its container is killed and removed (found by the id on the
  run and by its ``podium.run`` label, in case the worker died before recording it)
  and the run is a platform failure (requeued once, refunded the second time).
- The machine lock of a holder that stopped heartbeating is freed, and builds left
  paused while nobody holds it are unpaused (``scoring.machine.reap``).
- An environment building for longer than its cap plus a grace period: failed, so
  the entrant can rebuild (environments are attempt-free).
- A submission building for longer than its cap plus a grace period: a platform fault
  (its build is retried once, then the attempt is refunded).

Builds do not count time frozen by a score against their cap, so neither does the
reaper: the time scored runs were in progress since the build started is added.

Every step is a conditional update in the services, so two reapers (or a reaper and
a worker that was only slow) settle each thing once.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.utils import timezone

from portal.environments.models import Environment
from portal.environments.services import environment_finish_build
from portal.submissions.models import Run, Submission, SubmissionEvent
from portal.submissions.services import submission_build_platform_failure
from scoring import machine

log = logging.getLogger(__name__)
BUILD_GRACE = dt.timedelta(minutes=5)


def reap(now: dt.datetime | None = None) -> None:
    """One pass (beat runs it every minute); safe to run concurrently and repeatedly."""
    now = now or timezone.now()
    expired = Run.objects.filter(
        status__in=[Run.STAGING, Run.RUNNING], lease_expires_at__lt=now
    ).values_list("id", flat=True)
    for run_id in expired:
        if machine.settle_dead_run(run_id, now):
            log.warning("reaper: run %s had no heartbeat; settled as a platform failure", run_id)
    machine.reap(now)
    for environment in Environment.objects.filter(
        status=Environment.BUILDING, build_started_at__isnull=False
    ).select_related("benchmark"):
        cap = dt.timedelta(seconds=environment.benchmark.build_timeout_s) + BUILD_GRACE
        if environment.build_started_at and _past_cap(environment.build_started_at, cap, now):
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
        if started and _past_cap(started, cap, now):
            submission_build_platform_failure(
                submission.pk, reason="the build worker stopped answering"
            )


def _past_cap(started: dt.datetime, cap: dt.timedelta, now: dt.datetime) -> bool:
    """Whether a build started at ``started`` ran past ``cap`` of unfrozen time."""
    if started + cap >= now:
        return False
    return started + cap + dt.timedelta(seconds=machine.frozen_seconds(started, now)) < now
