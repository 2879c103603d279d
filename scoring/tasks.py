"""Thin Celery tasks: they take ids, call one function, and let Celery handle delivery.

Each function they call claims its work with a conditional update, so a redelivered
message (acks_late, a worker lost mid-task) does nothing twice.
"""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_ready

from portal.core import task_names as names
from portal.submissions import wakeups
from scoring import engine, worker
from scoring.build import builds
from scoring.campaign import rounds
from scoring.cohort import verifysets
from scoring.estimation import work as estimation
from scoring.host import machine
from scoring.images import artifacts
from scoring.upkeep import reaper
from scoring.worker import on_builds_worker_ready, on_worker_ready

# Connected here rather than in apps.py: every worker imports this module when it starts
# (autodiscovery, before it is ready), and the web never does, so the web process keeps
# clear of the worker side. A worker that consumes a scoring queue registers its host.
worker_ready.connect(on_worker_ready, dispatch_uid="scoring.worker.on_worker_ready")
worker_ready.connect(on_builds_worker_ready, dispatch_uid="scoring.worker.on_builds_worker_ready")


@shared_task(name=names.BUILD_ENVIRONMENT)
def build_environment(environment_id: int) -> None:
    builds.build_environment(environment_id)


@shared_task(name=names.BUILD_SUBMISSION)
def build_submission(submission_id: int) -> None:
    builds.build_submission(submission_id)


@shared_task(name=names.SCORE_NEXT)
def score_next(hardware_class: str, waits: int = 0) -> None:
    """A wake-up on the class queue: claim the next waiting run in the fair order, score it.
    ``waits``: how often a host had not been ready when this was sent (backoff)."""
    worker.score_next(hardware_class, waits)


@shared_task(name=names.SCORE_SWEEP)
def score_sweep() -> None:
    """Celery beat, every minute (on ``builds``): wake each class again whose runs wait
    with no wake-up in flight (``wakeups.score_sweep``)."""
    wakeups.score_sweep()


@shared_task(name=names.VERIFICATION_POOL_FILL)
def verification_pool_fill(cohort_id: int) -> None:
    """On ``builds``: prepare verification sets of the cohort until its pool is full.
    Re-encoding takes every CPU it gets, so it waits while a score holds this worker's
    machine, like a build step (``machine.wait_while_frozen``)."""
    host = machine.scoring_host()
    verifysets.fill(cohort_id, pause=lambda: machine.wait_while_frozen(host))


@shared_task(name=names.VERIFICATION_POOL_SWEEP)
def verification_pool_sweep() -> None:
    """Celery beat, every minute (on ``builds``): stale sets out, every pool topped up."""
    verifysets.sweep()


@shared_task(name=names.RUN_ROUND)
def run_round(round_id: int) -> None:
    """A campaign round, on a host of its class (sent to ``jobs.scoring_queue(class)``):
    claim it, run every image over its slices, record the outcome (``scoring.campaign.rounds``)."""
    rounds.run_round(round_id)


@shared_task(name=names.ESTIMATION_GRADE)
def estimation_grade(entry_id: int) -> None:
    """A metered-estimation entry, on a host of its phase's class: claim it, grade it on
    the phase suite holding the machine, record it (``scoring.estimation.work``)."""
    estimation.grade_entry(entry_id)


@shared_task(name=names.ESTIMATION_FINAL)
def estimation_final(final_id: int) -> None:
    """One entry of a phase's final rerun, graded on the final suite."""
    estimation.grade_final(final_id)


@shared_task(name=names.ESTIMATION_SUITE)
def estimation_suite(suite_id: int, seeds: list[int]) -> None:
    """Generate a requested suite (MLPs and their Monte Carlo reference) on this host."""
    estimation.generate_suite(suite_id, seeds)


@shared_task(name=names.REMOVE_IMAGE)
def remove_image(image_tag: str) -> None:
    engine.remove_image(image_tag)


@shared_task(name=names.REVIEW_ARTIFACTS)
def review_artifacts(submission_id: int) -> None:
    """On ``builds``: list a reviewed submission's image for staff. Like a build step, it
    waits while a score holds this worker's machine (``machine.wait_while_frozen``)."""
    host = machine.scoring_host()
    artifacts.review_listing(submission_id, pause=lambda: machine.wait_while_frozen(host))


@shared_task(name=names.REAP)
def reap() -> None:
    reaper.reap()
