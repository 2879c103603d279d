"""The practice cohort as one .tar.gz, built once per cohort and then served as a file;
an estimation phase's public suite likewise (at the end).

Layout: ``answers.tsv`` (``path<TAB>class`` per image, ``path`` relative to ``images/``,
the same relation a run's manifest has to IMAGE_ROOT) and ``images/<canonical name>``.
Only ever called for a practice cohort: the official one is never handed out.

The archive is kept under ``<data dir>/practice/<cohort id>-<digest>.tar.gz``, where the
digest covers every member's name, content hash and answer: a re-imported cohort (a new
id) or a changed member or answer (a new digest) names a file that does not exist yet,
so it is built again; otherwise every download reads the same file.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
import tempfile
import time
from pathlib import Path
from typing import IO

from portal.contests.models import Cohort, CohortItem
from portal.core import errors, storage
from portal.estimation.models import Suite
from portal.estimation.services import folder_sha256


def practice_items(cohort: Cohort) -> list[CohortItem]:
    if cohort.kind != Cohort.PRACTICE:  # the official cohort is never handed out
        raise errors.NotFound("No such cohort.")
    return list(cohort.items.order_by("canonical_name"))


def answers_tsv(items: list[CohortItem]) -> bytes:
    return "".join(f"{item.canonical_name}\t{item.reference_class}\n" for item in items).encode()


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Members carry no server user names, ids or odd modes."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if info.isdir() else 0o644
    return info


ARCHIVE_NAME = re.compile(r"(?P<cohort_id>\d+)-(?P<digest>[0-9a-f]{64})\.tar\.gz")


def practice_dir() -> Path:
    """Where the built practice archives are kept (public content; never a build's input)."""
    return storage.data_dir() / "practice"


def practice_digest(items: list[CohortItem]) -> str:
    """sha256 over each member's canonical name, content hash and answer, in name order."""
    digest = hashlib.sha256()
    for item in sorted(items, key=lambda item: item.canonical_name):
        digest.update(f"{item.canonical_name}\t{item.sha256}\t{item.reference_class}\n".encode())
    return digest.hexdigest()


def practice_archive_path(cohort: Cohort, items: list[CohortItem]) -> Path:
    return practice_dir() / f"{cohort.pk}-{practice_digest(items)}.tar.gz"


def practice_archive_open(cohort: Cohort) -> IO[bytes]:
    """The practice archive of ``cohort``, opened for reading; built first if it is missing.

    Safe to call concurrently: a build writes a temporary file beside the archive and
    renames it into place, so a reader sees either no archive or a whole one (two
    simultaneous first requests may both build; the second rename wins, same content).
    An open handle stays readable even if a newer build replaces the file meanwhile.
    """
    items = practice_items(cohort)
    path = practice_archive_path(cohort, items)
    try:
        return path.open("rb")
    except FileNotFoundError:
        pass
    practice_archive_build(cohort, items, path)
    _remove_stale_archives(keep=path)
    return path.open("rb")


def _remove_stale_archives(*, keep: Path) -> None:
    """Drop the archives no longer served: another digest of ``keep``'s cohort, or a cohort
    that is gone (re-imported under a new id)."""
    current = {
        str(pk) for pk in Cohort.objects.filter(kind=Cohort.PRACTICE).values_list("pk", flat=True)
    }
    keep_id = ARCHIVE_NAME.fullmatch(keep.name)
    for path in practice_dir().iterdir():
        match = ARCHIVE_NAME.fullmatch(path.name)
        if match is None or path == keep:
            continue
        if match["cohort_id"] not in current or (
            keep_id is not None and match["cohort_id"] == keep_id["cohort_id"]
        ):
            path.unlink(missing_ok=True)


def practice_archive_build(cohort: Cohort, items: list[CohortItem], path: Path) -> None:
    """Write the .tar.gz of the practice images and their answers to ``path`` (atomically)."""
    folder = storage.cohort_dir(cohort.pk)
    storage.ensure_dir(path.parent)
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed or renamed below
        dir=path.parent, prefix=".building-", suffix=".tar.gz", delete=False
    )
    try:
        with tarfile.open(fileobj=handle, mode="w:gz", compresslevel=1) as archive:
            answers = answers_tsv(items)
            info = tarfile.TarInfo("answers.tsv")
            info.size, info.mtime = len(answers), int(time.time())
            archive.addfile(_anonymous(info), io.BytesIO(answers))
            for item in items:
                archive.add(
                    folder / item.canonical_name,
                    arcname=f"images/{item.canonical_name}",
                    recursive=False,
                    filter=_anonymous,
                )
        handle.close()
        os.chmod(handle.name, 0o644)
        os.replace(handle.name, path)
    except FileNotFoundError as exc:
        handle.close()
        Path(handle.name).unlink(missing_ok=True)
        raise errors.NotFound("The practice cohort's files are not available yet.") from exc
    except BaseException:
        handle.close()
        Path(handle.name).unlink(missing_ok=True)
        raise


# The public suite of a metered-estimation phase ------------------------------------------


def suite_archives_dir() -> Path:
    """Where the built public-suite archives are kept (public content)."""
    return storage.data_dir() / "estimation" / "downloads"


def suite_archive_open(suite: Suite) -> IO[bytes]:
    """The suite's dataset folder as a .tar.gz, opened for reading: its files relative to
    the folder (``metadata.json``, ``data/...``), so that the folder it unpacks into is a
    whestbench dataset. Built once per suite and dataset digest (a suite generated again
    is a new row) and then served as a file; written beside its place and renamed into it,
    as the practice archive is."""
    folder = storage.suite_dir(suite.pk)
    if not folder.is_dir():
        raise errors.NoCohort("The public suite's files are not available yet.")
    digest = suite.dataset_sha256 or folder_sha256(folder)
    path = suite_archives_dir() / f"{suite.pk}-{digest}.tar.gz"
    try:
        return path.open("rb")
    except FileNotFoundError:
        pass
    storage.ensure_dir(path.parent)
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed or renamed below
        dir=path.parent, prefix=".building-", suffix=".tar.gz", delete=False
    )
    try:
        with tarfile.open(fileobj=handle, mode="w:gz", compresslevel=6) as archive:
            for member in sorted(p for p in folder.rglob("*") if p.is_file()):
                if member.is_symlink():
                    continue
                archive.add(
                    member,
                    arcname=member.relative_to(folder).as_posix(),
                    recursive=False,
                    filter=_anonymous,
                )
        handle.close()
        os.chmod(handle.name, 0o644)
        os.replace(handle.name, path)
    except BaseException:
        handle.close()
        Path(handle.name).unlink(missing_ok=True)
        raise
    for stale in path.parent.glob(f"{suite.pk}-*.tar.gz"):
        if stale != path:
            stale.unlink(missing_ok=True)
    return path.open("rb")
