"""Reads behind the submission pages: an entrant's list and one submission's live state.

Never a reference class, a per-image result or a cohort member: only what docs/rules.md
("What entrants see") lets an entrant see of their own submission.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from portal.contests.models import Benchmark
from portal.contests.templatetags.podium import minutes, ns, span, zoned, zoned_seconds
from portal.core import storage
from portal.environments.models import Environment
from portal.submissions import hooks, waiting
from portal.submissions.models import AttemptLedger, Run, Submission
from portal.teams.selectors import teammate_ids

NO_OUTPUT = "(no output yet)"
RUNTIME_LINE_CHARS = 1000


def builds_in_flight(entrant_id: int, benchmark_id: int) -> int:
    """How many of the entrant's submissions on the benchmark wait for or hold a build slot
    (``accepted`` or ``building``: their ``build.sh``). The environments floor adds them to
    its own builds (``portal.environments.hooks``)."""
    return Submission.objects.filter(
        entrant_id=entrant_id,
        benchmark_id=benchmark_id,
        status__in=[Submission.ACCEPTED, Submission.BUILDING],
    ).count()


def environment_in_use(environment: Environment) -> bool:
    """Whether an unfinished submission uses the environment (it may not be removed)."""
    return (
        Submission.objects.filter(environment=environment)
        .exclude(status__in=Submission.FINAL)
        .exists()
    )


def run_log_tail(*, submission: Submission, run_id: int, lines: int, staff: bool = False) -> str:
    """The last ``lines`` lines of a run's log as its reader may see them.

    An entrant reads at most the benchmark's ``runtime_tail_bytes`` of an official run's
    log, each line cut at :data:`RUNTIME_LINE_CHARS` characters and marked: the cohort's
    order is fixed, so a log printing a run's predictions would let a later archive
    replay them. Practice runs (public answers) and staff readers get the plain tail.
    """
    path = storage.run_log(run_id)
    if staff or submission.kind != Submission.OFFICIAL:
        return storage.read_tail(path, lines)
    capped = storage.read_tail(path, lines, max_bytes=submission.benchmark.runtime_tail_bytes)
    return storage.cut_lines(capped, RUNTIME_LINE_CHARS)


def scored_run(submission: Submission) -> Run | None:
    """The submission's latest scored run: what its entrant's numbers and log come from (a
    verification run only confirms it; see :func:`verification_progress`)."""
    return submission.runs.filter(purpose=Run.SCORE).order_by("-try_number").first()


# The meter's readings an entrant sees (Run.resources, written by the scoring worker
# from the scored container's cgroup; a value the host's kernel does not give is null).
RESOURCE_KEYS = (
    "cpu_user_s",
    "cpu_system_s",
    "cpu_per_wall",
    "memory_peak_bytes",
    "pids_peak",
    "io_read_bytes",
    "io_write_bytes",
    "oom_events",
)
# The GPU meter's figures published with them (Run.resources["gpu"], scoring.run.gpumeter:
# a run on a GPU class); null on a CPU class or when NVML gave no reading.
GPU_RESOURCE_KEYS = ("energy_per_image_j", "gpu_util_mean_pct")


def gpu_figures(stored: dict[str, Any]) -> dict[str, Any]:
    """The GPU meter's published figures of a run's resources (each None without one)."""
    gpu = stored.get("gpu") if isinstance(stored, dict) else None
    readings = gpu if isinstance(gpu, dict) else {}
    return {key: readings.get(key) for key in GPU_RESOURCE_KEYS}


def resources_of(stored: dict[str, Any]) -> dict[str, Any] | None:
    """A run's published readings (null before the meter read anything)."""
    if not stored:
        return None
    return {key: stored.get(key) for key in RESOURCE_KEYS} | gpu_figures(stored)


def _bytes(value: int | None) -> str:
    if value is None:
        return "?"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"  # pragma: no cover - the loop always returns


def resources_text(stored: dict[str, Any]) -> str:
    """One line of a run's meter readings for the pages ("-" before any)."""
    readings = resources_of(stored)
    if readings is None:
        return "-"

    def seconds(key: str) -> str:
        value = readings[key]
        return "?" if value is None else f"{value:.2f} s"

    ratio = readings["cpu_per_wall"]
    parts = [
        f"CPU {seconds('cpu_user_s')} user + {seconds('cpu_system_s')} system"
        + ("" if ratio is None else f" ({ratio:.2f} CPU-s per wall-s)"),
        f"peak memory {_bytes(readings['memory_peak_bytes'])}",
        f"peak PIDs {'?' if readings['pids_peak'] is None else readings['pids_peak']}",
        f"read {_bytes(readings['io_read_bytes'])}, written {_bytes(readings['io_write_bytes'])}",
        f"OOM events {'?' if readings['oom_events'] is None else readings['oom_events']}",
    ]
    if "gpu" in stored:  # a GPU class: what the GPU meter read
        energy, util = readings["energy_per_image_j"], readings["gpu_util_mean_pct"]
        parts.append(
            "GPU energy and utilization not measured"
            if energy is None or util is None
            else f"GPU {energy:.4g} J per image, {util:.1f}% mean utilization"
        )
    return " · ".join(parts)


# How many of a class's latest finished runs the ETA averages (staging to verdict).
ETA_SAMPLE_RUNS = 20


@dataclass(frozen=True)
class QueueStanding:
    """Where a waiting submission stands: its place in the fair order of its class, the
    live hosts of the class, and an estimate of when its run starts (None: no host of
    the class is online, or none has finished a run to measure)."""

    position: int
    hardware_class: str
    hosts_online: int
    eta_seconds: int | None

    def text(self) -> str:
        where = f"number {self.position} in the queue of {self.hardware_class} hosts"
        if self.hosts_online == 0:
            return (
                f"You are {where}. No scoring host of this class is online now: the run "
                "waits until one is."
            )
        hosts = f"{self.hosts_online} host{'s' if self.hosts_online != 1 else ''} online"
        if self.eta_seconds is None:
            return f"You are {where} ({hosts}); no run has finished yet to time the wait."
        return f"You are {where} ({hosts}); the run should start in about {span(self.eta_seconds)}."


def class_run_seconds(hardware_class: str) -> float | None:
    """The mean duration, claim to verdict (off the clock and on it), of the class's last
    :data:`ETA_SAMPLE_RUNS` finished runs; None before any."""
    spans = list(
        Run.objects.filter(
            submission__benchmark__hardware_class__name=hardware_class,
            status=Run.FINISHED,
            started_at__isnull=False,
            finished_at__isnull=False,
        )
        .order_by("-finished_at")
        .values_list("started_at", "finished_at")[:ETA_SAMPLE_RUNS]
    )
    seconds = [(end - start).total_seconds() for start, end in spans if start and end]
    return sum(seconds) / len(seconds) if seconds else None


def queue_standing(submission: Submission, now: dt.datetime | None = None) -> QueueStanding | None:
    """A waiting (``queued`` or ``verifying``) submission's place; None for any other.

    The estimate: with ``h`` live hosts and the class's mean run duration ``d``, the run
    at place ``p`` starts after about ``ceil(p / h) * d`` (each host takes one run at a
    time, in the fair order); the runs already under way are counted as a whole run.
    """
    if submission.status not in Submission.WAITING_FOR_SCORE:
        return None
    now = now or timezone.now()
    hardware_class = submission.benchmark.hardware_class_id
    order = waiting.waiting_in_fair_order(hardware_class=hardware_class, now=now)
    if submission.pk not in order:
        return None  # claimed meanwhile
    position = order.index(submission.pk) + 1
    online = hooks.hosts_online(hardware_class, now)
    mean_s = class_run_seconds(hardware_class) if online else None
    eta = None if mean_s is None else round(-(-position // online) * mean_s)
    return QueueStanding(position, hardware_class, online, eta)


@dataclass(frozen=True)
class VerificationProgress:
    """The latest verification run of a submission's current scored run: the ``number``-th
    measurement of at most ``of`` (``PODIUM_VERIFY_MAX_RUNS``; a timing miss is measured
    again, a platform fault is no measurement)."""

    run: Run
    number: int
    of: int

    @property
    def remeasuring(self) -> bool:
        return self.number > 1 and self.run.status != Run.FINISHED


def verification_progress(runs: Iterable[Run]) -> VerificationProgress | None:
    """From a submission's runs (prefetched ``runs.all()`` or a queryset): its latest
    verification run since its latest scored run, and which measurement it is; None
    when that scored run had none."""
    runs = list(runs)
    scored = max((run.try_number for run in runs if run.purpose == Run.SCORE), default=0)
    verifications = sorted(
        (run for run in runs if run.purpose == Run.VERIFY and run.try_number > scored),
        key=lambda run: run.try_number,
    )
    if not verifications:
        return None
    judged = sum(run.status == Run.FINISHED for run in verifications[:-1])
    return VerificationProgress(
        run=verifications[-1], number=judged + 1, of=int(settings.PODIUM_VERIFY_MAX_RUNS)
    )


def verification_summary(progress: VerificationProgress | None) -> dict[str, Any] | None:
    """What an entrant sees of a verification run: aggregates, as of a scored run, and
    which measurement it is (``run`` of ``of``)."""
    if progress is None:
        return None
    run = progress.run
    return {
        "status": run.status,
        "passed": run.passed,
        "wall_time_ns": run.wall_time_ns,
        "matches": run.matches,
        "total": run.total,
        "run": progress.number,
        "of": progress.of,
    }


def run_host(run: Run | None, verification: Run | None, submission: Submission) -> str | None:
    """The scoring host of the run under way, or of the latest run; None before staging."""
    latest = verification if submission.status == Submission.VERIFYING else run
    if latest is None or latest.status == Run.QUEUED:
        latest = run
    return (latest.host or None) if latest is not None else None


def verification_text(progress: VerificationProgress | None) -> str:
    if progress is None:
        return "-"
    run = progress.run
    if progress.remeasuring:
        return (
            f"re-measuring ({progress.number} of {progress.of}): {run.status} (a timing "
            "miss is measured again, on a fresh shuffle and re-encode of the cohort)"
        )
    if run.status != Run.FINISHED:
        return f"{run.status} (re-runs the image on the cohort shuffled and re-encoded)"
    wall = f"{ns(run.wall_time_ns)}, " if run.wall_time_ns is not None else ""
    agreement = (
        f"{run.matches:,} / {run.total:,} agree with the official answers"
        if run.matches is not None
        else ""
    )
    which = f" (run {progress.number} of {progress.of})" if progress.number > 1 else ""
    return f"{run.verdict}{which}: {wall}{agreement}".rstrip(", ")


def submissions_with_latest_run(entrant: Any, benchmark: Benchmark) -> QuerySet[Submission]:
    """The entrant's submissions on the benchmark and their teammates', newest first, each
    annotated with its latest run's wall time and agreement. Two queries."""
    latest = Run.objects.filter(submission=OuterRef("pk"), purpose=Run.SCORE).order_by(
        "-try_number"
    )
    return (
        Submission.objects.filter(
            entrant_id__in=teammate_ids(benchmark.pk, entrant.pk), benchmark=benchmark
        )
        .select_related("environment", "entrant")
        .annotate(
            wall_time_ns=Subquery(latest.values("wall_time_ns")[:1]),
            matches=Subquery(latest.values("matches")[:1]),
            total=Subquery(latest.values("total")[:1]),
        )
    )


@dataclass(frozen=True)
class Phase:
    """What an unfinished submission is doing, since when, and under which cap."""

    status: str
    since: dt.datetime
    cap_s: int | None  # the limit that applies to this phase; None when nothing is capped

    def text(self, now: dt.datetime) -> str:
        elapsed = span((now - self.since).total_seconds())
        what = PHASE_WORDS.get(self.status, self.status)
        if self.cap_s is None:
            return f"{what} for {elapsed}."
        return f"{what} for {elapsed} of the {minutes(self.cap_s)} allowed."


PHASE_WORDS = {
    Submission.ACCEPTED: "Waiting for a build slot",
    Submission.BUILDING: "Building (build.sh)",
    Submission.QUEUED: "Waiting for the scoring machine",
    Submission.STAGING: "Preparing the run, off the clock,",
    Submission.RUNNING: "Running",
    Submission.VERIFYING: "Verifying (one more run off the board, before it ranks)",
}


def current_phase(submission: Submission, events: list[tuple[str, dt.datetime]]) -> Phase | None:
    """The phase of an unfinished submission, timed from the event that started it."""
    if submission.status in Submission.FINAL:
        return None
    since = next(
        (at for status, at in reversed(events) if status == submission.status),
        submission.submitted_at,
    )
    benchmark = submission.benchmark
    cap_s = {
        Submission.BUILDING: benchmark.build_timeout_s,
        Submission.RUNNING: benchmark.score_timeout_s,
    }.get(submission.status)
    return Phase(submission.status, since, cap_s)


def attempt_text(kind: str, charged: bool, refunded: bool) -> str:
    text = "practice allowance" if kind == Submission.PRACTICE else "official attempt"
    if refunded:
        return f"{text} charged, then refunded"
    return f"{text} charged" if charged else f"{text} not charged"


OUTCOME_HEADLINES = {
    Submission.BUILD_FAILED: "Your submission's build failed",
    Submission.FAILED: "Your run did not pass",
    Submission.ERRORED: "Your run gave no valid result",
    Submission.INFRA_FAILED: "The platform failed to score this submission",
    Submission.REJECTED_VERIFICATION: "Your run failed its verification",
    Submission.CANCELLED: "Staff cancelled this submission",
}


def outcome_sentence(
    *, status: str, kind: str, reason: str, charged: bool, refunded: bool, practice_note: bool
) -> str:
    """One sentence for a finished submission: what happened and whether it was charged.

    Empty while the submission is unfinished.
    """
    what = "practice run" if kind == Submission.PRACTICE else "official attempt"
    if status == Submission.PASSED:
        if practice_note:
            return "Passed; practice runs never appear on the leaderboard."
        return "Passed; the leaderboard shows it if it is your best official time."
    headline = OUTCOME_HEADLINES.get(status)
    if headline is None:
        return ""
    if refunded:
        clause = f"so the {what} was refunded"
    elif charged:
        clause = f"and the {what} was charged (your own failures count)"
    else:
        clause = "and no attempt was charged"
    reason = reason.strip()
    if reason:
        return f"{headline}, {clause}: {reason[0].lower()}{reason[1:]}"
    return f"{headline}, {clause}."


def submission_state(submission: Submission, now: dt.datetime | None = None) -> dict[str, Any]:
    """What the submission page and its status.json show. A fixed number of queries."""
    now = now or timezone.now()
    zone = submission.benchmark.attempt_timezone
    run = scored_run(submission)
    verification = verification_progress(submission.runs.all())
    standing = queue_standing(submission, now)
    ledger = [entry.delta for entry in submission.ledger.all()]
    events = list(submission.events.all())
    wall_time_ns = run.wall_time_ns if run else None
    charged = AttemptLedger.CHARGE in ledger
    refunded = AttemptLedger.REFUND in ledger
    build_log = storage.read_tail(
        storage.submission_build_log(submission.pk), storage.LOG_TAIL_LINES
    )
    run_log = (
        run_log_tail(submission=submission, run_id=run.pk, lines=storage.LOG_TAIL_LINES)
        if run
        else ""
    )
    phase = current_phase(submission, [(event.status, event.at) for event in events])
    outcome = outcome_sentence(
        status=submission.status,
        kind=submission.kind,
        reason=submission.failure_reason,
        charged=charged,
        refunded=refunded,
        practice_note=submission.kind == Submission.PRACTICE,
    )
    return {
        "id": submission.pk,
        "kind": submission.kind,
        "status": submission.status,
        "finished": submission.status in Submission.FINAL,
        "disqualified": submission.disqualified_at is not None,
        "submitted_at": submission.submitted_at.isoformat(),
        "submitted_at_display": zoned(submission.submitted_at, zone),
        "environment": submission.environment.name,
        "timeline": [
            {
                "status": event.status,
                "at": event.at.isoformat(),
                "at_display": zoned_seconds(event.at, zone),
                "note": event.note,
            }
            for event in events
        ],
        "wall_time_ns": wall_time_ns,
        "matches": run.matches if run else None,
        "total": run.total if run else None,
        "passed": run.passed if run else None,
        "digests": {
            "source": submission.source_sha256,
            "environment_image": submission.environment_image_digest,
            "submission_image": submission.image_digest,
            "output": run.output_sha256 if run else "",
        },
        "attempt": {"charged": charged, "refunded": refunded},
        "verification": verification_summary(verification),
        "queue_position": standing.position if standing else None,
        "eta_seconds": standing.eta_seconds if standing else None,
        "host": run_host(run, verification.run if verification else None, submission),
        "resources": resources_of(run.resources) if run else None,
        "failure_reason": submission.failure_reason,
        "outcome": outcome,
        "phase": (
            {
                "status": phase.status,
                "since": phase.since.isoformat(),
                "elapsed_s": int((now - phase.since).total_seconds()),
                "cap_s": phase.cap_s,
            }
            if phase
            else None
        ),
        "build_log": build_log,
        "run_log": run_log,
        # Ready-made text for each [data-field] the page's script updates in place.
        "display": {
            "status": submission.status,
            "elapsed": phase.text(now) if phase else "",
            "outcome": outcome,
            "wall_time": (
                f"{ns(wall_time_ns)} ({wall_time_ns} ns)" if wall_time_ns is not None else "-"
            ),
            "agreement": (
                f"{run.matches:,} / {run.total:,} top-1 matches"
                if run and run.matches is not None and run.total
                else "-"
            ),
            "attempt": attempt_text(submission.kind, charged, refunded),
            "verification": verification_text(verification),
            "queue": standing.text() if standing else "",
            "host": run_host(run, verification.run if verification else None, submission) or "-",
            "resources": resources_text(run.resources) if run else "-",
            "failure_reason": submission.failure_reason,
            "digest_environment_image": submission.environment_image_digest or "-",
            "digest_submission_image": submission.image_digest or "-",
            "digest_output": f"sha256:{run.output_sha256}" if run and run.output_sha256 else "-",
            "build_log": build_log or NO_OUTPUT,
            "run_log": run_log or NO_OUTPUT,
        },
    }
