"""Preparing verification cohorts ahead of need, on the builds side.

A *set* is as many images as an official cohort has members: the cohort's members but
``rules.canary_count`` of them, drawn at random, and in their places as many canaries
drawn at random from the benchmark's canary cohort (none without one). Each JPEG is
re-encoded with a fresh imperceptible perturbation (``scoring.cohort.rewrite``: new
bytes, tables, coefficients and pixels, a PSNR of at least ``rewrite.PSNR_FLOOR_DB``),
canaries and members alike, and any other file is kept as frozen. It lives in
``storage.verification_set_dir(id)``: one file per image (mode 0600, never mounted),
named by the member's position or ``canary-`` and the canary's position, and
``members.tsv`` with each file's SHA-256 (a canary's line also names the member whose
place it takes), which the scoring host checks as it copies the set into a verification
run's input (``scoring.cohort.staging``). The database side (which cohorts keep a pool,
a set's states, who takes it) is ``portal.submissions.pool``.

- :func:`fill` tops up one cohort's pool (the task ``scoring.verification_pool_fill``,
  sent when a verification is queued or a set is taken): it prepares sets until the
  pool holds ``PODIUM_VERIFY_POOL`` ready or preparing, and each set that becomes ready
  wakes its class when a verification of that cohort is waiting. Where the builds
  worker shares its machine with a scoring host (one machine, or a stack on one), it
  re-encodes nothing while a score holds that machine: the set taken by a verification
  run would otherwise be replaced on the same CPUs while that run is timed.
- :func:`sweep` (Celery beat, every minute) deletes stale sets, the folders of sets a
  run has used (put aside by the scoring host, ``storage.spent_set_dir``) and stray
  folders, and asks for a fill of every cohort that keeps a pool.

Preparing a set reads each frozen member once, checks it against its frozen hash (the
same check as staging: ``staging.read_member``), re-encodes it on a thread pool and
writes it. A member that no re-encode can serve within the PSNR floor is written as
frozen (logged as a warning, and counted: ``VerificationSet.perturbed`` is then below
``members``). Any other failure (a member missing or changed, no ``jpegtran``, a full
disk) deletes the set, files and row, and is logged for staff: the pool stays short and
the next fill tries again, while the verifications it would serve wait (never skipped,
never charged to anyone).
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from portal.contests.models import Cohort, CohortItem
from portal.core import storage
from portal.submissions import pool, wakeups
from portal.submissions.models import Run, Submission
from scoring.cohort import rewrite, staging

log = logging.getLogger(__name__)

# Members re-encoded per worker thread between two calls of ``prepare``'s ``pause``: a
# few tenths of a second of work, the most a score that takes the machine meanwhile can
# overlap (during its staging, before its clock starts).
CHUNK_PER_THREAD = 2

# A folder without a row is deleted only once it is this old, so a set whose row was
# just created and whose folder is being written is never taken for a stray.
STRAY_AFTER_S = 600.0


class PrepareError(Exception):
    """A set could not be prepared (the platform's fault; logged, retried by a later fill)."""


def _prepare_member(
    source: staging.Source, dest: Path, rng: random.Random, jpegtran: str
) -> tuple[str, bool]:
    """Write one member of a set: ``(sha256 of what was written, whether re-encoded)``."""
    try:
        data = staging.read_member(source)
    except staging.StagingError as exc:
        raise PrepareError(f"{source.where}: {exc}") from exc
    perturbed = rewrite.is_jpeg(data)
    if perturbed:
        try:
            data = rewrite.rewrite_jpeg_data(data, rng, jpegtran=jpegtran)
        except rewrite.JpegtranMissing as exc:
            raise PrepareError(f"{source.where}: {exc}") from exc
        except rewrite.RewriteError as exc:
            # One member no re-encode can serve (a tiny picture at a very low quality
            # cannot keep the PSNR floor): it goes as frozen, like a member that is not a
            # JPEG, rather than leaving its cohort without verification at all.
            log.warning("verification set member %s kept as frozen: %s", source.where, exc)
            perturbed = False
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return hashlib.sha256(data).hexdigest(), perturbed


def prepare(cohort_id: int, pause: Callable[[], object] | None = None) -> int | None:
    """Prepare one set of ``cohort_id`` if its pool has room: the set's id once ready, or
    None (pool full, cohort gone, or a failure: logged, nothing left behind).

    ``pause`` is called before each chunk of members (``CHUNK_PER_THREAD`` per thread)
    and may block: the builds worker passes one that waits while a score holds its
    machine, since re-encoding takes every CPU it is given.
    """
    set_id = pool.set_begin(cohort_id)
    if set_id is None:
        return None
    folder = storage.verification_set_dir(set_id)
    started = time.perf_counter_ns()
    try:
        items = list(CohortItem.objects.filter(cohort_id=cohort_id).order_by("position"))
        if not items:
            raise PrepareError(f"cohort {cohort_id} has no members")
        jpegtran = rewrite.find_jpegtran()
        folder.mkdir(parents=True)
        folder.chmod(0o700)
        rng = secrets.SystemRandom()
        places = staging.canary_places(items, rng)
        calls = [
            (staging.member_source(place.item), folder / place.set_name, rng, jpegtran)
            for place in places
        ]
        written: list[tuple[str, bool]] = []
        chunk = CHUNK_PER_THREAD * staging.threads_for(len(calls))
        for start in range(0, len(calls), chunk):
            if pause is not None:
                pause()
            written += staging.in_parallel(
                _prepare_member, calls[start : start + chunk], name="podium-prepare"
            )
        (folder / staging.SET_MEMBERS).write_text(
            "".join(
                f"{place.set_name}\t{sha}"
                + (f"\t{place.member.position}\t{place.item.sha256}\n" if place.canary else "\n")
                for place, (sha, _) in zip(places, written, strict=True)
            ),
            encoding="utf-8",
        )
    except (PrepareError, rewrite.RewriteError, staging.StagingError, OSError) as exc:
        log.error(
            "verification set %s of cohort %s could not be prepared: %s", set_id, cohort_id, exc
        )
        shutil.rmtree(folder, ignore_errors=True)
        pool.set_drop(set_id)
        return None
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        pool.set_drop(set_id)
        raise
    prepare_ms = (time.perf_counter_ns() - started) / 1e6
    perturbed = sum(done for _, done in written)
    if not pool.set_ready(set_id, members=len(items), perturbed=perturbed, prepare_ms=prepare_ms):
        shutil.rmtree(folder, ignore_errors=True)  # dropped as stale meanwhile
        return None
    log.info(
        "verification set %s of cohort %s ready: %d members (%d canaries), %d re-encoded,"
        " in %.0f ms",
        set_id,
        cohort_id,
        len(items),
        sum(place.canary for place in places),
        perturbed,
        prepare_ms,
    )
    _wake_waiting(cohort_id)
    return set_id


def _wake_waiting(cohort_id: int) -> None:
    """A set is ready: wake the cohort's class if a verification on it is waiting."""
    cohort = Cohort.objects.select_related("benchmark").filter(pk=cohort_id).first()
    if cohort is None:
        return
    if Submission.objects.filter(
        status=Submission.VERIFYING, runs__cohort_id=cohort_id, runs__status=Run.QUEUED
    ).exists():
        wakeups.score_wake(hardware_class=cohort.benchmark.hardware_class_id)


def fill(cohort_id: int, pause: Callable[[], object] | None = None) -> int:
    """Prepare sets of ``cohort_id`` until its pool is full; how many were made.
    ``pause``: as for :func:`prepare`."""
    made = 0
    while prepare(cohort_id, pause) is not None:
        made += 1
    return made


def sweep() -> list[int]:
    """Delete stale sets and stray folders; ask for a fill of every cohort that keeps a
    pool. Returns those cohorts' ids."""
    for set_id in pool.stale_set_ids():
        shutil.rmtree(storage.verification_set_dir(set_id), ignore_errors=True)
        pool.set_drop(set_id)
        log.info("verification set %s removed (stale)", set_id)
    known = pool.known_set_ids()
    root = storage.verification_sets_dir()
    if root.is_dir():
        now = time.time()
        for folder in root.iterdir():
            spent = folder.name.startswith(storage.SPENT_SET_PREFIX)  # used: delete now
            stray = not folder.name.isdigit() or int(folder.name) not in known
            if spent or (stray and now - folder.lstat().st_mtime > STRAY_AFTER_S):
                if folder.is_dir() and not folder.is_symlink():
                    shutil.rmtree(folder, ignore_errors=True)
                else:
                    folder.unlink(missing_ok=True)
                log.info("verification set folder %s removed (no set)", folder.name)
    needed = pool.cohorts_needing_sets()
    for cohort_id in needed:
        pool.request_fill(cohort_id)
    return needed
