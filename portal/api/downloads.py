"""The practice cohort as one .tar.gz, built on the fly into an anonymous temporary file.

Layout: ``answers.tsv`` (``path<TAB>class`` per image, ``path`` relative to ``images/``,
the same relation a run's manifest has to IMAGE_ROOT) and ``images/<canonical name>``.
Only ever called for a practice cohort: the official one is never handed out.
"""

from __future__ import annotations

import io
import tarfile
import tempfile
import time
from typing import IO

from portal import errors, storage
from portal.contests.models import Cohort, CohortItem


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


def practice_archive_open(cohort: Cohort) -> IO[bytes]:
    """A readable .tar.gz of the practice images and their answers; closing it deletes it."""
    items = practice_items(cohort)
    folder = storage.cohort_dir(cohort.pk)
    handle = tempfile.TemporaryFile(dir=storage.upload_tmp_dir())  # noqa: SIM115 - returned open
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
    except FileNotFoundError as exc:
        handle.close()
        raise errors.NotFound("The practice cohort's files are not available yet.") from exc
    except BaseException:
        handle.close()
        raise
    handle.seek(0)
    return handle
