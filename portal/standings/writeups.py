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
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import transaction
from django.http import FileResponse
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.contests.models import Benchmark
from portal.core import errors, storage
from portal.standings.models import WriteUp
from portal.submissions.models import Submission

PDF_MAGIC = b"%PDF-"
VIEW_WRITEUP = "standings.view_writeup"
PUBLIC_CACHE_S = 15 * 60
# An entrant's file on the portal's own origin: never shown in the page, never run.
WRITEUP_HEADERS = {
    "Content-Security-Policy": "sandbox; default-src 'none'",
    "X-Content-Type-Options": "nosniff",
}


def max_bytes() -> int:
    return int(settings.PODIUM_WRITEUP_MAX_BYTES)


def owned_submission(entrant: Any, submission_id: int) -> Submission:
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
    if submission.disqualified_at is not None or submission.status not in Submission.GRADED:
        state = "disqualified" if submission.disqualified_at else submission.status
        raise errors.InvalidParameter(
            f"Submission {submission.pk} is not graded (it is {state}); a write-up goes with "
            "an official submission that passed or failed on accuracy."
        )


def _refuse_size(size: int) -> None:
    limit = max_bytes()
    if size > limit:
        raise errors.ArchiveTooLarge(
            f"The write-up is {size:,} bytes; a write-up may be at most {limit:,} bytes."
        )


def writeup_put(
    *,
    entrant: Any,
    submission_id: int,
    upload: IO[bytes],
    file_name: str,
    public: bool,
    now: dt.datetime | None = None,
) -> WriteUp:
    """Attach ``upload`` (a PDF, read from its start) to the entrant's graded submission as
    their write-up on its benchmark, replacing the one they had there (on this or another
    of their submissions: that one then has none).

    Refuses, changing nothing: another entrant's or an unknown submission (``not_found``);
    a practice, ungraded or disqualified submission, or a file that does not start with
    ``%PDF-`` (``invalid_parameter``); a file over ``PODIUM_WRITEUP_MAX_BYTES``
    (``archive_too_large``). Holds the entrant's user row lock, so two uploads at once
    apply one after the other.
    """
    now = now or timezone.now()
    submission = owned_submission(entrant, submission_id)
    _check_graded(submission)
    head = upload.read(len(PDF_MAGIC))
    if head != PDF_MAGIC:
        raise errors.InvalidParameter("The write-up must be a PDF (a file starting with %PDF-).")
    target = storage.writeup_path(submission.benchmark_id, int(entrant.pk))
    storage.ensure_dir(target.parent)
    digest = hashlib.sha256(head)
    size = len(head)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as copy:
        copy.write(head)
        while block := upload.read(1 << 20):
            size += len(block)
            if size > max_bytes():
                break
            digest.update(block)
            copy.write(block)
    try:
        _refuse_size(size)
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
            _forget_public(submission.benchmark_id)
    finally:
        Path(copy.name).unlink(missing_ok=True)
    return writeup


def writeup_publish(*, entrant: Any, submission_id: int, public: bool) -> WriteUp:
    """Make the entrant's write-up public or private again (``not_found`` without one)."""
    submission = owned_submission(entrant, submission_id)
    with transaction.atomic():
        writeup = WriteUp.objects.select_for_update().filter(submission=submission).first()
        if writeup is None:
            raise errors.NotFound(f"Submission {submission_id} has no write-up.")
        if writeup.public != public:
            writeup.public = public
            writeup.save(update_fields=["public"])
            _forget_public(submission.benchmark_id)
            audit_record(
                actor=entrant,
                action="writeup.publish" if public else "writeup.unpublish",
                target=f"submission:{submission.pk}",
            )
    return writeup


def writeup_delete(*, entrant: Any, submission_id: int) -> None:
    """Remove the entrant's write-up of this submission, file and all."""
    submission = owned_submission(entrant, submission_id)
    with transaction.atomic():
        deleted, _ = WriteUp.objects.filter(submission=submission).delete()
        if not deleted:
            raise errors.NotFound(f"Submission {submission_id} has no write-up.")
        audit_record(actor=entrant, action="writeup.delete", target=f"submission:{submission.pk}")
        _forget_public(submission.benchmark_id)
        storage.writeup_path(submission.benchmark_id, int(entrant.pk)).unlink(missing_ok=True)


def writeup_for_reader(
    *,
    submission_id: int,
    reader: Any,
    reason: str = "",
    origin: Origin = NOWHERE,
    reading: bool = False,
) -> WriteUp:
    """The write-up of a submission, if ``reader`` may see it: their own; a public one;
    any, to staff with ``standings.view_writeup`` (403 ``permission_denied`` without it).
    ``reading``: the file itself is wanted; staff reading another entrant's private
    write-up give a reason, audited before it is read (``invalid_parameter`` without).
    Anything else, and a submission without a write-up, is ``not_found``."""
    writeup = (
        WriteUp.objects.select_related("benchmark", "entrant")
        .filter(submission_id=submission_id)
        .first()
    )
    if writeup is None:
        raise errors.NotFound("No such write-up.")
    signed_in = reader is not None and reader.is_authenticated
    if writeup.public or (signed_in and writeup.entrant_id == reader.pk):
        return writeup
    if not (signed_in and reader.is_staff):
        raise errors.NotFound("No such write-up.")
    errors.staff_permission_check(reader, VIEW_WRITEUP)
    if reading:
        reason = reason.strip()
        if not reason:
            raise errors.InvalidParameter(
                "Staff must give a reason (?reason=...) to read a write-up that is not public."
            )
        audit_record(
            actor=reader,
            action="writeup.download",
            target=f"submission:{submission_id}",
            origin=origin,
            reason=reason,
        )
    return writeup


def writeup_open(writeup: WriteUp) -> IO[bytes]:
    try:
        return storage.writeup_path(writeup.benchmark_id, writeup.entrant_id).open("rb")
    except FileNotFoundError as exc:
        raise errors.NotFound("This write-up's file is no longer kept.") from exc


def writeup_response(writeup: WriteUp) -> FileResponse:
    """The write-up's PDF as every route serves it: an attachment (saved, never opened in
    the portal's pages), under a sandboxing Content-Security-Policy that allows nothing
    and ``nosniff``, so that a file which is more than a PDF runs nothing on the portal's
    origin. Raises NotFound when the file is gone."""
    response = FileResponse(
        writeup_open(writeup),
        as_attachment=True,
        filename=writeup.file_name,
        content_type="application/pdf",
    )
    for header, value in WRITEUP_HEADERS.items():
        response[header] = value
    return response


@dataclass(frozen=True)
class PublicWriteUps:
    """A benchmark's public write-ups, as its pages list and mark them."""

    rows: list[WriteUp]  # by entrant's username
    entrants: frozenset[str]  # usernames with one (the board marks their row)
    key: str  # changes with any of them (for the pages' caches)


def _public_key(benchmark_id: int) -> str:
    return f"podium:writeups:{benchmark_id}"


def _forget_public(benchmark_id: int) -> None:
    """Drop the cached list of public write-ups now and once the change is committed (a
    page read between the two would cache the list as it was)."""
    cache.delete(_public_key(benchmark_id))
    transaction.on_commit(lambda: cache.delete(_public_key(benchmark_id)))


def public_writeups(benchmark: Benchmark) -> PublicWriteUps:
    """The benchmark's public write-ups: cached until one of its write-ups changes (no
    query then; one otherwise)."""
    key = _public_key(benchmark.pk)
    found: PublicWriteUps | None = cache.get(key)
    if found is None:
        rows = list(
            WriteUp.objects.filter(benchmark=benchmark, public=True)
            .select_related("entrant")
            .order_by("entrant__username")
        )
        fingerprint = ",".join(f"{w.entrant_id}:{w.submission_id}:{w.sha256[:12]}" for w in rows)
        names = frozenset(w.entrant.get_username() for w in rows)
        found = PublicWriteUps(rows, names, fingerprint)
        cache.set(key, found, PUBLIC_CACHE_S)
    return found
