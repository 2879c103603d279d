"""The scoring host's side of metered estimation: grade an entry on its phase suite, a
final score on the final suite, and generate a suite, each claimed once through the
portal's services and recorded there. Grading holds the machine (``machine.hold``) as a
timed score does, so that nothing else runs beside the entrant's core and the meter."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from portal.core import cpus, jobs, storage
from portal.core.task_names import ESTIMATION_FINAL, ESTIMATION_GRADE
from portal.estimation import services
from portal.estimation.models import Entry, FinalScore, PhaseRules, Suite
from scoring.estimation import grade as grader
from scoring.host import machine as machine_lock

log = logging.getLogger(__name__)

# A busy machine sends the grade back to its queue after this long.
RETRY_S = 30.0


def limits_of(rules: PhaseRules) -> grader.Limits:
    """The grader's limits from a phase's rules and its benchmark's sandbox bounds."""
    return grader.phase_limits(
        flop_budget=int(rules.flop_budget),
        wall_cap_s=float(rules.wall_cap_s),
        residual_cap_ms=rules.residual_cap_ms if rules.residual_rule == PhaseRules.CAPPED else None,
        lambda_flops_per_second=float(rules.lambda_flops_per_second),
        memory_bytes=int(rules.benchmark.run_memory_bytes),
        pids_limit=int(rules.benchmark.run_pids_limit),
        cpuset=entrant_cpuset(rules.entrant_cores),
    )


def entrant_cpuset(cores: int) -> str | None:
    """The entrant's CPUs: the first ``cores`` of this host's scoring CPUs
    (``PODIUM_SCORING_CPUS``, ``portal.core.cpus``); the meter runs on the rest. None where
    the CPUs are shared (too few to split, as on a 2-CPU machine)."""
    isolation = cpus.configured()
    if not isolation.split:
        return None
    return cpus.format_cpu_list(frozenset(sorted(isolation.scoring)[:cores]))


def _requeue(task: str, object_id: int, hardware_class: str) -> Callable[[str], None]:
    """What a busy (or not ready) machine does with a grade: send it back to the class's
    queue after :data:`RETRY_S`."""

    def requeue(reason: str) -> None:
        log.info("%s %s waits: %s", task, object_id, reason)
        jobs.enqueue(task, object_id, countdown=RETRY_S, queue=jobs.scoring_queue(hardware_class))

    return requeue


def _grade_archive(entry: Entry, suite_id: int, session: Any) -> dict[str, Any]:
    """The entry's archive unpacked and graded on the suite, its container spared from
    the machine's freezer."""
    rules = PhaseRules.objects.select_related("benchmark").get(benchmark=entry.benchmark_id)
    with tempfile.TemporaryDirectory(prefix="podium-entry-") as work:
        folder = grader.unpack(services.archive_path(entry), Path(work) / "submission")
        return grader.grade(
            folder, storage.suite_dir(suite_id), limits_of(rules), on_container=session.spare
        )


def grade_entry(entry_id: int) -> None:
    """Grade an accepted entry on its phase's suite, holding the machine, once (a
    redelivered message finds it claimed and leaves it)."""
    entry = Entry.objects.filter(pk=entry_id).select_related("benchmark").first()
    if entry is None:
        return
    requeue = _requeue(ESTIMATION_GRADE, entry_id, entry.benchmark.hardware_class_id)
    try:
        with machine_lock.hold(reschedule=requeue) as session:
            claimed = services.entry_claim(entry_id, session.host)
            if claimed is None:
                return
            suite = Suite.objects.filter(
                benchmark=claimed.benchmark, role=Suite.PHASE, status=Suite.READY
            ).first()
            if suite is None:
                services.entry_fail(entry_id, "The phase has no ready suite.", refund=True)
                return
            try:
                result = _grade_archive(claimed, suite.pk, session)
            except ValueError as exc:  # the submission's own fault (no usable entrypoint)
                services.entry_fail(
                    entry_id, f"The estimator could not be loaded: {exc}", refund=False
                )
                return
            except Exception as exc:
                log.exception("entry %s: grader fault", entry_id)
                services.entry_fail(
                    entry_id, f"Platform error ({type(exc).__name__}); not charged.", refund=True
                )
                return
            services.entry_record(entry_id, result)
    except machine_lock.MachineWaiting as waiting:
        log.info("entry %s: the machine is not ready: %s", entry_id, waiting)


def grade_final(final_id: int) -> None:
    """Grade one entry of the final rerun on the final suite, holding the machine, once."""
    final = FinalScore.objects.filter(pk=final_id).select_related("suite__benchmark").first()
    if final is None:
        return
    requeue = _requeue(ESTIMATION_FINAL, final_id, final.suite.benchmark.hardware_class_id)
    try:
        with machine_lock.hold(reschedule=requeue) as session:
            claimed = services.final_claim(final_id)
            if claimed is None:
                return
            try:
                result = _grade_archive(claimed.entry, claimed.suite_id, session)
            except Exception as exc:
                log.exception("final %s: grader fault", final_id)
                services.final_fail(final_id, f"{type(exc).__name__}: {exc}")
                return
            services.final_record(final_id, result)
    except machine_lock.MachineWaiting as waiting:
        log.info("final %s: the machine is not ready: %s", final_id, waiting)


def generate_suite(suite_id: int, seeds: list[int]) -> None:
    """Generate a requested suite (its MLPs and Monte Carlo reference) on this host, with
    progress recorded per MLP; off any entrant's clock (no machine hold: it is staff work
    and a grade waits for the lock, not for this)."""
    suite = Suite.objects.filter(pk=suite_id, status=Suite.GENERATING).first()
    if suite is None:
        return
    host = machine_lock.scoring_host()
    dest = storage.suite_dir(suite_id)
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)

    def progress(event: dict[str, Any]) -> None:
        # whestbench reports the reference's sampling per MLP (its 1-based index): the
        # MLPs before it are done.
        index = event.get("mlp_index")
        if event.get("phase") == "sampling" and isinstance(index, int):
            services.suite_progress(suite_id, index - 1)

    try:
        grader.make_suite(
            dest,
            n_mlps=suite.n_mlps,
            width=suite.width,
            depth=suite.depth,
            n_samples=int(suite.n_samples),
            mlp_seeds=list(seeds),
            on_progress=progress,
        )
        stats = services.suite_stats(dest)
    except Exception as exc:
        log.exception("suite %s: generation failed", suite_id)
        shutil.rmtree(dest, ignore_errors=True)
        services.suite_failed(suite_id, f"{type(exc).__name__}: {exc}")
        return
    services.suite_ready(
        suite_id, dataset_sha256=services.folder_sha256(dest), stats=stats, host=host
    )
