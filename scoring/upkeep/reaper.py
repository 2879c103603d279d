"""The reaper (run by beat every minute): finds work whose worker died and settles it.

- A run in staging or running whose lease expired (its worker stopped heartbeating
  for ``PODIUM_LEASE_S``): its container is killed and removed (found by the id on the
  run and by its ``podium.run`` label, in case the worker died before recording it)
  and the run is a platform failure (requeued once, refunded the second time).
- The machine lock of a holder that stopped heartbeating is freed, and builds left
  paused while nobody holds it are unpaused (``scoring.host.machine.reap``).
- An environment building for longer than its cap plus a grace period: failed, so
  the entrant can rebuild (environments are attempt-free).
- A submission building for longer than its cap plus a grace period: a platform fault
  (its build is retried once, then the attempt is refunded).
- What dead workers left on this engine (:func:`collect_leftovers`, also run when a
  scoring host starts): calibration containers while no score or calibration holds the
  host, the containers of rounds and runs that are no longer live (a round voided as
  stale leaves its exited slices), and the submission images pulled from the registry
  that no queued or live run and no open round needs.

Builds do not count time frozen by a score against their cap, so neither does the
reaper: the time scored runs were in progress since the build started is added.

Every step is a conditional update in the services, so two reapers (or a reaper and
a worker that was only slow) settle each thing once.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from portal.campaigns.models import Round, RoundEntry
from portal.environments.models import Environment
from portal.environments.services import environment_finish_build
from portal.submissions.builds import submission_build_platform_failure
from portal.submissions.models import Run, Submission, SubmissionEvent
from scoring import engine
from scoring.campaign import rounds
from scoring.host import machine
from scoring.images import registry
from scoring.run import calibration

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
    collect_leftovers()
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


# What dead workers leave ------------------------------------------------------------------

LIVE_RUNS = (Run.QUEUED, Run.STAGING, Run.RUNNING)


@dataclass(frozen=True)
class Leftovers:
    """What one collection removed from this engine (container and image names)."""

    containers: tuple[str, ...] = ()
    images: tuple[str, ...] = ()


def collect_leftovers() -> Leftovers:
    """Remove what dead workers left on this engine; what it removed. Never raises
    (engine or database errors are logged: the reaper tries again next minute).

    Only containers labelled with this host (``machine.HOST_LABEL``: ``scoring_host()``)
    are considered, so another host name's work on a shared engine is left alone:

    - a calibration container (``calibration.LABEL``) when no score or calibration holds
      the machine lock (``machine.builds_frozen``; a calibration holds it while its
      containers exist);
    - a round's slice container (``rounds.ROUND_LABEL``) unless its round is running;
    - a run's container (``machine.RUN_LABEL``) unless its run is staging or running.

    With a registry, an image this engine holds only by registry digest (pulled for a run
    or a round, ``runner.pull``; never a build's own tag) is removed unless a queued or
    live run, or an open round, needs it, or a running container uses it.
    """
    try:
        host = machine.scoring_host()
        containers = _collect_containers(host)
        images = _collect_pulled_images()
    except Exception:  # the reaper and a host's start must go on whatever failed here
        log.exception("could not collect what dead workers left on this engine")
        return Leftovers()
    if containers or images:
        log.warning(
            "collected what dead workers left on %s: %d containers, %d images",
            host,
            len(containers),
            len(images),
        )
    return Leftovers(containers=tuple(containers), images=tuple(images))


def _collect_containers(host: str) -> list[str]:
    """Remove this host's calibration, round and run containers that belong to nothing
    live (see :func:`collect_leftovers`); their ids."""
    mine = f"{machine.HOST_LABEL}={host}"
    doomed: list[str] = []
    found = engine.list_containers([rounds.ROUND_LABEL, mine])
    live = _live_ids(Round.objects.filter(status=Round.RUNNING), found, rounds.ROUND_LABEL)
    doomed += [str(c["Id"]) for c in found if _label(c, rounds.ROUND_LABEL) not in live]
    found = engine.list_containers([machine.RUN_LABEL, mine])
    live = _live_ids(
        Run.objects.filter(status__in=[Run.STAGING, Run.RUNNING]), found, machine.RUN_LABEL
    )
    doomed += [str(c["Id"]) for c in found if _label(c, machine.RUN_LABEL) not in live]
    # Asked last: a database that failed above stopped the collection before this
    # question, which reads a failure as "not held".
    if not machine.builds_frozen(host):
        doomed += [str(c["Id"]) for c in engine.list_containers([calibration.LABEL, mine])]
    removed: list[str] = []
    for container_id in doomed:
        try:
            engine.kill(container_id)
            engine.remove_container(container_id)
        except engine.EngineError:
            log.exception("could not remove the leftover container %s", container_id[:12])
            continue
        removed.append(container_id)
    return removed


def _label(container: dict[str, Any], key: str) -> str:
    return str((container.get("Labels") or {}).get(key) or "")


def _live_ids(live: QuerySet[Any], containers: list[dict[str, Any]], key: str) -> set[str]:
    """The values of label ``key`` on ``containers`` that name a row of ``live``."""
    ids = {int(value) for c in containers if (value := _label(c, key)).isdigit()}
    return {str(pk) for pk in live.filter(pk__in=ids).values_list("pk", flat=True)}


def _collect_pulled_images() -> list[str]:
    """Remove the images pulled from the registry that nothing live needs; their names."""
    address = registry.address()
    if not address:
        return []
    prefix = f"{address}/"
    pulled = [
        image
        for image in engine.list_images()
        if not image.get("RepoTags")
        and image.get("RepoDigests")
        and all(str(ref).startswith(prefix) for ref in image["RepoDigests"])
    ]
    if not pulled:
        return []
    needed = _needed_images()
    removed: list[str] = []
    for image in pulled:
        refs = [str(ref) for ref in image["RepoDigests"]]
        if str(image["Id"]) in needed or needed.intersection(refs):
            continue
        for ref in refs:
            try:
                if engine.remove_image_if_unused(ref):
                    removed.append(ref)
            except engine.ImageInUse:
                break  # a container still runs it: it stays until that one is gone
            except engine.EngineError:
                log.exception("could not remove the leftover image %s", ref)
    return removed


def _needed_images() -> set[str]:
    """The registry references and image IDs of every submission that a queued or live
    run, or an open round, will run."""
    submissions = Submission.objects.filter(runs__status__in=LIVE_RUNS).values_list(
        "image_ref", "image_digest"
    )
    entries = RoundEntry.objects.filter(round__status__in=Round.OPEN).values_list(
        "submission__image_ref", "submission__image_digest"
    )
    return {value for pair in (*submissions, *entries) for value in pair if value}
