"""Write-ups (docs/rules.md, "Write-ups"): an entrant may attach one PDF to one of their
graded official submissions on a benchmark; staff read it (audited), everyone reads it once
the entrant makes it public.

One per entrant per benchmark: uploading again replaces the file and may move it to
another of their graded submissions (the earlier one then has none).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from portal import errors, storage
from portal.audit.services import NOWHERE, Origin, audit_record
from portal.contests.models import Benchmark
from portal.standings.models import WriteUp
from portal.submissions.models import Submission

PDF_MAGIC = b"%PDF-"
VIEW_WRITEUP = "standings.view_writeup"
GRADED_STATUSES = (Submission.PASSED, Submission.FAILED)


def max_bytes() -> int:
    return int(settings.PODIUM_WRITEUP_MAX_BYTES)


def own_graded_submission(entrant: Any, submission_id: int) -> Submission:
    """The entrant's submission (``not_found`` for anyone else's), checked to be graded."""
    submission = (
        Submission.objects.select_related("benchmark")
        .filter(pk=submission_id, entrant_id=entrant.pk)
        .first()
    )
    if submission is None:
        raise errors.NotFound("No such submission.")
    return submission


def _check_graded(submission: Submission) -> None:
    if submission.kind != Submission.OFFICIAL:
        raise errors.InvalidParameter(
            f"Submission {submission.pk} is a practice submission; "
            "a write-up goes with a graded official submission."
        )
    if submission.disqualified_at is not None or submission.status not in GRADED_STATUSES:
        state = "disqualified" if submission.disqualified_at else submission.status
        raise errors.InvalidParameter(
            f"Submission {submission.pk} is not graded (it is {state}); a write-up goes with "
            "an official submission that passed or failed on accuracy."
        )


def check_pdf(path: Path) -> int:
    """The file's size, once it is known to be a PDF within the limit."""
    size = path.stat().st_size
    limit = max_bytes()
    if size > limit:
        raise errors.ArchiveTooLarge(
            f"The write-up is {size:,} bytes; a write-up may be at most {limit:,} bytes."
        )
    with path.open("rb") as handle:
        head = handle.read(len(PDF_MAGIC))
    if head != PDF_MAGIC:
        raise errors.InvalidParameter("The write-up must be a PDF (a file starting with %PDF-).")
    return size


def writeup_put(
    *,
    entrant: Any,
    submission_id: int,
    upload: Path,
    file_name: str,
    public: bool,
    now: dt.datetime | None = None,
) -> WriteUp:
    """Attach ``upload`` (a PDF) to the entrant's graded submission as their write-up on its
    benchmark, replacing the one they had there (on this or another submission).

    Refuses, changing nothing: another entrant's or an unknown submission (``not_found``);
    a practice, ungraded or disqualified submission, or a file that is not a PDF
    (``invalid_parameter``); a file over ``PODIUM_WRITEUP_MAX_BYTES``
    (``archive_too_large``). Holds the entrant's user row lock, so two uploads at once
    apply one after the other.
    """
    now = now or timezone.now()
    submission = own_graded_submission(entrant, submission_id)
    _check_graded(submission)
    size = check_pdf(upload)
    digest = hashlib.sha256()
    target = storage.writeup_path(submission.benchmark_id, int(entrant.pk))
    storage.ensure_dir(target.parent)
    with (
        tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as copy,
        upload.open("rb") as source,
    ):
        while block := source.read(1 << 20):
            digest.update(block)
            copy.write(block)
    try:
        with transaction.atomic():
            list(
                get_user_model()
                .objects.select_for_update(no_key=True)
                .filter(pk=entrant.pk)
                .values_list("pk", flat=True)
            )
            previous = (
                WriteUp.objects.filter(benchmark_id=submission.benchmark_id, entrant=entrant)
                .values_list("submission_id", flat=True)
                .first()
            )
            writeup, _ = WriteUp.objects.update_or_create(
                benchmark_id=submission.benchmark_id,
                entrant=entrant,
                defaults={
                    "submission": submission,
                    "file_name": (file_name or "write-up.pdf")[:200],
                    "size_bytes": size,
                    "sha256": digest.hexdigest(),
                    "public": public,
                    "uploaded_at": now,
                },
            )
            audit_record(
                actor=entrant,
                action="writeup.upload",
                target=f"submission:{submission.pk}",
                details={"replaced_submission": previous, "public": public, "bytes": size},
            )
            os.replace(copy.name, target)
    finally:
        Path(copy.name).unlink(missing_ok=True)
    return writeup


def writeup_publish(*, entrant: Any, submission_id: int, public: bool) -> WriteUp:
    """Make the entrant's write-up public or private again (``not_found`` without one)."""
    submission = own_graded_submission(entrant, submission_id)
    with transaction.atomic():
        writeup = WriteUp.objects.select_for_update().filter(submission=submission).first()
        if writeup is None:
            raise errors.NotFound(f"Submission {submission_id} has no write-up.")
        if writeup.public != public:
            writeup.public = public
            writeup.save(update_fields=["public"])
            audit_record(
                actor=entrant,
                action="writeup.publish" if public else "writeup.unpublish",
                target=f"submission:{submission.pk}",
            )
    return writeup


def writeup_delete(*, entrant: Any, submission_id: int) -> None:
    """Remove the entrant's write-up of this submission, file and all."""
    submission = own_graded_submission(entrant, submission_id)
    with transaction.atomic():
        deleted, _ = WriteUp.objects.filter(submission=submission).delete()
        if not deleted:
            raise errors.NotFound(f"Submission {submission_id} has no write-up.")
        audit_record(actor=entrant, action="writeup.delete", target=f"submission:{submission.pk}")
        storage.writeup_path(submission.benchmark_id, int(entrant.pk)).unlink(missing_ok=True)


def writeup_for_reader(
    *, submission_id: int, reader: Any, reason: str = "", origin: Origin = NOWHERE
) -> WriteUp:
    """The write-up of a submission as ``reader`` may read it: their own; a public one;
    staff with ``standings.view_writeup`` giving a reason (audited before it is read).
    Anything else, and a submission without one, is ``not_found``; staff without the
    permission get ``permission_denied``."""
    writeup = WriteUp.objects.filter(submission_id=submission_id).first()
    if writeup is None:
        raise errors.NotFound("No such write-up.")
    if reader is not None and reader.is_authenticated and writeup.entrant_id == reader.pk:
        return writeup
    if reader is not None and reader.is_authenticated and reader.is_staff:
        from portal.submissions.staff import staff_permission_check

        staff_permission_check(reader, VIEW_WRITEUP)
        if writeup.public and not reason.strip():
            return writeup
        if not reason.strip():
            raise errors.InvalidParameter(
                "Staff must give a reason (?reason=...) to read a write-up that is not public."
            )
        audit_record(
            actor=reader,
            action="writeup.download",
            target=f"submission:{submission_id}",
            origin=origin,
            reason=reason.strip(),
        )
        return writeup
    if writeup.public:
        return writeup
    raise errors.NotFound("No such write-up.")


def writeup_open(writeup: WriteUp) -> IO[bytes]:
    try:
        return storage.writeup_path(writeup.benchmark_id, writeup.entrant_id).open("rb")
    except FileNotFoundError as exc:
        raise errors.NotFound("This write-up's file is no longer kept.") from exc


def public_writeups(benchmark: Benchmark) -> dict[int, WriteUp]:
    """The benchmark's public write-ups, by entrant id. One query."""
    return {
        w.entrant_id: w
        for w in WriteUp.objects.filter(benchmark=benchmark, public=True).select_related("entrant")
    }


def copy_upload(handle: IO[bytes], into: Path) -> None:
    with into.open("wb") as out:
        shutil.copyfileobj(handle, out)
