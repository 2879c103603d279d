"""Importing a cohort: its frozen files, content hashes, reference answers and scoring order.

Staff call :func:`cohort_import` (through ``manage.py import_cohort``, or ``seed_demo`` for
the generated demo). A cohort's members are never edited in place: importing again
replaces it wholesale, and is refused once any run has used it (runs keep pointing at
their cohort). Its benchmark and kind change only through :func:`cohort_change`, audited,
and only until a run uses it.

The scoring order (``CohortItem.position``) is fixed at import: the members sorted by
(sha256, canonical name), then shuffled by ``random.Random`` seeded with the sha256 of
their sorted content hashes (one hex digest per line). So the order depends only on the
images, never on their names, the answers file's order or the time of import, and
re-importing the same images gives the same order; names that sort by class do not
leak into it. A run never shows that order: each stages its members in a fresh random
order (``scoring.cohort.staging``); the position names a member in a run's private
mapping and in a campaign round's request set.

:func:`imagenet_import` makes both cohorts of a benchmark at once from what staff hold:
the ImageNet validation JPEGs, a frozen reference file (the deterministic reference
model's class of every file) and a private seed. The official members are the
``official_count`` file names with the smallest HMAC-SHA256 under the private seed; the
practice members, independently, the ``practice_count`` smallest under the public
practice seed. The draw depends on the seed and the names only, so anyone holding the
seed can recompute it; the private seed itself is never stored (an audit event keeps its
sha256, so staff can later show which seed made the cohort).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from django.db import transaction
from django.db.models import ProtectedError

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.contests.models import Benchmark, Cohort, CohortItem
from portal.core import storage

CLASS_COUNT = 1000
CHUNK_BYTES = 1024 * 1024
NAME_MAX_LENGTH = 255


@dataclass(frozen=True)
class _Member:
    canonical_name: str
    sha256: str
    reference_class: int


def cohort_path(item: CohortItem) -> Path:
    """Where a member's frozen file lives."""
    return storage.cohort_dir(item.cohort_id) / item.canonical_name


def relative_path_problem(relative_path: str) -> str | None:
    """Why ``relative_path`` cannot name a cohort member, or ``None`` when it can.

    A member's name is a plain relative POSIX path that stays inside the images folder.
    """
    if not relative_path:
        return "the path is empty"
    if len(relative_path) > NAME_MAX_LENGTH:
        return f"the path is longer than {NAME_MAX_LENGTH} characters"
    if "\\" in relative_path or any(ord(char) < 32 for char in relative_path):
        return "the path contains a backslash or a control character"
    path = PurePosixPath(relative_path)
    if path.is_absolute():
        return "the path is absolute"
    if any(part in ("", ".", "..") for part in relative_path.split("/")):
        return "the path has an empty, '.' or '..' component"
    return None


def read_answers_file(path: Path) -> list[tuple[str, int]]:
    """Parse ``relative_path<TAB>class`` lines (blank lines are skipped).

    Raises ``ValueError`` naming the file and line number for a malformed line, a class
    outside [0, 999], an unusable path, or a path listed twice.
    """
    answers: list[tuple[str, int]] = []
    first_line_of: dict[str, int] = {}
    with path.open(encoding="utf-8") as handle:
        for number, raw_line in enumerate(handle, start=1):
            line = raw_line.rstrip("\r\n")
            if not line.strip():
                continue
            where = f"{path.name} line {number}"
            fields = line.split("\t")
            if len(fields) != 2:
                raise ValueError(f"{where}: expected 'relative_path<TAB>class', got {line!r}")
            relative_path, class_text = fields
            problem = relative_path_problem(relative_path)
            if problem:
                raise ValueError(f"{where}: {problem}: {relative_path!r}")
            try:
                class_id = int(class_text.strip())
            except ValueError:
                raise ValueError(f"{where}: class {class_text!r} is not an integer") from None
            if not 0 <= class_id < CLASS_COUNT:
                raise ValueError(f"{where}: class {class_id} is outside [0, {CLASS_COUNT - 1}]")
            if relative_path in first_line_of:
                raise ValueError(
                    f"{where}: {relative_path!r} is already listed on line "
                    f"{first_line_of[relative_path]}"
                )
            first_line_of[relative_path] = number
            answers.append((relative_path, class_id))
    return answers


def _check_answers(images_dir: Path, answers: list[tuple[str, int]]) -> list[Path]:
    """The source file of every answer, after checking all of them; raises ``ValueError``."""
    if not answers:
        raise ValueError("a cohort needs at least one image")
    root = images_dir.resolve()
    if not root.is_dir():
        raise ValueError(f"{images_dir} is not a folder")
    seen: set[str] = set()
    sources = []
    for relative_path, class_id in answers:
        problem = relative_path_problem(relative_path)
        if problem:
            raise ValueError(f"{problem}: {relative_path!r}")
        if relative_path in seen:
            raise ValueError(f"{relative_path!r} is listed twice")
        seen.add(relative_path)
        if not 0 <= class_id < CLASS_COUNT:
            raise ValueError(f"{relative_path}: class {class_id} is outside [0, 999]")
        source = (root / relative_path).resolve()
        if not source.is_relative_to(root):
            raise ValueError(f"{relative_path!r} leads outside {images_dir}")
        if not source.is_file():
            raise ValueError(f"{relative_path!r} is not a file in {images_dir}")
        sources.append(source)
    return sources


def _copy_and_hash(source: Path, target: Path) -> str:
    """Copy ``source`` to a new file ``target`` (mode 0644); return the sha256 of the bytes."""
    digest = hashlib.sha256()
    with source.open("rb") as reader, target.open("xb") as writer:
        while chunk := reader.read(CHUNK_BYTES):
            digest.update(chunk)
            writer.write(chunk)
    target.chmod(0o644)
    return digest.hexdigest()


def _make_dirs(root: Path, relative_dir: PurePosixPath) -> None:
    path = root
    for part in relative_dir.parts:
        path = path / part
        if not path.is_dir():
            path.mkdir()
            path.chmod(0o755)


def scoring_order(members: list[_Member]) -> list[_Member]:
    """The fixed scoring order of a cohort's members (see the module doc)."""
    ordered = sorted(members, key=lambda member: (member.sha256, member.canonical_name))
    hashes = "".join(f"{member.sha256}\n" for member in ordered)
    seed = int(hashlib.sha256(hashes.encode("ascii")).hexdigest(), 16)
    random.Random(seed).shuffle(ordered)  # noqa: S311 - a reproducible order, not a secret
    return ordered


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class _Source:
    """One member to import: its canonical name, where its file is now, its answer."""

    canonical_name: str
    path: Path
    reference_class: int


@dataclass
class _Placement:
    """The folders an import has made so far, removed again if it fails."""

    folders: list[Path]

    @contextmanager
    def undone_on_failure(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            for folder in self.folders:
                _remove_tree(folder)
            raise


def _stage(sources: list[_Source], placement: _Placement) -> tuple[Path, list[_Member]]:
    """Copy (and hash) every source into a new staging folder beside the cohorts."""
    cohorts_root = storage.ensure_dir(storage.data_dir() / "cohorts")
    staging = Path(tempfile.mkdtemp(prefix=".incoming-", dir=cohorts_root))
    placement.folders.append(staging)
    staging.chmod(0o755)
    members = []
    for source in sources:
        name = PurePosixPath(source.canonical_name)
        _make_dirs(staging, name.parent)
        sha256 = _copy_and_hash(source.path, staging.joinpath(*name.parts))
        members.append(_Member(source.canonical_name, sha256, source.reference_class))
    return staging, members


def _install(
    *,
    benchmark: Benchmark,
    kind: str,
    staging: Path,
    members: list[_Member],
    placement: _Placement,
    public_seed: str = "",
) -> Cohort:
    """Inside the caller's transaction: replace the ``kind`` cohort with ``members`` and
    move ``staging`` to its folder. Raises ``ValueError`` when a run used the old one.
    ``public_seed``: the practice draw's published seed (never an official one's)."""
    old = Cohort.objects.select_for_update().filter(benchmark=benchmark, kind=kind).first()
    if old is not None:
        old_dir = storage.cohort_dir(old.pk)
        try:
            old.delete()
        except ProtectedError:
            raise ValueError(
                f"the {kind} cohort of {benchmark.slug} has been used by a run; "
                "a scored cohort cannot be replaced"
            ) from None
        transaction.on_commit(lambda: _remove_tree(old_dir))
    if kind != Cohort.PRACTICE:
        public_seed = ""
    cohort = Cohort.objects.create(benchmark=benchmark, kind=kind, public_seed=public_seed)
    CohortItem.objects.bulk_create(
        CohortItem(
            cohort=cohort,
            position=position,
            canonical_name=member.canonical_name,
            sha256=member.sha256,
            reference_class=member.reference_class,
        )
        for position, member in enumerate(scoring_order(members))
    )
    target = storage.cohort_dir(cohort.pk)
    if target.exists():  # left behind by a database that was reset; no row owns it
        _remove_tree(target)
    placement.folders.append(target)
    os.replace(staging, target)
    return cohort


def cohort_import(
    *, benchmark: Benchmark, kind: str, images_dir: Path, answers: list[tuple[str, int]]
) -> Cohort:
    """Import exactly the images listed in ``answers`` as the ``kind`` cohort of ``benchmark``.

    Every listed file must exist inside ``images_dir``; files that are not listed are
    ignored. The files are copied (and hashed) into a staging folder first, off the
    transaction; then one transaction replaces any existing cohort of that kind and
    stores the items, and the staged folder becomes ``storage.cohort_dir(cohort.id)``.
    The old cohort's files are removed once the transaction commits.

    Raises ``ValueError`` for bad input, or when the existing cohort is referenced by a
    run (a scored cohort is frozen for good). Safe to call again after a failure.
    """
    kinds = [value for value, _label in Cohort.KINDS]
    if kind not in kinds:
        raise ValueError(f"kind must be one of {', '.join(kinds)}, not {kind!r}")
    paths = _check_answers(images_dir, answers)
    sources = [
        _Source(relative_path, path, class_id)
        for (relative_path, class_id), path in zip(answers, paths, strict=True)
    ]
    placement = _Placement(folders=[])
    with placement.undone_on_failure():
        staging, members = _stage(sources, placement)
        with transaction.atomic():
            return _install(
                benchmark=benchmark,
                kind=kind,
                staging=staging,
                members=members,
                placement=placement,
            )


# The ImageNet validation set ----------------------------------------------------------

IMAGENET_VAL_COUNT = 50_000
IMAGENET_VAL_NAME = re.compile(r"ILSVRC2012_val_(?P<number>[0-9]{8})\.JPEG")
SEED_MIN_CHARACTERS = 32


def imagenet_val_name(number: int) -> str:
    """The canonical file name of validation image ``number`` (1-based)."""
    return f"ILSVRC2012_val_{number:08d}.JPEG"


def imagenet_val_files(folder: Path, count: int = IMAGENET_VAL_COUNT) -> dict[str, Path]:
    """Every validation JPEG under ``folder``, by canonical name, in name order.

    The files may sit directly in ``folder`` or in subfolders (the per-class layout);
    other files are ignored, and symbolic links to folders are not followed. Exactly
    ``ILSVRC2012_val_00000001.JPEG`` up to number ``count`` must be there, each once.
    Raises ``ValueError`` (one line) naming the first missing, extra or duplicate name.
    """
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder")
    found: dict[str, Path] = {}
    for parent, _folders, names in os.walk(folder):
        for name in names:
            match = IMAGENET_VAL_NAME.fullmatch(name)
            if match is None:
                continue
            path = Path(parent, name)
            if not path.is_file():
                raise ValueError(f"{path} is not a regular file")
            if name in found:
                raise ValueError(
                    f"{name} is in the folder twice: {found[name].relative_to(folder)} and "
                    f"{path.relative_to(folder)}"
                )
            if not 1 <= int(match["number"]) <= count:
                raise ValueError(
                    f"{name} is not one of the {count:,} validation images expected "
                    f"({imagenet_val_name(1)} to {imagenet_val_name(count)})"
                )
            found[name] = path
    if len(found) < count:
        missing = [
            name
            for name in (imagenet_val_name(number) for number in range(1, count + 1))
            if name not in found
        ]
        raise ValueError(
            f"the folder lacks {len(missing):,} of the {count:,} validation images, "
            f"first {missing[0]}"
        )
    return dict(sorted(found.items()))


def read_reference_file(path: Path, names: list[str]) -> dict[str, int]:
    """The reference class of every name in ``names`` (the validation files, name order).

    Two formats, one class per validation image, blank lines skipped:

    * ``<class>`` per line: line k holds the class of the k-th name in name order
      (``ILSVRC2012_val_00000001.JPEG`` first);
    * ``<file name> <class>`` per line (a space or a tab between), in any order.

    Raises ``ValueError`` (one line, naming the file and line) for a malformed line, a
    class outside [0, 999], an unknown or repeated name, a mix of the formats, or a count
    other than ``len(names)``.
    """
    known = set(names)
    by_position: list[int] = []
    by_name: dict[str, int] = {}
    line_of: dict[str, int] = {}
    with path.open(encoding="utf-8") as handle:
        for number, raw_line in enumerate(handle, start=1):
            fields = raw_line.split()
            if not fields:
                continue
            where = f"{path.name} line {number}"
            if len(fields) > 2:
                raise ValueError(f"{where}: expected '<class>' or '<file name> <class>'")
            if (len(fields) == 1 and by_name) or (len(fields) == 2 and by_position):
                raise ValueError(f"{where}: mixes '<class>' and '<file name> <class>' lines")
            try:
                class_id = int(fields[-1])
            except ValueError:
                raise ValueError(f"{where}: class {fields[-1]!r} is not an integer") from None
            if not 0 <= class_id < CLASS_COUNT:
                raise ValueError(f"{where}: class {class_id} is outside [0, {CLASS_COUNT - 1}]")
            if len(fields) == 1:
                by_position.append(class_id)
                continue
            name = fields[0]
            if name in line_of:
                raise ValueError(f"{where}: {name} is already listed on line {line_of[name]}")
            if name not in known:
                raise ValueError(f"{where}: {name!r} is not a validation image in the folder")
            line_of[name] = number
            by_name[name] = class_id
    listed = len(by_position) or len(by_name)
    if listed != len(names):
        raise ValueError(
            f"{path.name} gives {listed:,} classes; the folder has {len(names):,} "
            "validation images (one class per image)"
        )
    return by_name or dict(zip(names, by_position, strict=True))


def seed_problem(seed: str) -> str | None:
    """Why ``seed`` cannot be a private benchmark seed, or ``None`` (never quotes it)."""
    if len(seed) < SEED_MIN_CHARACTERS:
        return (
            f"the seed has {len(seed)} characters; a private seed needs at least "
            f"{SEED_MIN_CHARACTERS} (for example: openssl rand -hex 32)"
        )
    if len(set(seed)) < SEED_MIN_CHARACTERS // 4:
        return "the seed repeats too few characters to be a random one"
    return None


def draw_members(seed: str, names: list[str], count: int) -> list[str]:
    """The ``count`` names with the smallest HMAC-SHA256 keyed by ``seed``, in name order.

    Deterministic for a seed (no library's random generator is involved, so any Python,
    or ``openssl dgst -sha256 -hmac``, recomputes it), and unrelated between seeds.
    """
    if not 0 < count <= len(names):
        raise ValueError(f"cannot draw {count:,} of {len(names):,} images")
    key = seed.encode()

    def rank(name: str) -> bytes:
        return hmac.new(key, name.encode(), hashlib.sha256).digest()

    return sorted(sorted(names, key=rank)[:count])


@dataclass(frozen=True)
class ImagenetCohorts:
    official: Cohort
    practice: Cohort
    reference_sha256: str


def _sha256_of_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def imagenet_import(
    *,
    benchmark: Benchmark,
    images_dir: Path,
    reference_file: Path,
    seed: str,
    official_count: int,
    practice_seed: str,
    practice_count: int,
    universe: int = IMAGENET_VAL_COUNT,
) -> ImagenetCohorts:
    """Draw and import both cohorts of ``benchmark`` from the ImageNet validation set.

    ``images_dir`` holds the ``universe`` validation JPEGs (see :func:`imagenet_val_files`)
    and ``reference_file`` the reference class of each (:func:`read_reference_file`).
    The official cohort is drawn with the private ``seed``, the practice cohort
    independently with the public ``practice_seed`` (see the module doc), so the two may
    share images: the practice draw says nothing about the official one. Canonical names
    are the bare file names, wherever in ``images_dir`` a file sits.

    All or nothing: both cohorts are copied and hashed off the transaction, then replace
    the benchmark's two cohorts in one transaction, which also records a
    ``cohort.import`` audit event per cohort (the official one with the sha256 of the
    seed, never the seed). Raises ``ValueError`` (one line, never quoting the seed) for
    bad input or when either existing cohort has been used by a run.
    """
    if problem := seed_problem(seed):
        raise ValueError(problem)
    if practice_seed == seed:
        raise ValueError("the practice seed is published: it must differ from the private seed")
    if not practice_seed:
        raise ValueError("the practice seed is empty")
    for what, count in (("official", official_count), ("practice", practice_count)):
        if count < 1:
            raise ValueError(f"the {what} cohort needs at least one image, not {count}")
        if count > universe:
            raise ValueError(
                f"the {what} cohort cannot have {count:,} images: the validation set has "
                f"{universe:,}"
            )
    files = imagenet_val_files(images_dir, universe)
    names = list(files)
    reference = read_reference_file(reference_file, names)
    reference_sha256 = _sha256_of_file(reference_file)
    draws = {
        Cohort.OFFICIAL: draw_members(seed, names, official_count),
        Cohort.PRACTICE: draw_members(practice_seed, names, practice_count),
    }
    provenance: dict[str, dict[str, Any]] = {
        Cohort.OFFICIAL: {"seed_sha256": hashlib.sha256(seed.encode()).hexdigest()},
        Cohort.PRACTICE: {"seed": practice_seed},
    }

    placement = _Placement(folders=[])
    with placement.undone_on_failure():
        staged = {
            kind: _stage([_Source(name, files[name], reference[name]) for name in drawn], placement)
            for kind, drawn in draws.items()
        }
        cohorts: dict[str, Cohort] = {}
        with transaction.atomic():
            for kind, (staging, members) in staged.items():
                cohort = _install(
                    benchmark=benchmark,
                    kind=kind,
                    staging=staging,
                    members=members,
                    placement=placement,
                    public_seed=practice_seed if kind == Cohort.PRACTICE else "",
                )
                audit_record(
                    actor=None,
                    action="cohort.import",
                    target=f"cohort:{cohort.pk}",
                    details={
                        "benchmark": benchmark.slug,
                        "kind": kind,
                        "members": len(members),
                        "source": f"ImageNet validation, {universe} images",
                        "reference_sha256": reference_sha256,
                        **provenance[kind],
                    },
                )
                cohorts[kind] = cohort
    return ImagenetCohorts(
        official=cohorts[Cohort.OFFICIAL],
        practice=cohorts[Cohort.PRACTICE],
        reference_sha256=reference_sha256,
    )


def cohort_change(
    *, cohort: Cohort, benchmark: Benchmark, kind: str, actor: Any, origin: Origin = NOWHERE
) -> Cohort:
    """Move an unused cohort to another benchmark or kind, recording ``cohort.change``.

    The event's details map each changed field to ``[old, new]`` (the benchmark by slug);
    asking for the values it already has records nothing. Raises ``CohortFrozen`` (a
    ``ValidationError``) once any run has used the cohort, and ``ValidationError`` for a
    kind it cannot take (unknown, or already another cohort's on that benchmark).

    Locking: the cohort's row is locked ``FOR UPDATE`` before the runs are counted, so a
    run being staged on it meanwhile (its foreign key locks the row ``FOR KEY SHARE``)
    either commits first and is seen, or waits until the change is committed.
    """
    with transaction.atomic():
        current = Cohort.objects.select_for_update().select_related("benchmark").get(pk=cohort.pk)
        old = {"benchmark": current.benchmark.slug, "kind": current.kind}
        new = {"benchmark": benchmark.slug, "kind": kind}
        changes = {name: [old[name], new[name]] for name in old if old[name] != new[name]}
        if changes:
            current.benchmark, current.kind = benchmark, kind
            if kind != Cohort.PRACTICE:
                current.public_seed = ""  # an official cohort's draw stays private
            current.refuse_frozen_change()
            current.full_clean()  # an unknown kind, or one the benchmark already has
            current.save(update_fields=["benchmark", "kind", "public_seed"])
            audit_record(
                actor=actor,
                action="cohort.change",
                target=f"cohort:{current.pk}",
                origin=origin,
                details={"changes": changes},
            )
    cohort.refresh_from_db()
    return cohort
