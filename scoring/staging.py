"""Cohort staging: the per-run input folder that the scoring container sees read-only.

Contract (architecture "The scored run", step 3; rules "The runtime ABI"):

- One fixed order per cohort: ``CohortItem.position``. Every run on a cohort sees its
  images in that order, so timings are comparable between runs.
- Every run gets fresh random file names and fresh random request ids, so nothing an
  entrant learns in one run (which name held which image) carries over to the next.
- Staged files are hard links of the frozen cohort files (no copies: staging 10,000
  images must take well under a second); the cohort and the run folders are on the
  same filesystem under ``PODIUM_DATA_DIR``.
- Each staged file is hashed and compared with the frozen ``CohortItem.sha256``; a
  mismatch, a missing file or anything but a regular file is a :class:`StagingError`
  (a platform fault: the run is requeued or refunded, never charged to the entrant).
  Reading every file to hash it also pulls it into the page cache before the clock
  starts.
- Only ``input_dir`` is mounted into the container, and it holds nothing that names a
  canonical file: the private mapping (staged name -> canonical member) lives in
  ``root/private``, which is never mounted, and the reference classes stay in memory.

Called only by the scoring worker while it holds the machine (see ``scoring.runner``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from portal import storage
from portal.contests.models import CohortItem
from portal.submissions.models import Run

log = logging.getLogger(__name__)

INPUT = "input"
IMAGES = "images"
MANIFEST = storage.RUN_MANIFEST

# Staged names keep the member's extension (decoders may look at it) but only a plain
# one: anything else could smuggle part of the canonical name into the container.
_PLAIN_SUFFIX = re.compile(r"\.[a-z0-9]{1,8}")
_READ_CHUNK = 1024 * 1024


class StagingError(Exception):
    """The cohort could not be staged as frozen (a platform fault).

    The message is safe to show the entrant: it never names a cohort member. The
    details (which member, which path) go to the worker's log for staff.
    """


@dataclass(frozen=True)
class StagedRun:
    run_id: int
    root: Path  # storage.run_dir(run.id)
    input_dir: Path  # root/"input": bind-mounted read-only at /contest/input
    manifest: Path  # input_dir/"manifest.tsv"
    rows: int
    references: list[int]  # reference classes in manifest order; never leaves the host
    request_ids: list[str]
    staged_names: list[str]  # file names under input_dir/"images", in manifest order

    @property
    def images_dir(self) -> Path:
        return self.input_dir / IMAGES


def _staged_name(canonical_name: str) -> str:
    suffix = Path(canonical_name).suffix.lower()
    if not _PLAIN_SUFFIX.fullmatch(suffix):
        suffix = ""
    return secrets.token_hex(16) + suffix


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    # O_NOFOLLOW: we just made this link ourselves, but a symlink must never be hashed
    # as if it were the member it points to.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        for chunk in iter(lambda: handle.read(_READ_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _link_member(cohort_root: Path, item: CohortItem, dest: Path) -> None:
    """Hard-link one frozen member at ``dest`` and check it against its frozen hash."""
    source = cohort_root / item.canonical_name
    where = f"cohort {item.cohort_id} position {item.position} ({item.canonical_name})"
    # The name comes from the database, but a path that leaves the cohort folder must
    # not be staged whatever put it there. (The last component is checked by lstat.)
    if not source.parent.resolve().is_relative_to(cohort_root.resolve()):
        log.error("staging: %s lies outside the cohort folder", where)
        raise StagingError("A cohort member's path is invalid.")
    try:
        info = source.lstat()
    except FileNotFoundError:
        log.error("staging: %s is missing", where)
        raise StagingError("A cohort file is missing.") from None
    if not stat.S_ISREG(info.st_mode):
        log.error("staging: %s is not a regular file", where)
        raise StagingError("A cohort file is not a regular file.")
    try:
        os.link(source, dest, follow_symlinks=False)
    except OSError as exc:
        log.error("staging: cannot hard-link %s to %s: %s", where, dest, exc)
        raise StagingError(
            "Could not link a cohort file into the run folder (the cohort and the runs "
            "must share one filesystem)."
        ) from exc
    if _sha256_of(dest) != item.sha256:
        log.error("staging: %s no longer matches its frozen sha256", where)
        raise StagingError("A cohort file no longer matches its frozen sha256.")
    # The container runs as a non-root uid that owns nothing here. The mode belongs to
    # the shared inode, so the cohort file becomes 0644 too; the cohort folder itself
    # (never mounted) is what keeps other host users out.
    if stat.S_IMODE(info.st_mode) != 0o644:
        os.chmod(dest, 0o644)


def stage(run: Run) -> StagedRun:
    """Stage ``run``'s cohort under ``storage.run_dir(run.id)/input``; return what was staged.

    Raises :class:`StagingError` (and leaves no input folder behind) when a member is
    missing, is not a regular file, cannot be linked, or no longer matches its hash.
    A leftover input folder of the same run (a crashed earlier attempt) is replaced.
    """
    root = storage.run_dir(run.pk)
    input_dir = root / INPUT
    images_dir = input_dir / IMAGES
    private_dir = storage.run_private_dir(run.pk)
    if input_dir.exists():
        shutil.rmtree(input_dir)
    images_dir.mkdir(parents=True)
    private_dir.mkdir(parents=True, exist_ok=True)
    # Explicit modes: the worker's umask must not decide what the container can read.
    for folder in (input_dir, images_dir):
        folder.chmod(0o755)
    private_dir.chmod(0o700)

    items = list(CohortItem.objects.filter(cohort_id=run.cohort_id).order_by("position"))
    if not items:
        _remove_input(input_dir)
        log.error("staging: cohort %s has no members", run.cohort_id)
        raise StagingError("The cohort has no members.")

    cohort_root = storage.cohort_dir(run.cohort_id)
    staged_names: list[str] = []
    request_ids: list[str] = []
    seen_ids: set[str] = set()
    try:
        for item in items:
            name = _staged_name(item.canonical_name)
            _link_member(cohort_root, item, images_dir / name)
            request_id = secrets.token_hex(12)
            while request_id in seen_ids:  # 96 random bits: never in practice, but cheap
                request_id = secrets.token_hex(12)
            seen_ids.add(request_id)
            staged_names.append(name)
            request_ids.append(request_id)
    except BaseException:
        _remove_input(input_dir)
        raise

    manifest = input_dir / MANIFEST
    manifest.write_text(
        "".join(f"{rid}\t{name}\n" for rid, name in zip(request_ids, staged_names, strict=True)),
        encoding="utf-8",
    )
    manifest.chmod(0o644)
    # Staff-only records for review, never mounted: the manifest as staged (the input
    # folder goes after the run) and this run's shuffle.
    kept = private_dir / storage.RUN_MANIFEST
    shutil.copyfile(manifest, kept)
    kept.chmod(0o600)
    mapping = private_dir / storage.RUN_MAPPING
    mapping.write_text(
        "".join(
            f"{item.position}\t{rid}\t{name}\t{item.canonical_name}\n"
            for item, rid, name in zip(items, request_ids, staged_names, strict=True)
        ),
        encoding="utf-8",
    )
    mapping.chmod(0o600)
    return StagedRun(
        run_id=run.pk,
        root=root,
        input_dir=input_dir,
        manifest=manifest,
        rows=len(items),
        references=[item.reference_class for item in items],
        request_ids=request_ids,
        staged_names=staged_names,
    )


def _remove_input(input_dir: Path) -> None:
    # Removing hard links never touches the cohort's own names or data.
    shutil.rmtree(input_dir, ignore_errors=True)


def unstage(staged: StagedRun) -> None:
    """Remove the staged input (links and manifest); keep the run folder for its logs."""
    _remove_input(staged.input_dir)
