"""Cohort staging: the per-run input folder that the scoring container sees read-only.

Contract (docs/architecture.md, "The scored run", step 3; docs/rules.md,
"The runtime ABI" and "Verification before ranking"):

- Every run (official, practice, verification or final) sees its members in a fresh
  random order (``secrets.SystemRandom``) under fresh random file names and fresh random
  request ids, so nothing an entrant learns in one run (which row or name held which
  image) carries over to the next, and no order tells one kind of run from another.
- **Runs cannot tell themselves apart.** Every kind of run (and a campaign round's
  slices through :func:`stage_items`) gets its inputs the same way: each file is a fresh
  copy written at staging (one link, a new inode, mode 0644) with its metadata dropped
  (``rewrite.strip_metadata``: every COM and APPn segment but JFIF and Adobe, which is
  what a re-encode carries too), and every file, the images folder and the manifest
  carry one fixed timestamp, ``STAMP_NS`` (atime and mtime; the kernel sets ctime to
  the moment of staging, for every kind alike). Nothing a run can ``stat`` or parse in
  a header says whether its files are the frozen cohort's bytes or a verification's
  re-encodes.
- Canaries: a verification run and a final run carry ``rules.canary_count`` canaries,
  images of the benchmark's canary cohort (none without one), each in the place of a
  member drawn at random (:func:`canary_places`), so the run has as many rows as its
  cohort. A canary's staged name keeps the suffix of the member whose place it takes,
  and its file is staged as every other (a verification's re-encoded with its set, a
  final run's frozen and stripped): nothing in the files tells a canary from a member.
  ``StagedRun.canaries`` says which rows are canaries; it never leaves the host.
- The bytes: a scored run's files are the frozen cohort files, and a final run's too
  (its canaries' frozen files among them). A verification run's
  are one *prepared set* (``portal.submissions.pool``, written ahead of need on the
  builds side by ``scoring.cohort.verifysets``): every JPEG member re-encoded with a fresh
  imperceptible perturbation (``scoring.cohort.rewrite``), other members as they are. The set
  was taken for this run in its claim; staging copies it and deletes it, whether or not
  staging succeeded, so a set serves exactly one run.
- Each file is read once, hashed and compared with its expected SHA-256 (the frozen
  ``CohortItem.sha256``, or the hash the set recorded when it was written), then
  written. A mismatch, a missing file, anything but a regular file, a missing set or a
  file that cannot be written is a :class:`StagingError` (a platform fault: the run is
  requeued or refunded, never charged to the entrant). Reading every file also pulls
  it into the page cache before the clock starts. Copies run on a thread pool; the
  cost is the same for every kind of run (``bench/verification.py`` measures it).
- Only ``input_dir`` is mounted into the container, and it holds nothing that names a
  canonical file: the private mapping (staged name -> canonical member) lives in
  ``root/private``, which is never mounted, and the reference classes stay in memory.
  The mapping's rows follow the manifest; its first column is the member's cohort
  position, so a verification run's shuffle can be reviewed like any other run.

Called only by the scoring worker while it holds the machine (see ``scoring.run.runner``);
:func:`read_member` also by the builds side preparing a set.
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
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from portal.contests import rules
from portal.contests.models import Cohort, CohortItem
from portal.core import storage
from portal.submissions import pool
from portal.submissions.models import Run
from scoring.cohort import rewrite

log = logging.getLogger(__name__)

INPUT = "input"
IMAGES = "images"
MANIFEST = storage.RUN_MANIFEST
# A prepared set's record of its files: one line per row, "position<TAB>sha256" for a
# member (its file named by its position), "canary-N<TAB>sha256<TAB>position<TAB>frozen"
# for canary N of the canary cohort (its file: canary-N) in the place of the member at
# position, frozen being the canary's own frozen SHA-256 (a pool imported again since
# the set was prepared no longer matches it).
SET_MEMBERS = "members.tsv"
CANARY_PREFIX = "canary-"

# The atime and mtime of everything staged (2000-01-01 00:00:00 UTC): a fixed value, so
# the time of staging does not tell one run from another.
STAMP_NS = 946_684_800 * 1_000_000_000

# Staged names keep the member's extension (decoders may look at it) but only a plain
# one: anything else could smuggle part of the canonical name into the container.
_PLAIN_SUFFIX = re.compile(r"\.[a-z0-9]{1,8}")
# Worker threads: two per CPU. Each member costs some CPU in this process (reading,
# hashing, writing; part of it under the GIL) and waits on the kernel or, preparing a
# set, on a jpegtran process; with two threads per CPU one thread's share overlaps
# another's wait. On 2 CPUs, 2 and 4 threads are within noise of each other; 1 is much
# slower (bench/rewrite.py).
THREADS_PER_CPU = 2
MAX_THREADS = 32

T = TypeVar("T")


class StagingError(Exception):
    """The cohort could not be staged as frozen (a platform fault).

    The message is safe to show the entrant: it never names a cohort member. The
    details (which member, which path) go to the worker's log for staff.
    """


@dataclass(frozen=True)
class StagedRun:
    run_id: int
    root: Path  # storage.run_dir(run.id), or a round slice's folder
    input_dir: Path  # root/"input": bind-mounted read-only at /contest/input
    manifest: Path  # input_dir/"manifest.tsv"
    rows: int
    references: list[int]  # reference classes in manifest order; never leaves the host
    request_ids: list[str]
    staged_names: list[str]  # file names under input_dir/"images", in manifest order
    # Each row's CohortItem.position (a canary's in the canary cohort), in manifest order.
    positions: list[int] = field(default_factory=list)
    verification: bool = False
    # Whether each row is a canary (judged against the reference answers), in manifest
    # order; empty: none is.
    canaries: list[bool] = field(default_factory=list)
    rewritten: int = 0  # members re-encoded (a verification's set); the rest are as frozen
    copy_ms: float = 0.0  # reading, checking and writing the files

    @property
    def images_dir(self) -> Path:
        return self.input_dir / IMAGES


@dataclass(frozen=True)
class Source:
    """One file to stage: where it is, the SHA-256 it must have, and (for the logs
    only, never the entrant) which member it is."""

    path: Path
    sha256: str
    where: str


@dataclass(frozen=True)
class Place:
    """One row of a run: the image staged there, a cohort member or a canary that takes
    the place of ``replaced``."""

    item: CohortItem
    replaced: CohortItem | None = None

    @property
    def canary(self) -> bool:
        return self.replaced is not None

    @property
    def member(self) -> CohortItem:
        """The cohort member whose place this is (its name's suffix is kept)."""
        return self.replaced or self.item

    @property
    def set_name(self) -> str:
        """The file's name in a prepared set."""
        return f"{CANARY_PREFIX}{self.item.position}" if self.canary else str(self.item.position)


def canary_pool(cohort_id: int) -> list[CohortItem]:
    """The canaries of the benchmark of cohort ``cohort_id`` (its canary cohort's members)."""
    return list(
        CohortItem.objects.filter(
            cohort__kind=Cohort.CANARY,
            cohort__benchmark__cohorts__pk=cohort_id,
        ).order_by("position")
    )


def canary_places(items: list[CohortItem], rng: random.Random) -> list[Place]:
    """``items`` (one cohort's members, in the order given) with ``rules.canary_count`` of
    them, drawn with ``rng``, each replaced in its place by a canary drawn with ``rng``
    from the benchmark's canary cohort, no canary twice. ``items`` as they are without
    a canary cohort."""
    if not items:
        return []
    pool = canary_pool(int(items[0].cohort_id))
    count = rules.canary_count(len(items), len(pool))
    replaced = set(rng.sample(range(len(items)), count))
    canaries = iter(rng.sample(pool, count))
    return [
        Place(next(canaries), replaced=item) if row in replaced else Place(item)
        for row, item in enumerate(items)
    ]


def _staged_name(canonical_name: str) -> str:
    suffix = Path(canonical_name).suffix.lower()
    if not _PLAIN_SUFFIX.fullmatch(suffix):
        suffix = ""
    return secrets.token_hex(16) + suffix


def _where(item: CohortItem) -> str:
    return f"cohort {item.cohort_id} position {item.position} ({item.canonical_name})"


def member_source(item: CohortItem) -> Source:
    """The frozen file of one cohort member, refused (:class:`StagingError`) when its
    recorded name would leave the cohort's folder."""
    cohort_root = storage.cohort_dir(item.cohort_id)
    path = cohort_root / item.canonical_name
    # The name comes from the database, but a path that leaves the cohort folder must
    # not be staged whatever put it there. (The last component is checked on opening.)
    if not path.parent.resolve().is_relative_to(cohort_root.resolve()):
        log.error("staging: %s lies outside the cohort folder", _where(item))
        raise StagingError("A cohort member's path is invalid.")
    return Source(path=path, sha256=item.sha256, where=_where(item))


def read_member(source: Source) -> bytes:
    """The bytes of ``source``, read once and checked against its SHA-256.

    :class:`StagingError` when it is missing, not a regular file (a symlink is never
    followed), unreadable or changed.
    """
    try:
        fd = os.open(source.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        log.error("staging: %s is missing", source.where)
        raise StagingError("A cohort file is missing.") from None
    except OSError as exc:  # ELOOP: a symlink
        log.error("staging: cannot open %s: %s", source.where, exc)
        raise StagingError("A cohort file is not a regular file.") from exc
    try:
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                log.error("staging: %s is not a regular file", source.where)
                raise StagingError("A cohort file is not a regular file.")
            data = handle.read()
    except OSError as exc:
        log.error("staging: cannot read %s: %s", source.where, exc)
        raise StagingError("A cohort file could not be read.") from exc
    if hashlib.sha256(data).hexdigest() != source.sha256:
        log.error("staging: %s no longer matches its recorded sha256", source.where)
        raise StagingError("A cohort file no longer matches its frozen sha256.")
    return data


def _copy(source: Source, dest: Path) -> None:
    data = read_member(source)
    try:
        data = rewrite.strip_metadata(data)
    except rewrite.RewriteError as exc:
        log.error("staging: %s has an unreadable JPEG header: %s", source.where, exc)
        raise StagingError("A cohort file's JPEG header could not be read.") from exc
    try:
        rewrite.write_file(dest, data)
    except OSError as exc:
        log.error("staging: cannot write %s to %s: %s", source.where, dest, exc)
        raise StagingError("Could not write a cohort file into the run folder.") from exc


def threads_for(members: int) -> int:
    """Worker threads for ``members`` files on this process's CPUs (see THREADS_PER_CPU)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(THREADS_PER_CPU * cpus, members, MAX_THREADS))


def in_parallel(
    work: Callable[..., T], calls: Sequence[tuple[object, ...]], *, name: str
) -> list[T]:
    """``work(*call)`` for every call on a thread pool, results in call order.

    Stops at the first failure (raised, the first in call order among those that ran):
    calls not yet started are cancelled and those running are waited for, so nothing
    writes once this returns.
    """
    if not calls:
        return []
    with ThreadPoolExecutor(max_workers=threads_for(len(calls)), thread_name_prefix=name) as ex:
        futures: list[Future[T]] = []
        try:
            futures = [ex.submit(work, *call) for call in calls]
            wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                if future.done() and future.exception() is not None:
                    future.result()
            return [future.result() for future in futures]
        except BaseException:
            ex.shutdown(wait=True, cancel_futures=True)
            raise


def _copy_all(sources: list[Source], images_dir: Path, names: list[str]) -> float:
    """Copy every source to its staged name; the milliseconds it took."""
    started = time.perf_counter_ns()
    calls = [(source, images_dir / name) for source, name in zip(sources, names, strict=True)]
    in_parallel(_copy, calls, name="podium-stage")
    return (time.perf_counter_ns() - started) / 1e6


def _set_sources(run: Run, items: list[CohortItem]) -> tuple[int, list[Place], list[Source]]:
    """The rows of the prepared set ``run`` took in its claim, in the places of ``items``
    (a canary in the place of the member it replaced), their files, and how many of them
    were re-encoded."""
    taken = pool.set_of_run(int(run.pk))
    if taken is None:
        log.error("staging: verification run %s has no prepared set", run.pk)
        raise StagingError("The prepared verification cohort for this run is missing.")
    folder = storage.verification_set_dir(int(taken.pk))
    try:
        lines = (folder / SET_MEMBERS).read_text(encoding="utf-8").splitlines()
        recorded: dict[int, tuple[str, str]] = {}
        canary_shas: dict[int, str] = {}  # canary position: its frozen SHA-256
        for line in lines:
            name, sha, *place = line.split("\t")
            recorded[int(place[0] if place else name)] = (name, sha)
            if name.startswith(CANARY_PREFIX):
                canary_shas[int(name.removeprefix(CANARY_PREFIX))] = place[1]
    except (OSError, ValueError, IndexError) as exc:
        log.error("staging: set %s of run %s cannot be read: %s", taken.pk, run.pk, exc)
        raise StagingError("The prepared verification cohort could not be read.") from exc
    canaries = {item.position: item for item in canary_pool(int(run.cohort_id))}
    if set(recorded) != {item.position for item in items} or any(
        position not in canaries or canaries[position].sha256 != frozen
        for position, frozen in canary_shas.items()
    ):
        log.error("staging: set %s does not hold cohort %s's members", taken.pk, run.cohort_id)
        raise StagingError("The prepared verification cohort does not match its cohort.")
    places: list[Place] = []
    sources: list[Source] = []
    for item in items:
        name, sha = recorded[item.position]
        canary = name.startswith(CANARY_PREFIX)
        places.append(
            Place(canaries[int(name.removeprefix(CANARY_PREFIX))], replaced=item)
            if canary
            else Place(item)
        )
        sources.append(Source(path=folder / name, sha256=sha, where=f"set {taken.pk} {name}"))
    return int(taken.perturbed), places, sources


def _discard_set(run: Run) -> None:
    """Retire the set ``run`` took, files and row: each set serves one run only.

    Its folder is renamed out of the way at once (``storage.spent_set_dir``: nothing
    reads it again) and deleted by the builds side's sweep, so removing ten thousand
    files is not done while the scoring host is held.
    """
    taken = pool.set_of_run(int(run.pk))
    if taken is None:
        return
    folder = storage.verification_set_dir(int(taken.pk))
    try:
        folder.rename(storage.spent_set_dir(int(taken.pk)))
    except FileNotFoundError:
        pass
    except OSError as exc:  # cannot rename (never expected): delete it here instead
        log.warning("staging: set %s could not be put aside (%s): deleted now", taken.pk, exc)
        shutil.rmtree(folder, ignore_errors=True)
    pool.set_drop(int(taken.pk))


def _stamp(input_dir: Path, names: list[str], stamp_ns: int) -> None:
    """One timestamp for everything in the input (see the module doc)."""
    images_dir = input_dir / IMAGES
    for name in names:
        os.utime(images_dir / name, ns=(stamp_ns, stamp_ns), follow_symlinks=False)
    for path in (input_dir / MANIFEST, images_dir, input_dir):
        os.utime(path, ns=(stamp_ns, stamp_ns), follow_symlinks=False)


def _fresh_ids(count: int) -> list[str]:
    ids: list[str] = []
    seen: set[str] = set()
    while len(ids) < count:
        request_id = secrets.token_hex(12)
        if request_id not in seen:  # 96 random bits: a repeat never happens, but is cheap
            seen.add(request_id)
            ids.append(request_id)
    return ids


def _fresh_input(root: Path) -> Path:
    """An empty ``root/input/images`` (a leftover one replaced); the input folder."""
    input_dir = root / INPUT
    images_dir = input_dir / IMAGES
    if input_dir.exists():
        shutil.rmtree(input_dir)
    images_dir.mkdir(parents=True)
    # Explicit modes: the worker's umask must not decide what the container can read.
    for folder in (input_dir, images_dir):
        folder.chmod(0o755)
    return input_dir


def _manifest_text(request_ids: list[str], names: list[str]) -> str:
    return "".join(f"{rid}\t{name}\n" for rid, name in zip(request_ids, names, strict=True))


def _write_manifest(input_dir: Path, request_ids: list[str], names: list[str]) -> Path:
    manifest = input_dir / MANIFEST
    manifest.write_text(_manifest_text(request_ids, names), encoding="utf-8")
    manifest.chmod(0o644)
    return manifest


def _stage_files(
    root: Path, places: list[Place], sources: list[Source], stamp_ns: int
) -> tuple[Path, list[str], list[str], float]:
    """Copy ``sources`` (one per place, in manifest order) under fresh names into a fresh
    ``root/input`` with a manifest of fresh request ids, all stamped ``stamp_ns``:
    ``(input_dir, request_ids, names, copy_ms)``. Leaves no input folder on failure."""
    input_dir = _fresh_input(root)
    names = [_staged_name(place.member.canonical_name) for place in places]
    request_ids = _fresh_ids(len(places))
    try:
        copy_ms = _copy_all(sources, input_dir / IMAGES, names)
        _write_manifest(input_dir, request_ids, names)
        _stamp(input_dir, names, stamp_ns)
    except BaseException:
        _remove_input(input_dir)
        raise
    return input_dir, request_ids, names, copy_ms


def stage(run: Run, *, verification: bool = False, canaries: bool = False) -> StagedRun:
    """Stage ``run``'s cohort under ``storage.run_dir(run.id)/input``; return what was staged.

    ``verification=False`` (official, practice and final runs): the cohort's frozen
    files, with ``canaries`` (a final run) canaries in some members' places (see
    :func:`canary_places`). ``verification=True`` (a ``Run.VERIFY`` run): the files of
    the prepared set the run took in its claim, canaries included, which is deleted here
    whatever happens. Either way a fresh random order and fresh copies, names and ids
    (see the module doc).

    Raises :class:`StagingError` (and leaves no input folder behind) when a member is
    missing, is not a regular file, cannot be read or written, or no longer matches its
    hash, or when a verification run's set is missing or does not match its cohort.
    A leftover input folder of the same run (a crashed earlier attempt) is replaced.
    """
    root = storage.run_dir(run.pk)
    private_dir = storage.run_private_dir(run.pk)
    try:
        items = list(CohortItem.objects.filter(cohort_id=run.cohort_id).order_by("position"))
        if not items:
            log.error("staging: cohort %s has no members", run.cohort_id)
            raise StagingError("The cohort has no members.")
        rewritten = 0
        rng = secrets.SystemRandom()
        rng.shuffle(items)
        if verification:
            rewritten, places, sources = _set_sources(run, items)
        else:
            places = canary_places(items, rng) if canaries else [Place(item) for item in items]
            sources = [member_source(place.item) for place in places]
        input_dir, request_ids, names, copy_ms = _stage_files(root, places, sources, STAMP_NS)
    finally:
        if verification:
            _discard_set(run)
    if verification:
        log.log(
            logging.WARNING if rewritten < len(items) else logging.INFO,
            "staging: run %s (verification): %d members re-encoded, %d as frozen, in %.0f ms",
            run.pk,
            rewritten,
            len(items) - rewritten,
            copy_ms,
        )
    # Staff-only records for review, never mounted: the manifest as staged (the input
    # folder goes after the run) and this run's order.
    private_dir.mkdir(parents=True, exist_ok=True)
    private_dir.chmod(0o700)
    # Written from memory: reading the staged manifest would move its atime (relatime)
    # off the one timestamp of the input.
    kept = private_dir / storage.RUN_MANIFEST
    kept.write_text(_manifest_text(request_ids, names), encoding="utf-8")
    kept.chmod(0o600)
    mapping = private_dir / storage.RUN_MAPPING
    # A canary's row names it "canary:" and its position in the canary cohort.
    mapping.write_text(
        "".join(
            f"{'canary:' if place.canary else ''}{place.item.position}\t{rid}\t{name}"
            f"\t{place.item.canonical_name}\n"
            for place, rid, name in zip(places, request_ids, names, strict=True)
        ),
        encoding="utf-8",
    )
    mapping.chmod(0o600)
    return StagedRun(
        run_id=run.pk,
        root=root,
        input_dir=input_dir,
        manifest=input_dir / MANIFEST,
        rows=len(places),
        references=[place.item.reference_class for place in places],
        request_ids=request_ids,
        staged_names=names,
        positions=[place.item.position for place in places],
        verification=verification,
        canaries=[place.canary for place in places] if any(p.canary for p in places) else [],
        rewritten=rewritten,
        copy_ms=copy_ms,
    )


def _remove_input(input_dir: Path) -> None:
    # The staged files are copies: removing them never touches the cohort's own files.
    shutil.rmtree(input_dir, ignore_errors=True)


def unstage(staged: StagedRun) -> None:
    """Remove the staged input (files and manifest); keep the run folder for its logs."""
    _remove_input(staged.input_dir)


def stage_items(items: list[CohortItem], root: Path) -> StagedRun:
    """Stage ``items``, in the order given, under ``root/input`` as a scored run's cohort
    is staged: fresh copies checked against their frozen hashes, their metadata dropped,
    fresh random names and request ids, the fixed timestamp, a manifest. For the slices
    of a campaign round (``scoring.campaign.rounds``): each slice is one such folder,
    mounted by itself, and a round sees inputs of the same kind as any other run.

    Raises :class:`StagingError` (and leaves no input folder behind) as :func:`stage`
    does; a leftover input folder under ``root`` is replaced.
    """
    sources = [member_source(item) for item in items]
    places = [Place(item) for item in items]
    input_dir, request_ids, names, copy_ms = _stage_files(root, places, sources, STAMP_NS)
    return StagedRun(
        run_id=0,
        root=root,
        input_dir=input_dir,
        manifest=input_dir / MANIFEST,
        rows=len(items),
        references=[item.reference_class for item in items],
        request_ids=request_ids,
        staged_names=names,
        positions=[item.position for item in items],
        copy_ms=copy_ms,
    )
