"""Anomalies: finished official runs that staff should look at, and their review.

A meter that can be bypassed (work done where it is not counted) shows up in
numbers nobody reads. After an official run's verdict commits, :func:`anomaly_scan`
puts what looks wrong on a list for staff (``Anomaly``, the admin's "Anomalies"). A
finding is a prompt to look, never a verdict: nothing here changes a run, a submission
or the board; staff disqualify through the usual action if review says so.

The rules (pure functions below, plain values in and out, no database):

- ``much_faster``: a passing scored run whose wall time is under
  :data:`MUCH_FASTER_RATIO` (one half) of the best wall time among *other* entrants'
  leaderboard rows; nothing when no other entrant ranks. Honest progress moves the
  board by percents; beating everyone else by 2x at once is what skipping the work
  (precomputed or replayed answers, work outside the clock) looks like.
- ``identical_output``: its predictions file (``output_sha256``, non-empty) is
  byte-identical to a finished run of *another* entrant on the same cohort, with the
  same purpose (a verification run's staged order is shuffled, so it is compared only
  with other verification runs). Shared answers, or a shared model: entrants shipping
  the same published weights may legitimately agree byte for byte, so staff compare
  the sources.
- ``idle_cpu``: a passing run whose meter says ``cpu_user_s + cpu_system_s`` is under
  :data:`IDLE_CPU_RATIO` (5%) of its wall time. Inference on the cohort keeps at least
  one core busy for most of the run; a tree that barely ran on the CPU either did its
  work outside the meter or replayed answers. (A GPU benchmark whose runtime blocks
  rather than spins while the device works can come close; review decides.) A missing
  reading (``None``, or the meter did not run) decides nothing.
- ``failed_verification``: the run is the last verification run of a submission that
  ended ``rejected_verification`` (the one that decided; earlier timing misses were
  measured again); the finding names the official run it re-ran.
- ``low_energy``: a passing run on a GPU class whose GPU energy per image (the GPU
  meter's ``resources["gpu"]["energy_per_image_j"]``, ``scoring.run.gpumeter``) is under the
  benchmark's ``energy_floor_pct`` percent of its ``reference_energy_per_image_j`` (the
  reference kit's, as a run of it reported it). Classifying an image on the GPU costs
  energy a faster kernel trims but cannot remove; a run far under the reference kit's
  did its work elsewhere or replayed answers. Nothing when no reference is set, the floor
  is 0, or the meter has no figure (a CPU class, NVML failing).

Thresholds are module constants (``low_energy``'s are the benchmark's, audited like its
other rules), so a change is a reviewed code change and the tests pin the boundaries:
each rule fires strictly below its threshold, not at it.

Who may call: :func:`anomaly_scan` is called by the submission services after a
verdict commits (through :func:`anomaly_scan_after_commit`, which never lets a failure
reach the verdict); staff tools may rerun it. :func:`anomaly_review` needs the
:data:`REVIEW_ANOMALY` permission, which its caller checks first with
``errors.staff_permission_check`` (the admin does), as for the other staff actions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.contests import review
from portal.contests.models import Benchmark, LeaderboardEntry
from portal.core import errors
from portal.submissions.models import Anomaly, Run, Submission

log = logging.getLogger(__name__)

REVIEW_ANOMALY = "submissions.review_anomaly"

# much_faster: under this fraction of the best other entrant's wall time.
MUCH_FASTER_RATIO = 0.5
# idle_cpu: CPU seconds (user + system) under this fraction of the wall time.
IDLE_CPU_RATIO = 0.05

NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class Finding:
    """What one rule found: the anomaly's kind, its sentence, and the numbers behind it."""

    kind: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OtherRun:
    """A finished run of some entrant, as :func:`identical_output` compares it."""

    run_id: int
    entrant_id: int
    output_sha256: str


def _seconds(ns: int) -> str:
    return f"{ns / NS_PER_S:.3f} s"


def _number(value: Any) -> float | None:
    """A meter reading as a number; None for a missing or odd one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _exact(value: float) -> Fraction:
    """The decimal a reading or a threshold reads as (0.05 is 1/20, not the nearest
    binary float), so that a value exactly at a threshold compares equal to it."""
    return Fraction(repr(value))


# The rules (pure) ----------------------------------------------------------------------


def much_faster(
    *,
    passed: bool,
    wall_time_ns: int | None,
    best_other_ns: int | None,
    best_other_run_id: int | None = None,
    ratio: float = MUCH_FASTER_RATIO,
) -> Finding | None:
    """A passing run under ``ratio`` of the best other entrant's wall time (None: no row)."""
    if not passed or wall_time_ns is None or best_other_ns is None or best_other_ns <= 0:
        return None
    if wall_time_ns >= best_other_ns * _exact(ratio):
        return None
    share = wall_time_ns / best_other_ns
    return Finding(
        kind=Anomaly.MUCH_FASTER,
        reason=(
            f"Passed in {_seconds(wall_time_ns)}, {share:.1%} of the best other entrant's "
            f"{_seconds(best_other_ns)} (run {best_other_run_id}); under {ratio:.0%} is "
            "flagged."
        ),
        details={
            "wall_time_ns": wall_time_ns,
            "other_run_id": best_other_run_id,
            "other_wall_time_ns": best_other_ns,
            "share": round(share, 4),
        },
    )


def identical_output(
    *, output_sha256: str, entrant_id: int, others: Iterable[OtherRun]
) -> Finding | None:
    """The run's output equals another entrant's run's, byte for byte (same digest).

    ``others``: finished runs on the same cohort; the entrant's own runs are skipped.
    The finding names the earliest matching run and counts them all.
    """
    if not output_sha256:
        return None
    matching = sorted(
        (
            other
            for other in others
            if other.entrant_id != entrant_id and other.output_sha256 == output_sha256
        ),
        key=lambda other: other.run_id,
    )
    if not matching:
        return None
    first = matching[0]
    also = f" and {len(matching) - 1} more run(s) of other entrants" if len(matching) > 1 else ""
    return Finding(
        kind=Anomaly.IDENTICAL_OUTPUT,
        reason=(
            f"Its predictions (sha256 {output_sha256[:12]}...) are byte-identical to run "
            f"{first.run_id} of entrant {first.entrant_id}{also} on the same cohort."
        ),
        details={
            "output_sha256": output_sha256,
            "other_run_id": first.run_id,
            "other_entrant_id": first.entrant_id,
            "other_run_ids": [other.run_id for other in matching],
        },
    )


def idle_cpu(
    *,
    passed: bool,
    wall_time_ns: int | None,
    resources: Mapping[str, Any],
    ratio: float = IDLE_CPU_RATIO,
) -> Finding | None:
    """A passing run whose CPU time (user + system) is under ``ratio`` of its wall time."""
    user_s = _number(resources.get("cpu_user_s"))
    system_s = _number(resources.get("cpu_system_s"))
    if not passed or wall_time_ns is None or wall_time_ns <= 0:
        return None
    if user_s is None or system_s is None:
        return None
    cpu_s = user_s + system_s
    wall_s = wall_time_ns / NS_PER_S
    if _exact(user_s) + _exact(system_s) >= Fraction(wall_time_ns, NS_PER_S) * _exact(ratio):
        return None
    share = cpu_s / wall_s
    return Finding(
        kind=Anomaly.IDLE_CPU,
        reason=(
            f"Passed in {wall_s:.3f} s using {cpu_s:.3f} s of CPU (user {user_s:.3f} s, "
            f"system {system_s:.3f} s), {share:.1%} of its wall time; under {ratio:.0%} "
            "suggests work done outside the meter or replayed answers."
        ),
        details={
            "wall_time_ns": wall_time_ns,
            "cpu_user_s": user_s,
            "cpu_system_s": system_s,
            "cpu_share": round(share, 4),
        },
    )


def low_energy(
    *,
    passed: bool,
    resources: Mapping[str, Any],
    reference_j: float | None,
    floor_pct: int,
) -> Finding | None:
    """A passing run whose GPU energy per image is under ``floor_pct`` percent of the
    reference's ``reference_j``; None without a reference, a floor or the meter's figure."""
    gpu = resources.get("gpu")
    figures: Mapping[str, Any] = gpu if isinstance(gpu, Mapping) else {}
    energy_j = _number(figures.get("energy_per_image_j"))
    reference = _number(reference_j)
    if not passed or energy_j is None or reference is None or reference <= 0 or floor_pct <= 0:
        return None
    if _exact(energy_j) * 100 >= _exact(reference) * floor_pct:
        return None
    share = energy_j / reference
    return Finding(
        kind=Anomaly.LOW_ENERGY,
        reason=(
            f"Passed using {energy_j:.4g} J of GPU energy per image, {share:.1%} of the "
            f"reference kit's {reference:.4g} J; under {floor_pct}% suggests work done "
            "outside the metered GPUs or replayed answers."
        ),
        details={
            "energy_per_image_j": energy_j,
            "reference_energy_per_image_j": reference,
            "energy_floor_pct": floor_pct,
            "energy_share": round(share, 4),
            "gpu_util_mean_pct": _number(figures.get("gpu_util_mean_pct")),
        },
    )


def failed_verification(
    *, purpose: str, submission_status: str, official_run_id: int | None, problem: str = ""
) -> Finding | None:
    """A verification run whose submission ended ``rejected_verification``."""
    if purpose != Run.VERIFY or submission_status != Submission.REJECTED_VERIFICATION:
        return None
    return Finding(
        kind=Anomaly.FAILED_VERIFICATION,
        reason=(
            f"The re-run of official run {official_run_id} off the board failed; "
            f"the submission was rejected. {problem}"
        ).strip(),
        details={"official_run_id": official_run_id},
    )


# The scan ------------------------------------------------------------------------------


def _scannable(run: Run) -> bool:
    """A finished run of an official submission: a scored run with a verdict, or a
    verification run."""
    return (
        run.submission.kind == Submission.OFFICIAL
        and run.status == Run.FINISHED
        and bool(run.verdict)
        and run.purpose in (Run.SCORE, Run.VERIFY)
    )


def _much_faster(run: Run) -> Finding | None:
    if run.purpose != Run.SCORE:
        return None
    submission = run.submission
    best = (
        LeaderboardEntry.objects.filter(benchmark_id=submission.benchmark_id)
        .exclude(entrant_id=submission.entrant_id)
        .order_by("wall_time_ns", "submitted_at")
        .values_list("run_id", "wall_time_ns")
        .first()
    )
    return much_faster(
        passed=bool(run.passed),
        wall_time_ns=run.wall_time_ns,
        best_other_ns=best[1] if best else None,
        best_other_run_id=best[0] if best else None,
    )


def _identical_output(run: Run) -> Finding | None:
    if not run.output_sha256:
        return None
    others = (
        Run.objects.filter(
            cohort_id=run.cohort_id,
            purpose=run.purpose,
            status=Run.FINISHED,
            output_sha256=run.output_sha256,
        )
        .exclude(verdict="")
        .exclude(submission__entrant_id=run.submission.entrant_id)
        .values_list("pk", "submission__entrant_id", "output_sha256")
    )
    return identical_output(
        output_sha256=run.output_sha256,
        entrant_id=run.submission.entrant_id,
        others=[OtherRun(run_id, entrant_id, sha) for run_id, entrant_id, sha in others],
    )


def _failed_verification(run: Run) -> Finding | None:
    if run.purpose != Run.VERIFY:
        return None
    submission = run.submission
    deciding = (
        submission.runs.filter(purpose=Run.VERIFY)
        .order_by("-try_number")
        .values_list("pk", flat=True)
        .first()
    )
    if deciding != run.pk:
        return None  # an earlier timing miss, measured again: the last run is flagged
    official_run_id = (
        submission.runs.filter(purpose=Run.SCORE, status=Run.FINISHED, passed=True)
        .order_by("-try_number")
        .values_list("pk", flat=True)
        .first()
    )
    return failed_verification(
        purpose=run.purpose,
        submission_status=submission.status,
        official_run_id=official_run_id,
        problem=submission.failure_reason,
    )


def anomaly_scan(run_id: int) -> list[Anomaly]:
    """Look at one finished official run; record what each rule finds (see the module).

    Returns the run's anomalies found by this scan, new or already recorded. Idempotent:
    one row per (run, kind), created once (a concurrent scan of the same run meets the
    unique constraint and reads the other's row); an existing row is never changed, so a
    rescan neither moves ``detected_at`` nor touches a review, and a rule that no longer
    fires (the board moved) leaves its earlier row in place. A run that is not finished,
    or not of an official submission, finds nothing. Call after the verdict commits.
    """
    run = Run.objects.select_related("submission__benchmark").filter(pk=run_id).first()
    if run is None or not _scannable(run):
        return []
    resources = run.resources if isinstance(run.resources, dict) else {}
    benchmark = run.submission.benchmark
    findings = [
        finding
        for finding in (
            _much_faster(run),
            _identical_output(run),
            idle_cpu(passed=bool(run.passed), wall_time_ns=run.wall_time_ns, resources=resources),
            _failed_verification(run),
            low_energy(
                passed=bool(run.passed),
                resources=resources,
                reference_j=benchmark.reference_energy_per_image_j,
                floor_pct=benchmark.energy_floor_pct,
            ),
        )
        if finding is not None
    ]
    found = []
    for finding in findings:
        anomaly, created = Anomaly.objects.get_or_create(
            run=run,
            kind=finding.kind,
            defaults={
                "reason": finding.reason,
                "details": finding.details,
                "detected_at": timezone.now(),
            },
        )
        if created:
            log.warning("anomaly %s on run %s: %s", finding.kind, run_id, finding.reason)
        found.append(anomaly)
    return found


def anomaly_scan_after_commit(run_id: int) -> None:
    """:func:`anomaly_scan` as the services run it from ``transaction.on_commit``.

    The verdict is already committed; a failing scan is logged and swallowed, so that it
    never reaches the worker that recorded the verdict (which would retry a done task).
    """
    try:
        anomaly_scan(run_id)
    except Exception:
        log.exception("anomaly scan of run %s failed; its verdict stands", run_id)


# The energy reference (staff) ----------------------------------------------------------


def benchmark_reference_energy_set(
    *, benchmark: Benchmark, run_id: int, actor: Any, origin: Origin = NOWHERE
) -> float:
    """Set ``low_energy``'s yardstick from a run of the benchmark's reference kit: its
    ``reference_energy_per_image_j`` becomes that run's GPU energy per image.

    The run must be a finished, passing run of this benchmark (any kind: a practice run
    of the kit does) with the GPU meter's figure. Saved as a change of the benchmark's
    rules, so it is audited (``benchmark.rules.change``). Returns the figure.
    """
    run = Run.objects.filter(pk=run_id, submission__benchmark=benchmark).first()
    if run is None:
        raise errors.InvalidParameter(f"Run {run_id} is not a run of {benchmark.slug}.")
    if run.status != Run.FINISHED or not run.passed:
        raise errors.InvalidParameter(f"Run {run_id} did not pass: it is no reference.")
    resources = run.resources if isinstance(run.resources, dict) else {}
    gpu = resources.get("gpu")
    figure = _number(gpu.get("energy_per_image_j")) if isinstance(gpu, dict) else None
    if figure is None or figure <= 0:
        raise errors.InvalidParameter(
            f"Run {run_id} has no GPU energy per image (not run on a GPU class, or its GPU "
            "meter had no reading)."
        )
    before = {"reference_energy_per_image_j": benchmark.reference_energy_per_image_j}
    benchmark.reference_energy_per_image_j = figure
    review.benchmark_save(benchmark=benchmark, before=before, actor=actor, origin=origin)
    return figure


# Review (staff) ------------------------------------------------------------------------


def anomaly_review(*, anomaly: Anomaly, actor: Any, note: str, origin: Origin = NOWHERE) -> Anomaly:
    """Mark an anomaly reviewed (once) with staff's note, and audit it.

    The caller has checked :data:`REVIEW_ANOMALY`. A blank note is refused; an anomaly
    already reviewed is refused (a conditional update, so a double click records one
    review and one audit event).
    """
    note = note.strip()
    if not note:
        raise errors.InvalidParameter("Write a note saying what the review found.")
    with transaction.atomic():
        done = Anomaly.objects.filter(pk=anomaly.pk, reviewed_at__isnull=True).update(
            reviewed_at=timezone.now(), reviewed_by=actor, review_note=note
        )
        if not done:
            raise errors.InvalidParameter("This anomaly is already reviewed.")
        audit_record(
            actor=actor,
            action="anomaly.review",
            target=f"anomaly:{anomaly.pk}",
            origin=origin,
            reason=note,
            details={"run": anomaly.run_id, "kind": anomaly.kind},
        )
    anomaly.refresh_from_db()
    return anomaly
