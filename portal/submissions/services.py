"""Submission lifecycle: accepting uploads (web side) and every later transition (worker side).

Rules of the road:
- An attempt is charged in the same transaction that accepts the upload, and refunded
  only for platform failures and staff cancellations.
- Every transition is a conditional update plus a timeline event, so running a step
  twice (a redelivered task) changes nothing the second time.
- A verdict is written at most once per run, in the same transaction as the leaderboard.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from portal import archives, errors, jobs, storage
from portal.contests import rules
from portal.contests.models import Benchmark, Cohort, LeaderboardEntry
from portal.environments.models import Environment
from portal.environments.services import (
    BUILD_NETWORK_WAIT_NOTE,
    entrant_check_build_slots,
    entrant_check_verified,
)
from portal.submissions import anomalies, dispatch, hooks, notify, pool
from portal.submissions.leaderboard import leaderboard_refresh_entrant
from portal.submissions.models import (
    AttemptLedger,
    Run,
    Submission,
    SubmissionEvent,
)
from portal.submissions.quota import quota_for

SOURCE_FILE = "source.archive"
PLATFORM_RETRY_NOTE = "platform error, build will be retried"
PLATFORM_RETRY_DELAY_S = 60.0
MACHINE_WAIT_NOTE = "waiting for the scoring machine"
VERIFY_NOTE = "passed; verifying before it ranks: one more run off the board"
# A submission waiting for a scoring host: a score, or the verification of a passed run.


def score_wake(
    *,
    hardware_class: str,
    waits: int = 0,
    countdown: float | None = None,
    priority: int | None = None,
) -> None:
    """Wake a scoring host of ``hardware_class`` (after commit): its class queue's message
    names no submission; the host claims the next waiting one in the fair order
    (``dispatch``). ``waits`` counts the tries of a machine that was not ready. Noted as
    in flight (``dispatch.wake_sent``) for :func:`score_sweep`."""
    jobs.enqueue(
        jobs.SCORE_NEXT,
        hardware_class,
        waits,
        countdown=countdown,
        priority=priority,
        queue=jobs.scoring_queue(hardware_class),
    )
    transaction.on_commit(
        lambda: dispatch.wake_sent(hardware_class, countdown=countdown), robust=True
    )


def score_sweep(now: dt.datetime | None = None) -> list[str]:
    """Celery beat's minute sweep: wake each hardware class again that has something
    waiting for longer than a minute and no wake-up in flight (``dispatch``: why a
    marker and not a wake-up every minute), so a lost wake-up delays its class by about
    a minute at most. Returns the classes woken."""
    woken = [
        hardware_class
        for hardware_class in dispatch.classes_waiting(now=now)
        if not dispatch.wake_in_flight(hardware_class)
    ]
    for hardware_class in woken:
        score_wake(hardware_class=hardware_class, priority=jobs.OFFICIAL_PRIORITY)
    return woken


def score_enqueue(submission_id: int, *, kind: str, verification: bool = False) -> None:
    """One wake-up for a submission that starts waiting for a score (or its verification),
    on its benchmark's class queue, at its priority: official scores first, then
    verifications, then practice."""
    hardware_class = Submission.objects.values_list("benchmark__hardware_class", flat=True).get(
        pk=submission_id
    )
    priority = jobs.score_priority(practice=kind == Submission.PRACTICE, verification=verification)
    score_wake(hardware_class=hardware_class, priority=priority)


def source_path(submission: Submission) -> Path:
    return storage.submission_dir(submission.pk) / SOURCE_FILE


def _event(submission_id: int, status: str, note: str = "") -> None:
    SubmissionEvent.objects.create(
        submission_id=submission_id, status=status, at=timezone.now(), note=note
    )


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()


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


def _cohort_kind(kind: str) -> str:
    """The cohort a submission of ``kind`` is scored on (a campaign's official rounds draw
    their requests from the official cohort too)."""
    return Cohort.PRACTICE if kind == Submission.PRACTICE else Cohort.OFFICIAL


def _check_acceptable(*, entrant: Any, benchmark: Benchmark, kind: str, now: dt.datetime) -> None:
    """The checks of an upload that read a few rows: the window is open, the benchmark
    has the cohort to score it on, an attempt of ``kind`` is left today and a build
    slot is free. Called once before the archive is inspected (so a refused upload costs
    no inspection) and again holding the entrant's row lock, where it decides."""
    window = rules.window_state(now, benchmark.opens_at, benchmark.closes_at)
    if window == "upcoming":
        raise errors.WindowNotOpen(
            f"Uploads open at {benchmark.opens_at.isoformat()}; try again then."
        )
    if window == "closed":
        raise errors.WindowClosed("This benchmark has closed; no uploads are accepted.")
    cohort_kind = _cohort_kind(kind)
    if not Cohort.objects.filter(benchmark=benchmark, kind=cohort_kind).exists():
        raise errors.NoCohort(
            f"This benchmark has no {cohort_kind} cohort yet, so {kind} uploads cannot be "
            "scored; nothing was charged. Try again once the organizers have published it."
        )
    quota = quota_for(entrant, benchmark, kind, now)
    if quota.remaining_today <= 0:
        raise errors.QuotaExhausted(
            f"You have used all {quota.per_day} {kind} attempts of today "
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
) -> Submission:
    """Accept an upload as an official attempt (or a practice run) and charge it.

    The cheap checks come first, so that a refused upload costs the host no archive
    inspection: a verified email address, the environment, the archive's size, then
    :func:`_check_acceptable` (the window, the cohort of ``kind``: ``no_cohort``
    without one, the day's allowance, a free build slot). Only then is the archive
    inspected (nothing charged when it is bad). Then, holding a lock on the entrant's
    row so concurrent uploads serialize, :func:`_check_acceptable` decides again (the
    earlier pass only spares the inspection: an attempt spent meanwhile is refused
    here), the submission and its ledger charge are written, and the file is put in
    place; a refusal leaves no file and no ledger row.
    """
    now = now or timezone.now()
    if kind not in (Submission.OFFICIAL, Submission.PRACTICE):
        raise errors.InvalidParameter("kind must be 'official' or 'practice'.")
    entrant_check_verified(entrant=entrant)
    if environment.owner_id != entrant.pk or environment.benchmark_id != benchmark.pk:
        raise errors.NotFound("No such environment.")
    if environment.status != Environment.READY:
        raise errors.EnvironmentNotReady(
            f"Environment '{environment.name}' is {environment.status}; "
            "submit once its build is ready."
        )
    size = source_file.stat().st_size
    _check_size(benchmark, size)
    _check_acceptable(entrant=entrant, benchmark=benchmark, kind=kind, now=now)
    fmt = submission_check_upload(benchmark=benchmark, path=source_file, size=size)
    sha256 = _sha256_file(source_file)
    dest: Path | None = None
    try:
        with transaction.atomic():
            get_user_model().objects.select_for_update().filter(pk=entrant.pk).first()
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
            )
            AttemptLedger.objects.create(
                entrant=entrant,
                benchmark=benchmark,
                submission=submission,
                kind=kind,
                attempt_day=rules.attempt_day(now, benchmark.attempt_timezone),
                delta=AttemptLedger.CHARGE,
                reason="upload accepted",
                at=now,
            )
            _event(submission.pk, Submission.ACCEPTED)
            dest = source_path(submission)
            _place_file(source_file, dest)
            jobs.enqueue(jobs.BUILD_SUBMISSION, submission.pk)
    except BaseException:
        if dest is not None:
            dest.unlink(missing_ok=True)
        raise
    return submission


# Worker side ----------------------------------------------------------------------


def submission_transition(
    submission_id: int, *, frm: Iterable[str], to: str, note: str = "", **fields: Any
) -> bool:
    """Move a submission from one of ``frm`` to ``to`` (once) and record the event.

    Entering a waiting status stamps ``queued_at`` (the fair order's "oldest first",
    dispatch.py); staying in it (a staff requeue of a lost message) keeps its place.
    Entering a final status (a verdict) mails the entrant once, after the commit
    (``portal.notifications``).
    """
    if to in Submission.WAITING_FOR_SCORE and "queued_at" not in fields:
        fields["queued_at"] = models.Case(
            models.When(status=to, queued_at__isnull=False, then=models.F("queued_at")),
            default=models.Value(timezone.now()),
        )
    with transaction.atomic():
        done = Submission.objects.filter(pk=submission_id, status__in=list(frm)).update(
            status=to, **fields
        )
        if done:
            _event(submission_id, to, note)
            hooks.status_entered(submission_id=submission_id, status=to)
        return bool(done)


def attempt_refund(*, submission: Submission, reason: str) -> bool:
    """Refund the submission's attempt once (platform failure or staff cancellation)."""
    charge = submission.ledger.filter(delta=AttemptLedger.CHARGE).first()
    if charge is None:
        return False
    try:
        with transaction.atomic():
            AttemptLedger.objects.create(
                entrant_id=submission.entrant_id,
                benchmark_id=submission.benchmark_id,
                submission=submission,
                kind=submission.kind,
                attempt_day=charge.attempt_day,
                delta=AttemptLedger.REFUND,
                reason=reason,
                at=timezone.now(),
            )
    except IntegrityError:
        return False  # already refunded
    return True


def submission_build_finished(
    *,
    submission_id: int,
    ok: bool,
    image_tag: str = "",
    image_digest: str = "",
    image_bytes: int | None = None,
    reason: str = "",
) -> bool:
    """building -> queued (and the score enqueued) or -> build_failed (the attempt counts).

    An official submission of a campaign benchmark goes ``bench_queued`` instead, to wait
    for a round (its kind's ``entry_queued``, ``portal.submissions.hooks``: for a campaign,
    ``portal.campaigns.services.campaign_entry_queue``, where duplicates collapse).
    """
    with transaction.atomic():
        if not ok:
            return submission_transition(
                submission_id,
                frm=[Submission.BUILDING],
                to=Submission.BUILD_FAILED,
                note=reason,
                failure_reason=reason,
            )
        submission = Submission.objects.select_related("benchmark").get(pk=submission_id)
        entry = hooks.official_entry(submission)
        if entry is not None:
            done = submission_transition(
                submission_id,
                frm=[Submission.BUILDING],
                to=Submission.BENCH_QUEUED,
                note="built; waiting for a round",
                image_tag=image_tag,
                image_digest=image_digest,
                image_bytes=image_bytes,
                queued_at=timezone.now(),
            )
            return entry.entry_queued(submission) if done else False
        done = submission_transition(
            submission_id,
            frm=[Submission.BUILDING],
            to=Submission.QUEUED,
            image_tag=image_tag,
            image_digest=image_digest,
            image_bytes=image_bytes,
        )
        if done:
            kind = Submission.objects.values_list("kind", flat=True).get(pk=submission_id)
            score_enqueue(submission_id, kind=kind)
        return done


def submission_build_platform_failure(submission_id: int, *, reason: str) -> bool:
    """A platform fault during a submission build: requeue once, then refund.

    The first fault moves building -> accepted (with a timeline note) and enqueues the
    build again after a short delay; a second fault ends the submission
    ``infra_failed`` and refunds its attempt, as a platform failure of a scored run
    does. Safe to call twice: each step is a conditional transition.
    """
    with transaction.atomic():
        earlier_faults = SubmissionEvent.objects.filter(
            submission_id=submission_id,
            status=Submission.ACCEPTED,
            note__startswith=PLATFORM_RETRY_NOTE,
        ).count()
        if earlier_faults == 0:
            done = submission_transition(
                submission_id,
                frm=[Submission.BUILDING],
                to=Submission.ACCEPTED,
                note=f"{PLATFORM_RETRY_NOTE}: {reason}",
            )
            if done:
                jobs.enqueue(jobs.BUILD_SUBMISSION, submission_id, countdown=PLATFORM_RETRY_DELAY_S)
            return done
        done = submission_transition(
            submission_id,
            frm=[Submission.BUILDING],
            to=Submission.INFRA_FAILED,
            note=f"platform failure during the build, attempt refunded: {reason}",
            failure_reason=(
                f"The platform failed twice while building ({reason}); the attempt was refunded."
            ),
        )
        if done:
            attempt_refund(
                submission=Submission.objects.get(pk=submission_id),
                reason=f"platform failure during the build: {reason}",
            )
        return done


def run_claim_next(*, hardware_class: str, lease_s: int, host: str = "") -> Run | None:
    """Claim for ``host`` the next waiting submission of ``hardware_class`` in the fair
    order (``dispatch.lock_next_waiting``: rows other hosts hold are skipped); None when
    nothing waits.

    A submission that :func:`run_claim` refuses (``errors.PodiumError``: a reason of the
    submission's own, not the host's, such as its benchmark having no cohort of its kind
    any more) is ended at once by :func:`submission_unrunnable` and the next one is
    claimed in the same call, so one such submission never holds up its class. Anything
    else raised (the database, a bug) is the host's and propagates, the claim undone.
    """
    while True:
        with transaction.atomic():
            submission = dispatch.lock_next_waiting(hardware_class=hardware_class)
            if submission is None:
                return None
            try:
                with transaction.atomic():
                    return run_claim(int(submission.pk), lease_s=lease_s, host=host)
            except errors.PodiumError as refusal:
                if not submission_unrunnable(int(submission.pk), reason=refusal.detail):
                    raise


def submission_unrunnable(submission_id: int, *, reason: str) -> bool:
    """End a queued submission that no host can run, for a reason that is not the host's
    (``reason``: a refusal's sentence, such as its benchmark having no cohort of its kind
    any more): ``queued -> infra_failed`` (the platform's fault, as after repeated platform
    failures) with a failure reason the entrant reads, and the
    attempt refunded (the platform cannot score it), unless an earlier run of it reached
    a verdict (a staff rescore: that verdict used the attempt and stands, as in
    :func:`run_record_infra_failure`). Staff may rescore it once the cause is fixed.
    False, changing nothing, for a submission that is not ``queued``.
    """
    text = reason.strip().rstrip(".")
    text = f"{text[:1].lower()}{text[1:]}"
    with transaction.atomic():
        submission = Submission.objects.filter(pk=submission_id).first()
        if submission is None:
            return False
        rescore = submission.runs.filter(status=Run.FINISHED).exists()
        outcome = "the earlier verdict stands" if rescore else "the attempt was refunded"
        done = submission_transition(
            submission_id,
            frm=[Submission.QUEUED],
            to=Submission.INFRA_FAILED,
            note=f"cannot be scored, {outcome}: {text}",
            failure_reason=f"The platform cannot score this submission: {text}; {outcome}.",
        )
        if done and not rescore:
            attempt_refund(submission=submission, reason=f"cannot be scored: {text}")
        return done


def run_claim(submission_id: int, *, lease_s: int, host: str = "") -> Run | None:
    """queued -> staging for the submission, creating its next Run. None if already claimed.

    A ``verifying`` submission's queued verification run is claimed instead (queued ->
    staging); the submission itself stays ``verifying`` until that run's verdict.
    """
    with transaction.atomic():
        submission = Submission.objects.select_for_update().filter(pk=submission_id).first()
        if submission is None or submission.status not in Submission.WAITING_FOR_SCORE:
            return None
        if submission.status == Submission.VERIFYING:
            pending = submission.runs.filter(purpose=Run.VERIFY, status=Run.QUEUED).first()
            if pending is None or pool.set_take(pending) is None:
                return None  # no prepared set ready: the claim steps over it (dispatch)
            now = timezone.now()
            Run.objects.filter(pk=pending.pk).update(
                status=Run.STAGING,
                host=host,
                started_at=now,
                lease_expires_at=now + dt.timedelta(seconds=lease_s),
            )
            pending.refresh_from_db()
            return pending
        kind = _cohort_kind(submission.kind)
        cohort = Cohort.objects.filter(benchmark_id=submission.benchmark_id, kind=kind).first()
        if cohort is None:
            raise errors.NoCohort(f"This benchmark has no {kind} cohort to score it on.")
        try_number = submission.runs.count() + 1
        run = Run.objects.create(
            submission=submission,
            cohort=cohort,
            try_number=try_number,
            status=Run.STAGING,
            host=host,
            started_at=timezone.now(),
            lease_expires_at=timezone.now() + dt.timedelta(seconds=lease_s),
        )
        submission_transition(submission_id, frm=[Submission.QUEUED], to=Submission.STAGING)
        return run


def run_mark_running(*, run_id: int, lease_s: int, **fields: Any) -> bool:
    """staging -> running, just before the container starts."""
    with transaction.atomic():
        done = Run.objects.filter(pk=run_id, status=Run.STAGING).update(
            status=Run.RUNNING,
            lease_expires_at=timezone.now() + dt.timedelta(seconds=lease_s),
            **fields,
        )
        if done:
            run = Run.objects.get(pk=run_id)
            submission_transition(
                run.submission_id, frm=[Submission.STAGING], to=Submission.RUNNING
            )
        return bool(done)


def _finish_run(
    run_id: int,
    *,
    status: str,
    reason: str,
    submission_statuses: list[str],
    fields: dict[str, Any],
) -> Run | None:
    """Write a run's verdict once, holding its submission's row lock; the run, or None
    when the submission is no longer in ``submission_statuses`` or the run no longer open.

    Concurrent writers (a redelivered task, the reaper, a staff cancel) serialize on the
    lock, and the conditional update filters on the run's own columns only, which
    PostgreSQL re-checks after waiting for a lock (a filter through a join would be a
    subquery evaluated once, before the wait). Call inside a transaction.
    """
    if status not in (Submission.PASSED, Submission.FAILED, Submission.ERRORED):
        raise ValueError(f"not a verdict: {status}")
    submission_ids = list(Run.objects.filter(pk=run_id).values_list("submission_id", flat=True))
    active = list(
        Submission.objects.select_for_update()
        .filter(pk__in=submission_ids, status__in=submission_statuses)
        .values_list("pk", flat=True)
    )
    if not active:
        return None
    done = Run.objects.filter(pk=run_id, status__in=[Run.STAGING, Run.RUNNING]).update(
        status=Run.FINISHED,
        verdict=status,
        verdict_reason=reason,
        passed=status == Submission.PASSED,
        finished_at=timezone.now(),
        lease_expires_at=None,
        **fields,
    )
    if not done:
        return None
    return Run.objects.select_related("submission__benchmark").get(pk=run_id)


def run_record_verdict(*, run_id: int, status: str, reason: str, **fields: Any) -> bool:
    """Write the run's verdict once, the submission's final status and the leaderboard.

    ``status`` is passed, failed or errored. All in one transaction, holding the
    submission's row lock (see :func:`_finish_run`). A passing official run that must be
    verified first leaves the submission ``verifying`` with a queued verification run.
    """
    with transaction.atomic():
        run = _finish_run(
            run_id,
            status=status,
            reason=reason,
            submission_statuses=[Submission.STAGING, Submission.RUNNING],
            fields=fields,
        )
        if run is None:
            return False
        submission = run.submission
        if submission.kind == Submission.OFFICIAL:
            transaction.on_commit(lambda: anomalies.anomaly_scan_after_commit(run_id))
        if status == Submission.PASSED and _verification_due(run):
            submission_transition(
                submission.pk,
                frm=[Submission.STAGING, Submission.RUNNING],
                to=Submission.VERIFYING,
                note=VERIFY_NOTE,
                failure_reason="",
            )
            _queue_verification(submission)
            return True
        submission_transition(
            submission.pk,
            frm=[Submission.STAGING, Submission.RUNNING],
            to=status,
            note=reason,
            failure_reason="" if status == Submission.PASSED else reason,
        )
        if submission.kind == Submission.OFFICIAL:
            leaderboard_refresh_entrant(
                benchmark=submission.benchmark, entrant_id=submission.entrant_id
            )
        return True


def run_add_overhead(run_id: int, **phases_ms: float) -> None:
    """Add phases (milliseconds) to a run's host overhead: what a host measured after
    the run's record was written (cleaning up and giving the machine back)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is not None:
            run.overhead_ms = {**run.overhead_ms, **phases_ms}
            run.save(update_fields=["overhead_ms"])


def run_record_infra_failure(*, run_id: int, reason: str, **fields: Any) -> bool:
    """A platform fault: requeue once; a second fault in a row ends it ``infra_failed``.

    "In a row" counts from the run before this one, so a staff rescore (whose first run
    is try 2 or later) is also requeued once. The second fault refunds the attempt,
    unless an earlier run of the submission already reached a verdict (a rescore): that
    verdict used the attempt and stands, so nothing is given back.
    """
    with transaction.atomic():
        done = Run.objects.filter(pk=run_id, status__in=[Run.STAGING, Run.RUNNING]).update(
            status=Run.INFRA_FAILED,
            verdict_reason=reason,
            finished_at=timezone.now(),
            lease_expires_at=None,
            **fields,
        )
        if not done:
            return False
        run = Run.objects.select_related("submission").get(pk=run_id)
        submission = run.submission
        if run.purpose == Run.VERIFY:
            _verification_infra_failure(run, reason)
            return True
        active = [Submission.STAGING, Submission.RUNNING]
        earlier = submission.runs.filter(try_number__lt=run.try_number)
        previous = earlier.order_by("-try_number").values_list("status", flat=True).first()
        if previous != Run.INFRA_FAILED:
            if submission_transition(
                submission.pk,
                frm=active,
                to=Submission.QUEUED,
                note=f"platform failure, requeued: {reason}",
            ):
                score_enqueue(submission.pk, kind=submission.kind)
        elif earlier.filter(status=Run.FINISHED).exists():
            submission_transition(
                submission.pk,
                frm=active,
                to=Submission.INFRA_FAILED,
                note=f"platform failure during a rescore: {reason}",
                failure_reason=(
                    f"The platform failed twice while rescoring ({reason}); "
                    "the earlier verdict stands."
                ),
            )
        elif submission_transition(
            submission.pk,
            frm=active,
            to=Submission.INFRA_FAILED,
            note=f"platform failure, attempt refunded: {reason}",
            failure_reason=f"The platform failed twice ({reason}); the attempt was refunded.",
        ):
            attempt_refund(submission=submission, reason=f"platform failure: {reason}")
        return True


# Waiting for the scoring machine (scoring/host/machine.py) ---------------------------------


def submission_machine_waits(submission_id: int) -> int:
    """How many times in a row the queued submission has waited for the scoring machine.

    Counted from the end of its timeline: the consecutive ``queued`` events noted
    :data:`MACHINE_WAIT_NOTE`. Any other event (it was queued again after a platform
    failure, say) starts the count afresh.
    """
    count = 0
    events = SubmissionEvent.objects.filter(submission_id=submission_id).order_by("-at", "-id")
    for status, note in events.values_list("status", "note").iterator():
        if status not in Submission.WAITING_FOR_SCORE or not note.startswith(MACHINE_WAIT_NOTE):
            break
        count += 1
    return count


def submission_wait_for_build_network(*, submission_id: int, retry_in_s: float) -> bool:
    """The build network's rules are not in place: the build.sh build waits.

    Only while the submission is still ``accepted`` (its build not claimed): notes the
    wait on its timeline (once per wait) and enqueues the build again after
    ``retry_in_s``. Nothing is charged or refunded by waiting.
    """
    with transaction.atomic():
        accepted = (
            Submission.objects.select_for_update()
            .filter(pk=submission_id, status=Submission.ACCEPTED)
            .exists()
        )
        if not accepted:
            return False
        last = (
            SubmissionEvent.objects.filter(submission_id=submission_id)
            .order_by("-at", "-id")
            .values_list("note", flat=True)
            .first()
        )
        if last != BUILD_NETWORK_WAIT_NOTE:
            _event(submission_id, Submission.ACCEPTED, BUILD_NETWORK_WAIT_NOTE)
        jobs.enqueue(jobs.BUILD_SUBMISSION, submission_id, countdown=retry_in_s)
    return True


def submission_wait_for_machine(
    *, submission_id: int, reason: str, retry_in_s: float, waits: int
) -> bool:
    """The scoring machine is not ready (a health gate failed, or it is busy): try later.

    Only while the submission is still ``queued`` (or ``verifying``): adds a timeline
    event of that status noting why (the entrant sees it waiting, not failed; nothing is
    charged or refunded) and wakes a host of its class again after ``retry_in_s``
    seconds, numbered ``waits``.
    """
    with transaction.atomic():
        waiting = (
            Submission.objects.select_for_update()
            .filter(pk=submission_id, status__in=Submission.WAITING_FOR_SCORE)
            .values("status", "benchmark__hardware_class")
            .first()
        )
        if waiting is None:
            return False
        _event(submission_id, waiting["status"], f"{MACHINE_WAIT_NOTE}: {reason}")
        score_wake(
            hardware_class=waiting["benchmark__hardware_class"],
            waits=waits,
            countdown=retry_in_s,
        )
    return True


# Verification (docs/rules.md, "Verification before ranking") --------------------------


def _verification_due(run: Run) -> bool:
    """A passing official run that would be its entrant's new best in the top
    ``verify_top`` rows of the stored leaderboard (see ``rules.needs_verification``)."""
    submission = run.submission
    benchmark = submission.benchmark
    if submission.kind != Submission.OFFICIAL or run.purpose != Run.SCORE:
        return False
    if benchmark.verify_top <= 0 or run.wall_time_ns is None:
        return False
    candidate = rules.Candidate(
        entrant_id=submission.entrant_id,
        run_id=int(run.pk),
        submission_id=int(submission.pk),
        wall_time_ns=run.wall_time_ns,
        submitted_at=submission.submitted_at,
    )
    board = [
        rules.Candidate(
            entrant_id=row["entrant_id"],
            run_id=row["run_id"],
            submission_id=row["submission_id"],
            wall_time_ns=row["wall_time_ns"],
            submitted_at=row["submitted_at"],
        )
        for row in LeaderboardEntry.objects.filter(benchmark=benchmark).values(
            "entrant_id", "run_id", "submission_id", "wall_time_ns", "submitted_at"
        )
    ]
    return rules.needs_verification(candidate, board, verify_top=benchmark.verify_top)


def _queue_verification(submission: Submission) -> None:
    """A queued verification run of a ``verifying`` submission, and its message."""
    verification_requeue(submission)
    score_enqueue(submission.pk, kind=submission.kind, verification=True)


def _scored_cohort_id(submission: Submission) -> int:
    """The cohort of the submission's latest scored (not verification) run."""
    cohort_id = (
        submission.runs.filter(purpose=Run.SCORE)
        .exclude(status=Run.QUEUED)
        .order_by("-try_number")
        .values_list("cohort_id", flat=True)
        .first()
    )
    if cohort_id is None:
        raise errors.InvalidParameter("This submission has no scored run to verify.")
    return int(cohort_id)


def official_run(submission: Submission) -> Run | None:
    """The passing scored run that a verification checks (the latest one)."""
    return (
        submission.runs.filter(purpose=Run.SCORE, status=Run.FINISHED, passed=True)
        .order_by("-try_number")
        .first()
    )


def _judged_verifications(submission: Submission, official: Run | None) -> models.QuerySet[Run]:
    """The verification runs judged for ``official`` (those that reached a verdict since
    it), oldest first. A platform fault is no measurement."""
    runs = submission.runs.filter(purpose=Run.VERIFY, status=Run.FINISHED)
    if official is not None:
        runs = runs.filter(try_number__gt=official.try_number)
    return runs.order_by("try_number")


def run_record_verification(*, run_id: int, status: str, reason: str, **fields: Any) -> bool:
    """Write a verification run's verdict, then rank the submission, re-measure or reject.

    The decision is ``rules.verification_decision``'s: a run that did not pass the gate
    rejects at once; timing is judged on the fastest verification run so far against
    the larger of the benchmark's ``verify_tolerance_pct`` and
    ``PODIUM_VERIFY_NOISE_FACTOR`` times the class's noise band (and never less than
    ``PODIUM_VERIFY_SLACK_MS``). Within it, the
    submission ranks (``verifying`` -> ``passed``, with its official time). A timing miss
    queues one more verification run (staged as a fresh permutation) while fewer than
    ``PODIUM_VERIFY_MAX_RUNS`` were judged; after that it ends ``rejected_verification``:
    off the board, the attempt still charged, and staff are told with every run. Each
    run's decision is kept on it (``verification_note``). Written once, holding the
    submission's row lock (see :func:`_finish_run`).
    """
    if not Run.objects.filter(pk=run_id, purpose=Run.VERIFY).exists():
        return False
    with transaction.atomic():
        run = _finish_run(
            run_id,
            status=status,
            reason=reason,
            submission_statuses=[Submission.VERIFYING],
            fields=fields,
        )
        if run is None:
            return False
        submission = run.submission
        official = official_run(submission)
        band_pct = hooks.noise_band_pct(submission.benchmark.hardware_class)
        verdict = rules.verification_decision(
            official_ns=(official.wall_time_ns or 0) if official else 0,
            status=status,
            reason=reason,
            walls_ns=list(
                _judged_verifications(submission, official).values_list("wall_time_ns", flat=True)
            ),
            tolerance_pct=submission.benchmark.verify_tolerance_pct,
            noise_band_pct=band_pct,
            noise_factor=float(settings.PODIUM_VERIFY_NOISE_FACTOR),
            max_runs=int(settings.PODIUM_VERIFY_MAX_RUNS),
            slack_ns=int(settings.PODIUM_VERIFY_SLACK_MS) * 1_000_000,
        )
        which = f"{verdict.run} of {verdict.of}"
        if verdict.action == rules.REMEASURE:
            note = f"re-measuring ({verdict.run + 1} of {verdict.of}): {verdict.reason}"
            Run.objects.filter(pk=run_id).update(
                verification_note=f"timing miss ({which}), re-measuring: {verdict.reason}"
            )
            _event(submission.pk, Submission.VERIFYING, note)
            _queue_verification(submission)
            transaction.on_commit(lambda: anomalies.anomaly_scan_after_commit(run_id))
            return True
        if verdict.action == rules.REJECT:
            problem = verdict.reason
            Run.objects.filter(pk=run_id).update(verification_note=f"rejected ({which}): {problem}")
            submission_transition(
                submission.pk,
                frm=[Submission.VERIFYING],
                to=Submission.REJECTED_VERIFICATION,
                note=f"verification failed: {problem}",
                failure_reason=(
                    f"Verification failed: {problem} The run stays off the leaderboard; "
                    "the attempt counts."
                ),
            )
            verification_ids = list(
                _judged_verifications(submission, official).values_list("pk", flat=True)
            )
            transaction.on_commit(
                lambda: notify.verification_rejected(
                    submission_id=int(submission.pk),
                    official_run_id=int(official.pk) if official else None,
                    verification_run_ids=verification_ids,
                    problem=problem,
                ),
                robust=True,  # a mail that cannot go is logged; the verdict stands
            )
        else:
            seconds = (verdict.fastest_ns or 0) / 1e9
            tolerance = f"within {verdict.within} of the official run"
            Run.objects.filter(pk=run_id).update(
                verification_note=f"confirmed ({which}): fastest {seconds:.3f} s, {tolerance}"
            )
            passed = (
                f"the verification run passed in {seconds:.3f} s"
                if verdict.run == 1
                else f"verification run {which} passed; the fastest took {seconds:.3f} s"
            )
            submission_transition(
                submission.pk,
                frm=[Submission.VERIFYING],
                to=Submission.PASSED,
                note=f"verified: {passed}",
            )
        leaderboard_refresh_entrant(
            benchmark=submission.benchmark, entrant_id=submission.entrant_id
        )
        transaction.on_commit(lambda: anomalies.anomaly_scan_after_commit(run_id))
        return True


def verification_requeue(submission: Submission) -> None:
    """Staff requeue of a ``verifying`` submission: a queued verification run exists
    afterwards (a new one unless one is still queued), and its cohort's pool of
    prepared sets is topped up (``pool``). Refuses one under way."""
    runs = submission.runs.filter(purpose=Run.VERIFY)
    if runs.filter(status__in=[Run.STAGING, Run.RUNNING]).exists():
        raise errors.InvalidParameter("Its verification run is under way; cancel it instead.")
    cohort_id = _scored_cohort_id(submission)
    if not runs.filter(status=Run.QUEUED).exists():
        Run.objects.create(
            submission=submission,
            cohort_id=cohort_id,
            try_number=submission.runs.count() + 1,
            purpose=Run.VERIFY,
            status=Run.QUEUED,
        )
    pool.request_fill(cohort_id)


def _verification_infra_failure(run: Run, reason: str) -> None:
    """A platform fault during verification: the verification alone is queued again,
    once; after a second fault in a row the submission stays ``verifying`` and staff are
    told (they may requeue it). Nothing is charged or refunded either way."""
    submission = run.submission
    previous = (
        submission.runs.filter(purpose=Run.VERIFY, try_number__lt=run.try_number)
        .order_by("-try_number")
        .values_list("status", flat=True)
        .first()
    )
    if submission.status != Submission.VERIFYING:
        return
    if previous != Run.INFRA_FAILED:
        _event(
            submission.pk,
            Submission.VERIFYING,
            f"platform failure during verification, requeued: {reason}",
        )
        _queue_verification(submission)
        return
    _event(
        submission.pk,
        Submission.VERIFYING,
        f"platform failure during verification twice; staff will requeue it: {reason}",
    )
    run_id = int(run.pk)
    transaction.on_commit(
        lambda: notify.verification_stuck(
            submission_id=int(submission.pk), verification_run_id=run_id, reason=reason
        ),
        robust=True,
    )
