"""Final-rerun runs (docs/rules.md, "Final standings"): a passed official submission
scored again after the close, on the benchmark's final cohort, through the same claim,
sandbox and gates as a score. ``portal.standings`` decides which submissions and how
many runs; this stage queues them, records each verdict and retries a platform fault.

A final run never changes its submission's status, attempts or the board: its
verdict is kept on the run (and a timeline note), and the standings read the runs.

A final run is held to what verifies an official run: it carries canaries (judged
against the reference answers, ``scoring.cohort.staging``), and a passing one much
faster than its submission's official run (``rules.final_run_problem``) is recorded as
failed, the reason kept on the run (``verdict_reason`` and ``verification_note``), so
the standings drop the submission with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max

from portal.contests import rules
from portal.submissions import hooks
from portal.submissions.models import Run, Submission
from portal.submissions.services import event_record, run_finish
from portal.submissions.verification import official_run
from portal.submissions.wakeups import score_wake

# A final run's platform faults in a row that are retried; the next one stands (the
# submission's standings entry says so) and staff may queue more runs.
FINAL_RETRIES = 1


def _next_try(submission_id: int) -> int:
    latest = Run.objects.filter(submission_id=submission_id).aggregate(top=Max("try_number"))
    return int(latest["top"] or 0) + 1


def final_runs_queue(*, submission_ids: Iterable[int], cohort_id: int, count: int) -> int:
    """Queue ``count`` final runs on ``cohort_id`` for each passed official submission of
    ``submission_ids`` and wake one host per run (after commit). Submissions that are not
    ``passed`` or are disqualified get none. Returns how many runs were queued."""
    queued = 0
    with transaction.atomic():
        submissions = (
            Submission.objects.select_for_update()
            .filter(
                pk__in=list(submission_ids),
                status=Submission.PASSED,
                kind=Submission.OFFICIAL,
                disqualified_at__isnull=True,
            )
            .select_related("benchmark")
            .order_by("pk")
        )
        for submission in submissions:
            first = _next_try(int(submission.pk))
            for offset in range(count):
                Run.objects.create(
                    submission=submission,
                    cohort_id=cohort_id,
                    try_number=first + offset,
                    purpose=Run.FINAL,
                    status=Run.QUEUED,
                )
                score_wake(hardware_class=submission.benchmark.hardware_class_id)
                queued += 1
            event_record(submission.pk, Submission.PASSED, f"final rerun: {count} run(s) queued")
    return queued


def final_timing_problem(submission: Submission, wall_time_ns: int | None, total: int) -> str:
    """Why a passing final run of ``wall_time_ns`` on ``total`` images must not rank
    (``rules.final_run_problem`` against the submission's latest passing official run,
    with the tolerance a verification of it has: the reference kit's spread at the
    final run's size where one is measured); empty when it may, or when there is no
    official time. A final cohort of another size than the official one is compared per
    image: the official time is scaled to ``total`` images."""
    official = official_run(submission)
    if official is None or not official.wall_time_ns or not wall_time_ns:
        return ""
    official_ns, official_total = int(official.wall_time_ns), int(official.total or 0)
    if total and official_total and total != official_total:
        official_ns = official_ns * total // official_total
    hardware_class = submission.benchmark.hardware_class_id
    return rules.final_run_problem(
        official_ns=official_ns,
        final_ns=int(wall_time_ns),
        tolerance_pct=submission.benchmark.verify_tolerance_pct,
        noise_band_pct=hooks.noise_band_pct(hardware_class),
        noise_factor=float(settings.PODIUM_VERIFY_NOISE_FACTOR),
        slack_ns=int(settings.PODIUM_VERIFY_SLACK_MS) * 1_000_000,
        reference_spread_pct=(
            hooks.reference_spread_pct(hardware_class, total or official_total)
            if total or official_total
            else None
        ),
    )


def run_record_final(*, run_id: int, status: str, reason: str, **fields: Any) -> bool:
    """Write a final run's verdict once (passed, failed or errored), holding the
    submission's row lock (``run_finish``); the submission stays ``passed``. Tells
    ``portal.standings`` (``hooks.final_run_settled``) in the same transaction.

    A passing run that :func:`final_timing_problem` finds too fast is written as
    ``failed`` with that reason, also kept as its ``verification_note``."""
    run = Run.objects.filter(pk=run_id, purpose=Run.FINAL).select_related("submission").first()
    if run is None:
        return False
    problem = ""
    if status == Submission.PASSED:
        problem = final_timing_problem(
            run.submission, fields.get("wall_time_ns"), int(run.total or 0)
        )
    if problem:
        status = Submission.FAILED
        reason = f"Not ranked: {problem}."
        fields = fields | {"verification_note": f"rejected: {problem}"}
    with transaction.atomic():
        run = run_finish(
            run_id,
            status=status,
            reason=reason,
            submission_statuses=[Submission.PASSED],
            fields=fields,
        )
        if run is None:
            return False
        seconds = (run.wall_time_ns or 0) / 1e9
        note = f"final run {run.try_number}: {status} in {seconds:.3f} s"
        event_record(
            run.submission_id,
            Submission.PASSED,
            note if status == "passed" else f"final run {run.try_number}: {status}: {reason}",
        )
        hooks.final_run_settled(benchmark_id=run.submission.benchmark_id)
        return True


def final_infra_failure(run: Run, reason: str) -> None:
    """A platform fault in a final run (already marked ``infra_failed``): queued again
    while fewer than ``FINAL_RETRIES`` faults came just before it; after that it stands
    and the standings show the submission's missing run. Nothing is charged."""
    earlier = (
        Run.objects.filter(
            submission_id=run.submission_id, purpose=Run.FINAL, try_number__lt=run.try_number
        )
        .order_by("-try_number")
        .values_list("status", flat=True)[:FINAL_RETRIES]
    )
    faults_before = 0
    for status in earlier:
        if status != Run.INFRA_FAILED:
            break
        faults_before += 1
    benchmark_id = run.submission.benchmark_id
    if faults_before < FINAL_RETRIES:
        Run.objects.create(
            submission_id=run.submission_id,
            cohort_id=run.cohort_id,
            try_number=_next_try(run.submission_id),
            purpose=Run.FINAL,
            status=Run.QUEUED,
        )
        event_record(
            run.submission_id, Submission.PASSED, f"final run: platform failure, requeued: {reason}"
        )
        score_wake(hardware_class=run.submission.benchmark.hardware_class_id)
    else:
        event_record(
            run.submission_id, Submission.PASSED, f"final run: platform failure again: {reason}"
        )
    hooks.final_run_settled(benchmark_id=benchmark_id)
