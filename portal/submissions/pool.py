"""The pool of prepared verification cohorts, as the database records it.

A verification run (docs/rules.md, "Verification before ranking") sees its cohort's members
re-encoded with a fresh imperceptible perturbation. Re-encoding a cohort takes far
longer than a scored run's staging, so it is never done while a scoring host is held:
the builds side prepares *sets* ahead of need (``scoring.cohort.verifysets`` writes the files),
and each verification run takes one ready set when it is claimed and uses it once.

- Which cohorts keep a pool: the official cohort of every benchmark that verifies
  (``verify_top`` above 0) while its window is open, and of any benchmark with a
  submission waiting for verification, whatever its ``verify_top`` says now
  (:func:`cohorts_needing_sets`). Each keeps ``PODIUM_VERIFY_POOL`` sets ready or
  preparing; Celery beat's minute sweep and every verification queued
  (``request_fill``) top it up.
- A set's life: ``preparing`` (:func:`set_begin`, which never lets a pool grow past its
  size, holding the cohort's row lock) -> ``ready`` (:func:`set_ready`) -> ``taken`` by
  exactly one verification run in that run's claim (:func:`set_take`, ``SELECT ... FOR
  UPDATE SKIP LOCKED``, so two hosts never take one set) -> gone: the host deletes it
  once it has copied its files into the run's input, whether or not staging succeeded
  (a retried run takes a fresh set). :func:`stale_set_ids` names what the sweep deletes:
  sets preparing for longer than ``PODIUM_VERIFY_PREPARE_STALE_S`` (their worker died),
  taken sets whose run is no longer staging, and ready sets of cohorts no longer needing
  any.
- A dry pool: a verifying submission whose cohort has no ready set is stepped over by
  the claim (``waiting.lock_next_waiting``), which asks for a fill; the host goes on
  with the next waiting run and the verification keeps its place in the fair order. A
  set that becomes ready wakes the class (``scoring.cohort.verifysets``).
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal.contests.models import Cohort
from portal.core import jobs
from portal.submissions.models import Run, Submission, VerificationSet


def cohorts_needing_sets(now: dt.datetime | None = None) -> list[int]:
    """Ids of the cohorts that keep a pool of prepared sets (see the module doc)."""
    now = now or timezone.now()
    verifying = Submission.objects.filter(status=Submission.VERIFYING).values("benchmark_id")
    return list(
        Cohort.objects.filter(kind=Cohort.OFFICIAL)
        .filter(
            Q(
                benchmark__verify_top__gt=0,
                benchmark__opens_at__lte=now,
                benchmark__closes_at__gt=now,
            )
            | Q(benchmark_id__in=verifying)
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def request_fill(cohort_id: int) -> None:
    """Ask the builds side, after commit, to top up ``cohort_id``'s pool (idempotent)."""
    jobs.enqueue(jobs.VERIFICATION_POOL_FILL, cohort_id, robust=True)


def set_begin(cohort_id: int) -> int | None:
    """A new ``preparing`` set of ``cohort_id``, or None when its pool is already full
    (``PODIUM_VERIFY_POOL`` sets ready or preparing). Holds the cohort's row lock while
    it counts, so fills running at once never overfill a pool."""
    with transaction.atomic():
        if not Cohort.objects.select_for_update().filter(pk=cohort_id).exists():
            return None
        pooled = VerificationSet.objects.filter(
            cohort_id=cohort_id, status__in=[VerificationSet.PREPARING, VerificationSet.READY]
        ).count()
        if pooled >= int(settings.PODIUM_VERIFY_POOL):
            return None
        return int(VerificationSet.objects.create(cohort_id=cohort_id).pk)


def set_ready(set_id: int, *, members: int, perturbed: int, prepare_ms: float) -> bool:
    """``preparing -> ready`` once every file is written; False when the set is gone (the
    sweep judged it stale meanwhile: its files are then the caller's to delete)."""
    return bool(
        VerificationSet.objects.filter(pk=set_id, status=VerificationSet.PREPARING).update(
            status=VerificationSet.READY,
            members=members,
            perturbed=perturbed,
            prepare_ms=prepare_ms,
            ready_at=timezone.now(),
        )
    )


def ready_exists(cohort_id: int) -> bool:
    return VerificationSet.objects.filter(
        cohort_id=cohort_id, status=VerificationSet.READY
    ).exists()


def set_take(run: Run) -> VerificationSet | None:
    """In a verification run's claim: its cohort's oldest ready set, now ``taken`` by it;
    None when none is ready (rows other hosts hold are skipped). Call inside the claim's
    transaction. Asks for a fill, which replaces the set taken."""
    taken = (
        VerificationSet.objects.select_for_update(skip_locked=True)
        .filter(cohort_id=run.cohort_id, status=VerificationSet.READY)
        .order_by("pk")
        .first()
    )
    request_fill(int(run.cohort_id))
    if taken is None:
        return None
    taken.status = VerificationSet.TAKEN
    taken.run = run
    taken.taken_at = timezone.now()
    taken.save(update_fields=["status", "run", "taken_at"])
    return taken


def set_of_run(run_id: int) -> VerificationSet | None:
    """The set a verification run took in its claim, if it is still there."""
    return VerificationSet.objects.filter(run_id=run_id, status=VerificationSet.TAKEN).first()


def set_drop(set_id: int) -> None:
    """Forget a set (its files are deleted by the caller, before or after)."""
    VerificationSet.objects.filter(pk=set_id).delete()


def stale_set_ids(now: dt.datetime | None = None) -> list[int]:
    """Sets the sweep deletes, files and row (see the module doc)."""
    now = now or timezone.now()
    stale_before = now - dt.timedelta(seconds=int(settings.PODIUM_VERIFY_PREPARE_STALE_S))
    needed = cohorts_needing_sets(now)
    stale = VerificationSet.objects.filter(
        Q(status=VerificationSet.PREPARING, created_at__lt=stale_before)
        | (Q(status=VerificationSet.TAKEN) & ~Q(run__status=Run.STAGING))
        | Q(status=VerificationSet.READY) & ~Q(cohort_id__in=needed)
    )
    return list(stale.order_by("pk").values_list("pk", flat=True))


def known_set_ids() -> set[int]:
    return set(VerificationSet.objects.values_list("pk", flat=True))
