"""Verification before ranking (docs/rules.md, "Verification before ranking"): whether
a passing official run must be verified, its queued verification runs, their verdicts
(the submission ranks, is re-measured or is rejected), staff's requeue and a platform
fault during verification.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models, transaction

from portal.contests import rules
from portal.contests.models import LeaderboardEntry
from portal.core import errors
from portal.submissions import anomalies, hooks, notify, pool
from portal.submissions.leaderboard import leaderboard_refresh_entrant
from portal.submissions.models import Run, Submission
from portal.submissions.services import event_record, run_finish, submission_transition
from portal.submissions.wakeups import score_enqueue
from portal.teams.selectors import teammate_ids

VERIFY_NOTE = "passed; verifying before it ranks: one more run off the board"


def verification_due(run: Run) -> bool:
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
    # A teammate's row is the candidate's own identity's row (the team's best).
    own = set(teammate_ids(benchmark.pk, submission.entrant_id))
    board = [
        rules.Candidate(
            entrant_id=submission.entrant_id if row["entrant_id"] in own else row["entrant_id"],
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


def verification_queue(submission: Submission) -> None:
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
    the larger of the benchmark's ``verify_tolerance_pct`` and the reference kit's
    measured spread on the class at the official run's cohort size (none measured yet:
    ``PODIUM_VERIFY_NOISE_FACTOR`` times the class's noise band), and never less than
    ``PODIUM_VERIFY_SLACK_MS``. Within it, the
    submission ranks (``verifying`` -> ``passed``, with its official time). A timing miss
    queues one more verification run (staged as a fresh permutation) while fewer than
    ``PODIUM_VERIFY_MAX_RUNS`` were judged; after that it ends ``rejected_verification``:
    off the board, the attempt still charged, and staff are told with every run. Each
    run's decision is kept on it (``verification_note``). Written once, holding the
    submission's row lock (see :func:`run_finish`).
    """
    if not Run.objects.filter(pk=run_id, purpose=Run.VERIFY).exists():
        return False
    with transaction.atomic():
        run = run_finish(
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
        hardware_class = submission.benchmark.hardware_class_id
        band_pct = hooks.noise_band_pct(hardware_class)
        # The reference kit's spread at the size the official run had (its cohort's).
        spread_pct = (
            hooks.reference_spread_pct(hardware_class, official.total)
            if official is not None and official.total
            else None
        )
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
            reference_spread_pct=spread_pct,
        )
        which = f"{verdict.run} of {verdict.of}"
        if verdict.action == rules.REMEASURE:
            note = f"re-measuring ({verdict.run + 1} of {verdict.of}): {verdict.reason}"
            Run.objects.filter(pk=run_id).update(
                verification_note=f"timing miss ({which}), re-measuring: {verdict.reason}"
            )
            event_record(submission.pk, Submission.VERIFYING, note)
            verification_queue(submission)
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


def verification_infra_failure(run: Run, reason: str) -> None:
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
        event_record(
            submission.pk,
            Submission.VERIFYING,
            f"platform failure during verification, requeued: {reason}",
        )
        verification_queue(submission)
        return
    event_record(
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
