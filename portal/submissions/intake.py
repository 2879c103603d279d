"""Accepting an upload (the web side): the checks that come before anything is
charged, then, in one transaction, the submission, its attempt charged on the ledger,
its source file in place and its build enqueued.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from podium_policy import archives
from portal.contests import rules
from portal.contests.hardware import class_missing_pins
from portal.contests.kinds import timed_path_check
from portal.contests.models import Benchmark, Cohort
from portal.core import errors, jobs, storage
from portal.environments.models import Environment
from portal.environments.selectors import environment_usable_check
from portal.environments.services import entrant_check_build_slots, entrant_check_verified
from portal.submissions.attempts import attempt_charge, quota_for
from portal.submissions.models import Submission
from portal.submissions.services import cohort_kind_for, event_record
from portal.teams.locks import lock_identity
from portal.teams.selectors import identity_of, teammate_ids

SOURCE_FILE = "source.archive"


def source_path(submission: Submission) -> Path:
    return storage.submission_dir(submission.pk) / SOURCE_FILE


def _place_file(src: Path, dest: Path) -> None:
    """Put the uploaded file in its final place without holding it in memory."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def _check_size(benchmark: Benchmark, size: int) -> None:
    if size > benchmark.max_upload_bytes:
        raise errors.ArchiveTooLarge(
            f"The archive is {size:,} bytes; this benchmark accepts at most "
            f"{benchmark.max_upload_bytes:,} bytes."
        )


def _check_acceptable(*, entrant: Any, benchmark: Benchmark, kind: str, now: dt.datetime) -> None:
    """The checks of an upload that read a few rows: the window is open (and, for a GPU
    class, every pin of the class is set), the benchmark has the cohort to score it on,
    an attempt of ``kind`` is left today and a build slot is free. Called once before
    the archive is inspected (so a refused upload costs no inspection) and again holding
    the entrant's row lock, where it decides."""
    window = rules.window_state(now, benchmark.opens_at, benchmark.closes_at)
    if window == "upcoming" and kind != Submission.PRACTICE:
        raise errors.WindowNotOpen(
            f"Uploads open at {benchmark.opens_at.isoformat()}; try again then. Practice "
            "runs are accepted before (their own daily allowance)."
        )
    if window == "closed":
        raise errors.WindowClosed("This benchmark has closed; no uploads are accepted.")
    unpinned = class_missing_pins(benchmark.hardware_class_id)
    if unpinned:
        raise errors.WindowNotOpen(
            f"This benchmark has not opened: its hardware class {benchmark.hardware_class_id} "
            f"has no pinned {', '.join(unpinned)} version yet, so no scoring host could "
            "be checked against it. Nothing was charged; try again once the organizers "
            "have pinned it."
        )
    cohort_kind = cohort_kind_for(kind)
    if not Cohort.objects.filter(benchmark=benchmark, kind=cohort_kind).exists():
        raise errors.NoCohort(
            f"This benchmark has no {cohort_kind} cohort yet, so {kind} uploads cannot be "
            "scored; nothing was charged. Try again once the organizers have published it."
        )
    identity = identity_of(benchmark.pk, entrant.pk)
    quota = quota_for(entrant, benchmark, kind, now, identity=identity)
    if quota.remaining_today <= 0:
        teamed = identity.team_id is not None
        raise errors.QuotaExhausted(
            f"{'Your team has' if teamed else 'You have'} used all {quota.per_day} {kind} "
            "attempts of today "
            f"({benchmark.attempt_timezone}); the next one is available at "
            f"{quota.resets_at.isoformat()}."
        )
    entrant_check_build_slots(entrant_id=entrant.pk, benchmark=benchmark)


def submission_check_upload(*, benchmark: Benchmark, path: Path, size: int) -> str:
    """Validate an uploaded archive before anything is charged; return its format.

    The costly check of an upload (``archives.inspect_archive`` reads every member of an
    archive of up to ``max_upload_bytes``): :func:`submission_accept` calls it last,
    after every check that reads only a few rows."""
    _check_size(benchmark, size)
    try:
        fmt = archives.detect_format(path)
        archives.inspect_archive(path, fmt)
    except archives.ArchiveError as exc:
        raise errors.InvalidArchive(str(exc)) from exc
    return fmt


def submission_accept(
    *,
    entrant: Any,
    benchmark: Benchmark,
    environment: Environment,
    source_file: Path,
    source_name: str,
    kind: str = Submission.OFFICIAL,
    now: dt.datetime | None = None,
    boundary_confirmed: bool = False,
) -> Submission:
    """Accept an upload as an official attempt (or a practice run) and charge it.

    A metered-estimation benchmark takes no timed upload (``invalid_parameter``, checked
    before anything else: its estimators are entries, ``portal.estimation``). An official
    upload to a benchmark that states a validation-data boundary must confirm it
    (``boundary_confirmed``; ``invalid_parameter`` otherwise, checked next, nothing
    charged); the submission keeps the SHA-256 of the text confirmed.

    The cheap checks come first, so that a refused upload costs the host no archive
    inspection: a verified email address, the environment, the archive's size, then
    :func:`_check_acceptable` (the window, the cohort of ``kind``: ``no_cohort``
    without one, the day's allowance, a free build slot). Only then is the archive
    inspected (nothing charged when it is bad). Then, holding a lock on the entrant's
    row and, in a team, on the team's row (:func:`lock_identity`), so that concurrent
    uploads of one allowance serialize, :func:`_check_acceptable` decides again (the
    earlier pass only spares the inspection: an attempt spent meanwhile is refused
    here), the submission and its ledger charge are written, and the file is put in
    place; a refusal leaves no file and no ledger row.
    """
    timed_path_check(benchmark, "submission")
    now = now or timezone.now()
    if kind not in (Submission.OFFICIAL, Submission.PRACTICE):
        raise errors.InvalidParameter("kind must be 'official' or 'practice'.")
    boundary = ""
    if kind == Submission.OFFICIAL and benchmark.validation_boundary.strip():
        if not boundary_confirmed:
            raise errors.InvalidParameter(
                "This benchmark's validation-data boundary must be confirmed with every "
                "official upload: read it on the rules page, then confirm it (the checkbox "
                "on the upload page, confirm_boundary=true in the API, podium submit "
                "--confirm-boundary). Nothing was charged."
            )
        boundary = rules.boundary_sha256(benchmark.validation_boundary)
    entrant_check_verified(entrant=entrant)
    # Its own benchmark's or a teammate's, or carried over from an earlier phase.
    environment_usable_check(entrant=entrant, benchmark=benchmark, environment=environment)
    if environment.status != Environment.READY:
        raise errors.EnvironmentNotReady(
            f"Environment '{environment.name}' is {environment.status}; "
            "submit once its build is ready."
        )
    size = source_file.stat().st_size
    _check_size(benchmark, size)
    _check_acceptable(entrant=entrant, benchmark=benchmark, kind=kind, now=now)
    fmt = submission_check_upload(benchmark=benchmark, path=source_file, size=size)
    sha256 = storage.sha256_file(source_file)
    dest: Path | None = None
    try:
        with transaction.atomic():
            team = lock_identity(entrant_id=entrant.pk, benchmark=benchmark)
            if environment.owner_id not in teammate_ids(benchmark.pk, entrant.pk):
                raise errors.NotFound("No such environment.")  # the owner left the team
            _check_acceptable(entrant=entrant, benchmark=benchmark, kind=kind, now=now)
            submission = Submission.objects.create(
                entrant=entrant,
                benchmark=benchmark,
                environment=environment,
                kind=kind,
                status=Submission.ACCEPTED,
                submitted_at=now,
                source_name=Path(source_name).name[:255] or "source",
                source_format=fmt,
                source_sha256=sha256,
                source_bytes=source_file.stat().st_size,
                environment_image_digest=environment.image_digest,
                boundary_sha256=boundary,
            )
            attempt_charge(
                submission=submission, team_id=None if team is None else team.pk, now=now
            )
            event_record(submission.pk, Submission.ACCEPTED)
            dest = source_path(submission)
            _place_file(source_file, dest)
            jobs.enqueue(jobs.BUILD_SUBMISSION, submission.pk)
    except BaseException:
        if dest is not None:
            dest.unlink(missing_ok=True)
        raise
    return submission
