"""Cohort staging: the per-run input folder that the scoring container sees read-only.

Contract (architecture "The scored run", step 3; rules "The runtime ABI" and
"Verification before ranking"):

- One fixed order per cohort: ``CohortItem.position``. Every scored run (official or
  practice) on a cohort sees its images in that order, so timings are comparable
  between runs.
- Every run gets fresh random file names and fresh random request ids, so nothing an
  entrant learns in one run (which name held which image) carries over to the next.
- A scored run's files are hard links of the frozen cohort files (no copies: staging
  10,000 images must take well under a second); the cohort and the run folders are on
  the same filesystem under ``PODIUM_DATA_DIR``.
- A *verification* run (``stage(run, verification=True)``) sees the same members in a
  fresh random order (``secrets.SystemRandom``), and every JPEG member (known by its
  bytes, not its name) is rewritten losslessly by :mod:`scoring.rewrite`: new bytes
  and hash each time, the same decoded pixels. A member that is not a JPEG is copied
  unchanged (we know no lossless rewrite for every other format, and a platform fault
  for a cohort we accepted would block every verification); it still gets a fresh name
  and a place in the fresh order. Nothing is hard-linked, so no staged file shares an
  inode with the cohort. The members are processed on a thread pool, one ``jpegtran``
  process per JPEG, all of it off the clock.
- Each member is hashed and compared with the frozen ``CohortItem.sha256`` (in a scored
  run the link, in a verification run the very bytes that are then rewritten); a
  mismatch, a missing file or anything but a regular file is a :class:`StagingError`
  (a platform fault: the run is requeued or refunded, never charged to the entrant),
  and so is a JPEG that cannot be rewritten or a host without ``jpegtran``. Reading
  every file to hash it also pulls it into the page cache before the clock starts.
- Only ``input_dir`` is mounted into the container, and it holds nothing that names a
  canonical file: the private mapping (staged name -> canonical member) lives in
  ``root/private``, which is never mounted, and the reference classes stay in memory.
  The mapping's rows follow the manifest; its first column is the member's cohort
  position, so a verification run's shuffle can be reviewed like any other run.

Called only by the scoring worker while it holds the machine (see ``scoring.runner``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import re
import secrets
import shutil
import stat
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from portal import storage
from portal.contests.models import CohortItem
from portal.submissions.models import Run
from scoring import rewrite

log = logging.getLogger(__name__)

INPUT = "input"
IMAGES = "images"
MANIFEST = storage.RUN_MANIFEST

# Staged names keep the member's extension (decoders may look at it) but only a plain
# one: anything else could smuggle part of the canonical name into the container.
_PLAIN_SUFFIX = re.compile(r"\.[a-z0-9]{1,8}")
_READ_CHUNK = 1024 * 1024
# Rewriting threads: two per CPU. Each member costs some CPU in this process (spawning,
# hashing, writing; part of it under the GIL) and about 1 ms in its jpegtran process;
# with two threads per CPU one thread's share overlaps another's jpegtran. On 2 CPUs,
# 2 and 4 threads are within noise of each other; 1 is much slower (bench/rewrite.py).
REWRITE_THREADS_PER_CPU = 2
MAX_REWRITE_THREADS = 32


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
    # Each row's CohortItem.position, in manifest order (ascending unless verification).
    positions: list[int] = field(default_factory=list)
    verification: bool = False
    rewritten: int = 0  # JPEG members rewritten (verification); the rest were copied
    rewrite_ms: float = 0.0  # hashing, rewriting and writing the members (verification)

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


def _where(item: CohortItem) -> str:
    return f"cohort {item.cohort_id} position {item.position} ({item.canonical_name})"


def _checked_source(cohort_root: Path, item: CohortItem) -> tuple[Path, os.stat_result]:
    """The member's path and ``lstat``, once it is known to be a regular file in the cohort."""
    source = cohort_root / item.canonical_name
    where = _where(item)
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
    return source, info


def _link_member(cohort_root: Path, item: CohortItem, dest: Path) -> None:
    """Hard-link one frozen member at ``dest`` and check it against its frozen hash."""
    source, info = _checked_source(cohort_root, item)
    where = _where(item)
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


def _rewrite_member(
    cohort_root: Path, item: CohortItem, dest: Path, rng: random.Random, jpegtran: str
) -> bool:
    """Write a fresh copy of one frozen member at ``dest``; whether it was a rewritten JPEG.

    The member is read once: those bytes are checked against the frozen hash, then
    rewritten (a JPEG) or written as they are (anything else). Runs on a pool thread.
    """
    source, _info = _checked_source(cohort_root, item)
    where = _where(item)
    try:
        # O_NOFOLLOW: the name may have become a symlink since the lstat.
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                log.error("staging: %s is not a regular file", where)
                raise StagingError("A cohort file is not a regular file.")
            data = handle.read()
    except OSError as exc:
        log.error("staging: cannot read %s: %s", where, exc)
        raise StagingError("A cohort file could not be read.") from exc
    if hashlib.sha256(data).hexdigest() != item.sha256:
        log.error("staging: %s no longer matches its frozen sha256", where)
        raise StagingError("A cohort file no longer matches its frozen sha256.")
    is_jpeg = rewrite.is_jpeg(data)
    if is_jpeg:
        try:
            data = rewrite.rewrite_jpeg_data(data, rng, jpegtran=jpegtran)
        except rewrite.JpegtranMissing as exc:
            log.error("staging: %s", exc)
            raise StagingError(
                "The JPEG rewriter (jpegtran) is not installed on the scoring host."
            ) from exc
        except rewrite.RewriteError as exc:
            log.error("staging: cannot rewrite %s: %s", where, exc)
            raise StagingError("A cohort image could not be rewritten for verification.") from exc
    try:
        rewrite.write_file(dest, data)
    except OSError as exc:
        log.error("staging: cannot write %s to %s: %s", where, dest, exc)
        raise StagingError("Could not write a cohort file into the run folder.") from exc
    return is_jpeg


def _rewrite_threads(members: int) -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(REWRITE_THREADS_PER_CPU * cpus, members, MAX_REWRITE_THREADS))


def _rewrite_members(
    cohort_root: Path, items: list[CohortItem], images_dir: Path, names: list[str]
) -> int:
    """Check and write every member (see :func:`_rewrite_member`); how many were JPEGs.

    Stops at the first failure: members not yet started are cancelled and those
    running are waited for, so nothing writes into the folder once this returns.
    """
    try:
        jpegtran = rewrite.find_jpegtran()
    except rewrite.JpegtranMissing as exc:
        log.error("staging: %s", exc)
        raise StagingError(
            "The JPEG rewriter (jpegtran) is not installed on the scoring host."
        ) from exc
    rng = secrets.SystemRandom()
    with ThreadPoolExecutor(
        max_workers=_rewrite_threads(len(items)), thread_name_prefix="podium-rewrite"
    ) as pool:
        futures: list[Future[bool]] = []
        try:
            for item, name in zip(items, names, strict=True):
                futures.append(
                    pool.submit(
                        _rewrite_member, cohort_root, item, images_dir / name, rng, jpegtran
                    )
                )
            wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:  # the first failure in manifest order, if any
                if future.done() and future.exception() is not None:
                    future.result()
            return sum(future.result() for future in futures)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def stage(run: Run, *, verification: bool = False) -> StagedRun:
    """Stage ``run``'s cohort under ``storage.run_dir(run.id)/input``; return what was staged.

    ``verification=False`` (official and practice scores): the cohort's fixed order,
    hard links. ``verification=True`` (a ``Run.VERIFY`` run): a fresh random order and
    rewritten copies (see the module doc); slower: one jpegtran process per JPEG (1.5 to
    2 ms per image on a busy 2-CPU machine, see bench/rewrite.py).

    Raises :class:`StagingError` (and leaves no input folder behind) when a member is
    missing, is not a regular file, cannot be linked, read, rewritten or written, or
    no longer matches its hash, or when verification finds no ``jpegtran``.
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
    if verification:
        secrets.SystemRandom().shuffle(items)

    cohort_root = storage.cohort_dir(run.cohort_id)
    staged_names: list[str] = []
    request_ids: list[str] = []
    seen_ids: set[str] = set()
    rewritten = 0
    rewrite_ms = 0.0
    try:
        for item in items:
            name = _staged_name(item.canonical_name)
            if not verification:
                _link_member(cohort_root, item, images_dir / name)
            request_id = secrets.token_hex(12)
            while request_id in seen_ids:  # 96 random bits: never in practice, but cheap
                request_id = secrets.token_hex(12)
            seen_ids.add(request_id)
            staged_names.append(name)
            request_ids.append(request_id)
        if verification:
            started = time.perf_counter_ns()
            rewritten = _rewrite_members(cohort_root, items, images_dir, staged_names)
            rewrite_ms = (time.perf_counter_ns() - started) / 1e6
            copied = len(items) - rewritten
            # Members that are not JPEGs keep their bytes, so their hashes are known.
            log.log(
                logging.WARNING if copied else logging.INFO,
                "staging: run %s (verification): %d JPEG members rewritten, %d other members "
                "copied unchanged, in %.0f ms",
                run.pk,
                rewritten,
                copied,
                rewrite_ms,
            )
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
        positions=[item.position for item in items],
        verification=verification,
        rewritten=rewritten,
        rewrite_ms=rewrite_ms,
    )


def _remove_input(input_dir: Path) -> None:
    # Removing hard links (or a verification run's copies) never touches the cohort's
    # own names or data.
    shutil.rmtree(input_dir, ignore_errors=True)


def unstage(staged: StagedRun) -> None:
    """Remove the staged input (files and manifest); keep the run folder for its logs."""
    _remove_input(staged.input_dir)


def stage_items(items: list[CohortItem], root: Path) -> StagedRun:
    """Stage ``items``, in the order given, under ``root/input`` as a scored run's cohort
    is staged: hard links checked against their frozen hashes, fresh random names and
    request ids, a manifest. For the slices of a campaign round (``scoring.rounds``):
    each slice is one such folder, mounted by itself.

    Raises :class:`StagingError` (and leaves no input folder behind) as :func:`stage`
    does; a leftover input folder under ``root`` is replaced.
    """
    input_dir = root / INPUT
    images_dir = input_dir / IMAGES
    if input_dir.exists():
        shutil.rmtree(input_dir)
    images_dir.mkdir(parents=True)
    for folder in (input_dir, images_dir):
        folder.chmod(0o755)
    staged_names: list[str] = []
    request_ids: list[str] = []
    try:
        for item in items:
            name = _staged_name(item.canonical_name)
            _link_member(storage.cohort_dir(item.cohort_id), item, images_dir / name)
            request_id = secrets.token_hex(12)
            while request_id in request_ids:  # 96 random bits: never in practice
                request_id = secrets.token_hex(12)
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
    return StagedRun(
        run_id=0,
        root=root,
        input_dir=input_dir,
        manifest=manifest,
        rows=len(items),
        references=[item.reference_class for item in items],
        request_ids=request_ids,
        staged_names=staged_names,
        positions=[item.position for item in items],
    )
