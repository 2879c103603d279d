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
leak into it.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from django.db import transaction
from django.db.models import ProtectedError

from portal import storage
from portal.audit.services import NOWHERE, Origin, audit_record
from portal.contests.models import Benchmark, Cohort, CohortItem

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
    if kind not in (Cohort.OFFICIAL, Cohort.PRACTICE):
        raise ValueError(f"kind must be {Cohort.OFFICIAL!r} or {Cohort.PRACTICE!r}, not {kind!r}")
    sources = _check_answers(images_dir, answers)

    cohorts_root = storage.ensure_dir(storage.data_dir() / "cohorts")
    staging = Path(tempfile.mkdtemp(prefix=".incoming-", dir=cohorts_root))
    target: Path | None = None
    try:
        staging.chmod(0o755)
        members = []
        for (relative_path, class_id), source in zip(answers, sources, strict=True):
            name = PurePosixPath(relative_path)
            _make_dirs(staging, name.parent)
            sha256 = _copy_and_hash(source, staging.joinpath(*name.parts))
            members.append(_Member(relative_path, sha256, class_id))

        with transaction.atomic():
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
            cohort = Cohort.objects.create(benchmark=benchmark, kind=kind)
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
            os.replace(staging, target)
    except BaseException:
        _remove_tree(staging)
        if target is not None:
            _remove_tree(target)
        raise
    return cohort


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
            current.refuse_frozen_change()
            current.full_clean()  # an unknown kind, or one the benchmark already has
            current.save(update_fields=["benchmark", "kind"])
            audit_record(
                actor=actor,
                action="cohort.change",
                target=f"cohort:{current.pk}",
                origin=origin,
                details={"changes": changes},
            )
    cohort.refresh_from_db()
    return cohort
