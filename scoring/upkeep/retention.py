"""Retention: a closed benchmark's bulky artifacts go once its retention period is over.

Purging is allowed from ``closes_at + retention_days`` (:func:`rules.purge_allowed_from`).
It removes, for every environment and every submission of the benchmark:

- the environment folders (the Dockerfile copy, the context archive, the build log);
- the submission folders (the source archive, the build.sh log);
- the run folders (staged input left behind, the entrant's logs, the output, the
  staff-only mapping of the run's shuffled names);
- the Docker images Podium built for them: submission images first, then environment
  images (a submission image is a child of its environment's, so the engine can then
  prune the shared layers too);
- with a registry, each submission image's manifest there (``image_ref``, deleted by
  digest through the registry's HTTP API; the registry's garbage-collect, which staff
  run offline, then reclaims the blobs no manifest uses any more).

It keeps every row (submissions with their image and output digests, runs with their
wall times, matches and verdicts, timelines, the attempt ledger, the leaderboard,
disqualifications), the benchmark's cohort files and items, and the audit trail. The
rows keep their ``image_tag``: it records what was scored, even once the image is gone.

Work still in progress is left alone and reported: a submission that has not reached a
final status (building, queued, a staff rescore...), with its runs and image, and an
environment that is building or that such a submission uses (one of a later phase of
the contest included, which may use this phase's environments).

Idempotent: what is already gone counts as nothing, so a second purge removes nothing
new. Only the worker side calls this (it talks to the Docker Engine through
``scoring.engine``); ``manage.py purge_artifacts`` is the thin command around it.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction

from portal.audit.services import audit_record
from portal.contests import rules
from portal.contests.models import Benchmark
from portal.core import storage
from portal.environments.models import Environment
from portal.submissions.models import Run, Submission
from scoring import engine
from scoring.images import registry

log = logging.getLogger(__name__)

AUDIT_ACTION = "artifacts.purge"

# Podium's builds tag every image in a repository of its own row (scoring/build/builds.py):
# only such a tag is removed, never a shared image another row merely names.
_ENVIRONMENT_REPOSITORY = "podium-entrant/env-{pk}"
_SUBMISSION_REPOSITORY = "podium-entrant/sub-{pk}"


class PurgeNotAllowed(Exception):
    """The benchmark's retention period is not over yet; nothing was deleted."""


@dataclass
class PurgeSummary:
    """What a purge removed (or, in a dry run, would remove), and what it left in place.

    ``folders`` are relative to the data folder; ``bytes_removed`` counts the data that
    removing the files frees (a staged hard link to a cohort file frees nothing).
    """

    benchmark: str
    dry_run: bool
    folders: list[str] = field(default_factory=list)
    files_removed: int = 0
    bytes_removed: int = 0
    images_removed: list[str] = field(default_factory=list)
    images_left: list[str] = field(default_factory=list)  # "ref: why"
    folders_left: list[str] = field(default_factory=list)  # "path: why"
    skipped: list[str] = field(default_factory=list)  # work still in progress

    @property
    def removed_anything(self) -> bool:
        return bool(self.folders or self.images_removed)

    def counts(self) -> dict[str, int]:
        """The numbers the audit event records."""
        return {
            "folders": len(self.folders),
            "files": self.files_removed,
            "bytes": self.bytes_removed,
            "images": len(self.images_removed),
            "images_left": len(self.images_left),
            "folders_left": len(self.folders_left),
            "skipped": len(self.skipped),
        }


def purge_refusal(benchmark: Benchmark) -> str:
    """The sentence that refuses a purge before the retention period is over."""
    allowed_from = rules.purge_allowed_from(benchmark.closes_at, benchmark.retention_days)
    return (
        f"Benchmark {benchmark.slug!r} keeps its artifacts for {benchmark.retention_days} "
        f"days after it closed ({benchmark.closes_at.astimezone(dt.UTC).isoformat()}); "
        f"purging is allowed from {allowed_from.isoformat()}. Nothing was deleted."
    )


def artifacts_purge(
    *, benchmark: Benchmark, now: dt.datetime, actor: Any = None, dry_run: bool = False
) -> PurgeSummary:
    """Remove ``benchmark``'s bulky artifacts (see the module docstring for what goes).

    Raises :class:`PurgeNotAllowed` (deleting nothing) while ``now`` is before
    ``closes_at + retention_days``. A dry run only lists what would go: it deletes
    nothing, records nothing and leaves ``artifacts_purged_at`` alone.

    Otherwise removes the folders, then the images; an image a running container still
    uses, or that the engine fails to remove, is left in place and reported in
    ``images_left`` (running the purge again retries it). Then, in one transaction, sets
    ``benchmark.artifacts_purged_at = now`` and records the audit event
    ``artifacts.purge`` (by ``actor``, None for the command line) with the counts. Safe
    to run again: a second purge removes nothing new and says so in its counts.
    """
    allowed_from = rules.purge_allowed_from(benchmark.closes_at, benchmark.retention_days)
    if now < allowed_from:
        raise PurgeNotAllowed(purge_refusal(benchmark))

    summary = PurgeSummary(benchmark=benchmark.slug, dry_run=dry_run)
    submissions = list(Submission.objects.filter(benchmark=benchmark).order_by("pk"))
    active = [s for s in submissions if s.status not in Submission.FINAL]
    done = [s for s in submissions if s.status in Submission.FINAL]
    summary.skipped += [f"submission {s.pk} ({s.status})" for s in active]
    # An environment carried over to a later phase may be used by that phase's work too.
    busy_environment_ids = {s.environment_id for s in active} | set(
        Submission.objects.filter(environment__benchmark=benchmark)
        .exclude(status__in=Submission.FINAL)
        .values_list("environment_id", flat=True)
    )
    environments = list(Environment.objects.filter(benchmark=benchmark).order_by("pk"))
    purgeable_environments: list[Environment] = []
    for environment in environments:
        if environment.status in (Environment.QUEUED, Environment.BUILDING):
            summary.skipped.append(f"environment {environment.pk} ({environment.status})")
        elif environment.pk in busy_environment_ids:
            summary.skipped.append(f"environment {environment.pk} (used by unfinished work)")
        else:
            purgeable_environments.append(environment)
    run_ids = Run.objects.filter(submission__in=done).order_by("pk").values_list("pk", flat=True)

    folders = [storage.environment_dir(e.pk) for e in purgeable_environments]
    folders += [storage.submission_dir(s.pk) for s in done]
    folders += [storage.run_dir(run_id) for run_id in run_ids]
    for folder in folders:
        _purge_folder(folder, summary)

    images = [(s.image_tag, _SUBMISSION_REPOSITORY.format(pk=s.pk)) for s in done]
    images += [
        (e.image_tag, _ENVIRONMENT_REPOSITORY.format(pk=e.pk)) for e in purgeable_environments
    ]
    for ref, repository in images:
        if ref:
            _purge_image(ref, repository, summary)
    for submission in done:
        if submission.image_ref:
            repository = _SUBMISSION_REPOSITORY.format(pk=submission.pk)
            _purge_manifest(submission.image_ref, repository, summary)

    if not dry_run:
        with transaction.atomic():
            Benchmark.objects.filter(pk=benchmark.pk).update(artifacts_purged_at=now)
            audit_record(
                actor=actor,
                action=AUDIT_ACTION,
                target=f"benchmark:{benchmark.slug}",
                details=summary.counts(),
            )
        benchmark.artifacts_purged_at = now
    return summary


def _purge_image(ref: str, repository: str, summary: PurgeSummary) -> None:
    if not ref.startswith(f"{repository}:"):
        summary.images_left.append(f"{ref}: not an image Podium built for this row")
        return
    try:
        if summary.dry_run:
            if engine.image_exists(ref):
                summary.images_removed.append(ref)
        elif engine.remove_image_if_unused(ref):
            summary.images_removed.append(ref)
    except engine.EngineError as exc:  # ImageInUse included: reported, never fatal
        log.warning("purge: image %s left in place: %s", ref, exc)
        summary.images_left.append(f"{ref}: {exc}")


def _purge_manifest(ref: str, repository: str, summary: PurgeSummary) -> None:
    """Delete a pushed submission image from the registry its reference names (the one
    it was pushed to, even if ``PODIUM_REGISTRY`` changed since). Only the manifest goes:
    its blobs stay until the registry's garbage-collect, run offline by staff."""
    try:
        ours = registry.parse(ref).repository == repository
    except ValueError:
        ours = False
    if not ours:
        summary.images_left.append(f"{ref}: not an image Podium pushed for this row")
        return
    try:
        if summary.dry_run:
            if registry.manifest_exists(ref):
                summary.images_removed.append(ref)
        elif registry.delete_manifest(ref):
            summary.images_removed.append(ref)
    except registry.RegistryError as exc:  # reported, never fatal: a later purge retries
        log.warning("purge: registry image %s left in place: %s", ref, exc)
        summary.images_left.append(f"{ref}: {exc}")


def _purge_folder(folder: Path, summary: PurgeSummary) -> None:
    if not folder.is_dir() or folder.is_symlink():
        return
    files, freed = _tree_size(folder)
    relative = folder.relative_to(storage.data_dir()).as_posix()
    if not summary.dry_run:
        try:
            shutil.rmtree(folder)  # never follows a symlink out of the folder
        except OSError as exc:
            log.warning("purge: could not remove %s: %s", folder, exc)
            summary.folders_left.append(f"{relative}: {exc.strerror or exc}")
            return
    summary.folders.append(relative)
    summary.files_removed += files
    summary.bytes_removed += freed


def _tree_size(folder: Path) -> tuple[int, int]:
    """Entries other than folders under ``folder``, and the bytes removing them frees."""
    files = freed = 0
    for root, directories, names in os.walk(folder):  # does not descend into symlinks
        for name in [*names, *directories]:
            info = os.lstat(os.path.join(root, name))
            if stat.S_ISDIR(info.st_mode):
                continue
            files += 1
            if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
                freed += info.st_size
    return files, freed
