"""A campaign round on its scoring host: every image of the round over the same requests,
timed per slice by the trusted supervisor, reported as one ``RoundOutcome``.

:func:`run_round` is what the Celery task ``scoring.run_round`` calls, on a worker of the
round's hardware class. In order:

1. Hold the machine exactly as a scored run does (``scoring.host.machine.hold``: the lock,
   every other container paused, the health gates) and keep the host calibrated. A host
   that is not ready, draining or just drained by its calibration claims nothing: the
   round goes back to waiting for capacity (``round_wait_for_capacity``, the domain's
   backoff), keeping its entries and its requests.
2. Claim the round for this host (``round_claim``: a conditional update, so a
   redelivered message does nothing) and heartbeat it while it runs (``round_heartbeat``).
3. Stage the round's requests once: the cohort members at the round's positions, in
   order, cut into the round's contiguous slices (``rules.slice_bounds``). Each slice is
   its own input folder with its own manifest (``staging.stage_items``: fresh copies
   checked against the frozen hashes, fresh names and request ids), so a slice's
   container sees that slice only. The staged files are written back to disk before the
   first pass, so the kernel's writeback of them never lands on a timed slice.
4. Run, in this order: a warm-up pass of the baseline (thrown away; kept as evidence),
   the opening baseline, each entry in entry order, the closing baseline. A pass is one
   supervised container per slice through the very sandbox of a scored run
   (``runner.container_spec``: the supervisor as PID 1, the benchmark's limits, the
   host's GPUs), started under the host's outer timer (``runner.supervise``). With a
   registry each image is first pulled by digest and refused unless it is the recorded
   image (``scoring.images.registry``); every container of a pass is created from the image's
   ID, which is the digest reported. Nothing of an image ever runs outside its
   supervisor.
5. Off the clock, each slice's output is checked (4 bytes per request, every class in
   [0, 999]) and its matches counted against that slice's references
   (:func:`check_output`): a ``SliceRun``. A pass stops at its first fatal slice
   (``rules.slice_fatal``: stopped, or not exit 0); a wrong or malformed output is not
   fatal: it is checked and counted like every slice.
6. Hand the ``RoundOutcome`` (with its environment block) to ``round_record``, which
   decides verdicts, scores, the crown or a void (``rules.decide_round``). Nothing is
   judged here.

Who is blamed, as in a scored run: a platform fault on an image (an engine error, a pull
refused, a supervisor that gave no valid line, host and trusted clocks that disagree)
is that image's ``ImageRun.infra_error``; everything the image's own processes did is in
its slices (exit code, signal, deadline, OOM) for the domain's rules. A host-side void
(the requests could not be staged, the machine lock or the round was lost) is the
outcome's ``void_reason``. A baseline whose warm-up or opening pass is not clean ends
the round there: the round is void and no entry could be scored against it.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from django.conf import settings

from podium_policy import verdict
from portal.campaigns import rules
from portal.campaigns.outcomes import (
    BASELINE_CLOSE,
    BASELINE_OPEN,
    ENTRY,
    WARMUP,
    ImageRun,
    RoundOutcome,
    SliceRun,
)
from portal.campaigns.recording import round_record
from portal.campaigns.rounds import (
    ClaimedImage,
    RoundClaim,
    round_claim,
    round_heartbeat,
    round_wait_for_capacity,
)
from portal.contests.models import Benchmark, CohortItem
from portal.core import storage
from portal.hosts.models import ScoringHost
from portal.hosts.selectors import latest_calibration
from scoring import engine
from scoring.cohort import staging
from scoring.cohort.staging import StagedRun
from scoring.host import health, hosts
from scoring.host import machine as machine_lock
from scoring.host.heartbeat import Heartbeat
from scoring.images import registry
from scoring.run import calibration, runner

log = logging.getLogger(__name__)

ROUND_LABEL = "podium.round"  # on a round's containers: the round (never a run's label)
ROUNDS = "rounds"  # under PODIUM_DATA_DIR: one folder per round
# How often a running round tells the domain it is alive; well inside its stale limit
# (``portal.campaigns.sweep.HEARTBEAT_STALE``, 15 minutes).
HEARTBEAT_S = 60.0


# Pure parts ---------------------------------------------------------------------------


def check_output(
    output: bytes | None, output_error: str, references: Sequence[int]
) -> tuple[bool, int]:
    """Whether an output is well formed for ``references`` (exactly 4 bytes per request,
    every class in [0, 999], as ``verdict.parse_predictions``), and how many of its
    predictions equal the reference at the same place (0 when it is not well formed).

    Pure statements about the bytes: whether a crashed run's output counts is the
    domain's rule, not this check's.
    """
    if output_error or output is None:
        return False, 0
    try:
        predictions = verdict.parse_predictions(output, len(references))
    except verdict.InvalidOutput:
        return False, 0
    return True, verdict.count_matches(predictions, references)


def slice_run(index: int, result: runner.SupervisorResult, references: Sequence[int]) -> SliceRun:
    """One slice, from the supervisor's checked result line (off the clock).

    ``oom_killed``: the container's cgroup saw an OOM kill (one of the image's processes
    was taken by the kernel at the memory limit; the supervisor survived to report).
    """
    output_error = result.output_error
    if not output_error and result.output_bytes > 4 * len(references):
        output_error = "too long"  # the supervisor carries at most one byte too many
    output_ok, matches = check_output(result.output, output_error, references)
    return SliceRun(
        slice=index,
        wall_ns=result.wall_ns,
        exit_code=result.exit_code,
        signal=result.signal,
        killed=result.killed,
        oom_killed=bool(result.resources.oom_events),
        output_ok=output_ok,
        matches=matches,
        total=len(references),
    )


def stopped_slice(index: int, total: int, *, oom_killed: bool) -> SliceRun:
    """A slice that ended without a supervisor report: the host's outer timer fired, or
    the kernel's OOM killer took the supervisor itself. Stopped from outside, untimed."""
    return SliceRun(
        slice=index,
        wall_ns=None,
        exit_code=None,
        signal=None,
        killed=True,
        oom_killed=oom_killed,
        output_ok=False,
        matches=0,
        total=total,
    )


def pass_clean(run: ImageRun | None) -> bool:
    """Whether a pass ran slices, all of them to a clean end with a well-formed output,
    and met no platform fault: what a baseline pass must be for the round to go on."""
    return (
        run is not None
        and not run.infra_error
        and bool(run.slices)
        and not any(rules.slice_fatal(one) or not one.output_ok for one in run.slices)
    )


def cpu_quota(spec: dict[str, Any]) -> dict[str, Any]:
    """The CPU limits a scored container was created with (its ``container_spec``): the
    quota in CPUs (None: no quota, every core of the host) and the cpuset ("" for all)."""
    cpus: float | None = None
    if spec.get("nano_cpus"):
        cpus = int(spec["nano_cpus"]) / 1e9
    elif spec.get("cpu_quota") and spec.get("cpu_period"):
        cpus = int(spec["cpu_quota"]) / int(spec["cpu_period"])
    return {"cpus": cpus, "cpuset": str(spec.get("cpuset_cpus") or "")}


def environment_block(
    *,
    host: str,
    facts: dict[str, Any],
    engine_info: dict[str, Any],
    spec: dict[str, Any],
    gpu_devices: Sequence[str],
    readings: dict[str, Any],
    host_calibration: dict[str, Any] | None,
    cgroup_version: int | None,
) -> dict[str, Any]:
    """The round's environment block (evidence): what the host is and what the scored
    containers got. ``facts``: the host's registered facts (``ScoringHost``, or this
    machine's ``hosts.machine_facts``); ``engine_info``: ``docker info``; ``spec``: a
    slice's container spec; ``readings``: the health gates' readings at the hold;
    ``cgroup_version``: as the supervisor's meter read it (None: no slice reported)."""
    return {
        "host": host,
        "cpu_model": str(facts.get("cpu_model") or ""),
        "cores": int(engine_info.get("NCPU") or facts.get("cpu_cores") or 0),
        "memory_bytes": int(engine_info.get("MemTotal") or facts.get("memory_bytes") or 0),
        "architecture": str(facts.get("architecture") or engine_info.get("Architecture") or ""),
        "kernel": str(engine_info.get("KernelVersion") or facts.get("kernel_version") or ""),
        "docker_version": str(
            engine_info.get("ServerVersion") or facts.get("docker_version") or ""
        ),
        "cgroup": {
            "version": cgroup_version,
            "driver": str(engine_info.get("CgroupDriver") or ""),
            **cpu_quota(spec),
            "memory_bytes": spec.get("mem_limit"),
            "pids": spec.get("pids_limit"),
        },
        "gpus": list(facts.get("gpus") or []),
        "gpu_devices": list(gpu_devices),
        "calibration": host_calibration,
        "readings": readings,
    }


# What the round runs (read from the domain's rows) --------------------------------------


@dataclass(frozen=True)
class ImageSource:
    """One image to run: its local tag, its registry reference by digest ("" when it was
    never pushed) and the image ID it must be (``image_digest``; "" when unrecorded)."""

    tag: str
    ref: str
    digest: str


@dataclass(frozen=True)
class Plan:
    """A claimed round as the host runs it (see :func:`plan_of`)."""

    round_id: int
    benchmark: Benchmark  # the sandbox limits of every slice (score_timeout_s per slice)
    items: list[CohortItem]  # the round's requests, in order
    slices: list[tuple[int, int]]  # [start, end) indexes into items, as the round cuts them
    baseline: ImageSource
    entries: list[tuple[int, ImageSource]]  # (RoundEntry id, image), in entry order
    repeats: int = 1  # supervised invocations per slice (the campaign's slice_repeats)


# Running ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """What every container of the round shares: the host, its freezer and the supervisor."""

    round_id: int
    host: str
    benchmark: Benchmark
    supervisor: Path
    supervisor_sha256: str
    gpu_devices: list[str]
    spare: Callable[[str], None]
    evidence_dir: Path


def round_dir(round_id: int) -> Path:
    """A round's folder under the data folder: its staged slices while it runs, then its
    staff-only evidence (the supervisor's lines, the mapping of staged names)."""
    return storage.data_dir() / ROUNDS / str(round_id)


def slice_spec(slot: Slot, image: str, staged: StagedRun) -> dict[str, Any]:
    """A slice's container: a scored run's sandbox (``runner.container_spec``), labelled
    as the round's on this host and never as a run (the reaper settles runs by label)."""
    spec = runner.container_spec(
        image=image,
        staged=staged,
        benchmark=slot.benchmark,
        supervisor=slot.supervisor,
        expect_bytes=4 * staged.rows,
        gpu_devices=slot.gpu_devices,
        gpu_cdi=settings.PODIUM_GPU_CDI,
        image_volumes=runner.declared_volumes(image),
    )
    spec["labels"] = {ROUND_LABEL: str(slot.round_id), machine_lock.HOST_LABEL: slot.host}
    return spec


def run_slice(
    slot: Slot, image: str, index: int, staged: StagedRun, label: str
) -> tuple[SliceRun, runner.SupervisorResult | None]:
    """One supervised invocation over one slice; the slice and the result line it gave.

    Raises ``engine.EngineError`` or ``runner.SupervisorError`` for a platform fault.
    """
    container_id = engine.create_container(**slice_spec(slot, image, staged))
    try:
        slot.spare(container_id)  # before it starts: the freezer pauses any other container
        container = runner.Container(id=container_id, supervisor_sha256=slot.supervisor_sha256)
        supervised = runner.supervise(container, slot.benchmark, runner.Measured())
        stopped = supervised.status_code is None or (
            supervised.status_code != 0 and engine.state(container_id).get("OOMKilled")
        )
        if stopped and not runner.clock_started(container_id):
            raise runner.SupervisorError("the slice was stopped before its clock started")
        if supervised.status_code is None:
            return stopped_slice(index, staged.rows, oom_killed=False), None
        if supervised.status_code != 0:
            if engine.state(container_id).get("OOMKilled"):
                return stopped_slice(index, staged.rows, oom_killed=True), None
            raise runner.SupervisorError(
                f"the supervisor exited with status {supervised.status_code}"
            )
        result = runner.parse_supervisor_line(engine.logs(container_id, stdout=True, stderr=False))
        if not (
            supervised.host_start_ns <= result.start_ns <= result.end_ns <= supervised.host_end_ns
        ):
            raise runner.SupervisorError("the host clock did not contain the trusted interval")
        _keep(slot.evidence_dir / f"{label}.slice{index}.json", result.line + b"\n")
        return slice_run(index, result, staged.references), result
    finally:
        try:
            engine.remove_container(container_id)
        except engine.EngineError as exc:
            log.error(
                "round %s: could not remove container %s: %s", slot.round_id, container_id[:12], exc
            )


@dataclass(frozen=True)
class Fetched:
    image: runner.Image  # its name on this engine (a pulled one is removed afterwards)
    image_id: str  # what runs: every container of the pass is created from this ID


def fetch(source: ImageSource) -> Fetched:
    """The image on this engine, as a scored run gets its own (``runner.pull``): without a
    registry its local tag as is; with one, the reference pulled by digest and refused
    unless it is the recorded image, or (never pushed) the local tag only if it is. Its
    image ID is read once and the containers are created from it, so the digest reported
    is the image that ran, whatever happens to a tag meanwhile.

    Raises ``engine.EngineError`` or ``registry.ImageRefused`` (platform faults).
    """
    if not settings.PODIUM_REGISTRY:
        image = runner.Image(source.tag or source.ref, pulled=False)
    elif source.ref:
        registry.pull_verified(source.ref, source.digest)
        image = runner.Image(source.ref, pulled=True)
    else:
        registry.check_local(source.tag, source.digest)
        image = runner.Image(source.tag, pulled=False)
    try:
        return Fetched(image, engine.image_info(image.ref).id)
    except engine.EngineError:
        if image.pulled:
            registry.discard(image.ref)
        raise


def release(fetched: Fetched) -> None:
    if fetched.image.pulled:
        registry.discard(fetched.image.ref)  # the build host and the registry keep it


def run_pass(
    slot: Slot,
    image_id: str,
    staged: list[StagedRun],
    *,
    role: str,
    entry_id: int | None,
    lost: Callable[[], bool],
    repeats: int = 1,
) -> tuple[ImageRun, int | None]:
    """One image over every slice, in order, stopping at the first fatal slice
    (``rules.slice_fatal``), a platform fault or a lost lock; the pass and the cgroup
    version its slices' meter saw. Each slice runs ``repeats`` times in a row (fewer
    when a try is fatal or its output malformed) and ``rules.standing_slice`` picks the
    try that stands for it; every try's result line is kept as evidence."""
    label = role if entry_id is None else f"{role}{entry_id}"
    slices: list[SliceRun] = []
    cgroup_version: int | None = None
    for index, one in enumerate(staged):
        tries: list[SliceRun] = []
        for attempt in range(max(1, repeats)):
            name = label if repeats <= 1 else f"{label}.try{attempt}"
            try:
                run, result = run_slice(slot, image_id, index, one, name)
            except (engine.EngineError, runner.SupervisorError) as exc:
                log.error(
                    "round %s: %s slice %s: platform fault: %s", slot.round_id, name, index, exc
                )
                failed = ImageRun(role, entry_id, image_id, slices, infra_error=_fault(exc))
                return failed, cgroup_version
            if result is not None:
                cgroup_version = result.resources.cgroup_version
            tries.append(run)
            if rules.slice_fatal(run) or not run.output_ok or lost():
                break
        run = rules.standing_slice(tries)
        slices.append(run)
        if rules.slice_fatal(run) or lost():
            break
    return ImageRun(role, entry_id, image_id, slices), cgroup_version


def _fault(exc: Exception) -> str:
    """An entrant-safe sentence for a platform fault (details go to the worker's log)."""
    if isinstance(exc, engine.EngineError):
        return "platform error: the container engine failed"
    text = str(exc).rstrip(".")
    return f"platform error: {text[:1].lower()}{text[1:]}"


def _keep(path: Path, data: bytes) -> None:
    storage.ensure_dir(path.parent)
    path.write_bytes(data)
    path.chmod(0o600)


def stage_slices(plan: Plan, root: Path) -> list[StagedRun]:
    """The round's requests, staged once: one input folder per slice under ``root``, with
    the mapping (position, request id, staged name, member) kept for staff, and written
    back to disk (``os.sync``) before any pass starts."""
    if not plan.items:
        raise staging.StagingError("The round has no requests.")
    staged: list[StagedRun] = []
    mapping: list[str] = []
    try:
        for index, (start, end) in enumerate(plan.slices):
            items = plan.items[start:end]
            one = staging.stage_items(items, root / f"slice{index}")
            staged.append(one)
            mapping += [
                f"{index}\t{item.position}\t{rid}\t{name}\t{item.canonical_name}\n"
                for item, rid, name in zip(items, one.request_ids, one.staged_names, strict=True)
            ]
    except BaseException:
        for one in staged:
            staging.unstage(one)
        raise
    _keep(root / "private" / storage.RUN_MAPPING, "".join(mapping).encode())
    # Written back now, off the clock: the kernel writes dirty pages back some 30 s after
    # they were dirtied, which for a round of thousands of staged files lands in the
    # middle of the opening baseline's pass (and only there), slowing it against the
    # closing one.
    os.sync()
    return staged


LOCK_LOST = (
    "the scoring host lost its machine lock or the round (its heartbeat went stale, or the "
    "round was voided meanwhile)"
)


@dataclass
class Seen:
    """What the passes saw that goes into the environment block."""

    warmup: ImageRun | None = None
    cgroup_version: int | None = None
    spec: dict[str, Any] = field(default_factory=dict)


def run_passes(
    plan: Plan,
    slot: Slot,
    staged: list[StagedRun],
    outcome: RoundOutcome,
    seen: Seen,
    lost: Callable[[], bool],
) -> RoundOutcome:
    """Warm-up, opening baseline, entries in entry order, closing baseline (step 4).

    A baseline whose warm-up or opening pass is not clean (:func:`pass_clean`) ends the
    round there: it is void, and no entry could be scored against it anyway.
    """

    def one_pass(image_id: str, role: str, entry_id: int | None = None) -> ImageRun:
        run, version = run_pass(
            slot, image_id, staged, role=role, entry_id=entry_id, lost=lost, repeats=plan.repeats
        )
        seen.cgroup_version = version if version is not None else seen.cgroup_version
        return run

    try:
        baseline = fetch(plan.baseline)
    except (engine.EngineError, registry.ImageRefused) as exc:
        log.error("round %s: the baseline image: %s", plan.round_id, exc)
        failed = ImageRun(BASELINE_OPEN, None, plan.baseline.digest, infra_error=_fault(exc))
        return replace(outcome, baseline_open=failed)
    try:
        seen.spec = slice_spec(slot, baseline.image_id, staged[0])
        seen.warmup = one_pass(baseline.image_id, WARMUP)
        if lost():
            return replace(outcome, void_reason=LOCK_LOST)
        if not pass_clean(seen.warmup):
            reason = seen.warmup.infra_error or "a slice did not end cleanly"
            failed = ImageRun(
                BASELINE_OPEN,
                None,
                baseline.image_id,
                infra_error=f"the baseline's warm-up pass failed: {reason}",
            )
            return replace(outcome, baseline_open=failed)
        outcome = replace(outcome, baseline_open=one_pass(baseline.image_id, BASELINE_OPEN))
        if lost():
            return replace(outcome, void_reason=LOCK_LOST)
        if not pass_clean(outcome.baseline_open):
            return outcome
        for entry_id, source in plan.entries:
            try:
                fetched = fetch(source)
            except (engine.EngineError, registry.ImageRefused) as exc:
                log.error("round %s: entry %s's image: %s", plan.round_id, entry_id, exc)
                run = ImageRun(ENTRY, entry_id, source.digest, infra_error=_fault(exc))
            else:
                try:
                    run = one_pass(fetched.image_id, ENTRY, entry_id)
                finally:
                    release(fetched)
            outcome = replace(outcome, entries=[*outcome.entries, run])
            if lost():
                return replace(outcome, void_reason=LOCK_LOST)
        outcome = replace(outcome, baseline_close=one_pass(baseline.image_id, BASELINE_CLOSE))
        if lost():
            return replace(outcome, void_reason=LOCK_LOST)
        return outcome
    finally:
        release(baseline)


def execute(
    plan: Plan, slot: Slot, *, readings: dict[str, Any], lost: Callable[[], bool]
) -> RoundOutcome:
    """A claimed round on the held machine: stage, run every pass, clean up; the outcome
    with its environment block. Never raises for a platform fault (see the module doc)."""
    outcome = RoundOutcome(
        round_id=plan.round_id,
        host=slot.host,
        request_digest=rules.request_digest([item.position for item in plan.items]),
        baseline_open=None,
        baseline_close=None,
    )
    seen = Seen()
    try:
        staged = stage_slices(plan, round_dir(plan.round_id))
    except staging.StagingError as exc:
        log.error("round %s: its requests could not be staged: %s", plan.round_id, exc)
        outcome = replace(outcome, void_reason=_fault(exc))
    else:
        try:
            outcome = run_passes(plan, slot, staged, outcome, seen, lost)
        finally:
            for one in staged:
                staging.unstage(one)
    return replace(outcome, environment=environment_of(slot, seen, readings))


# The environment block's sources -----------------------------------------------------------


def _host_facts(host: str) -> dict[str, Any]:
    """The host's registered facts (its ``ScoringHost`` row), else this machine's own."""
    row = ScoringHost.objects.filter(name=host).first()
    if row is None:
        return hosts.machine_facts()
    return {
        name: getattr(row, name)
        for name in (
            "architecture",
            "cpu_model",
            "cpu_cores",
            "memory_bytes",
            "gpus",
            "docker_version",
            "kernel_version",
        )
    }


def _calibration(host: str) -> dict[str, Any] | None:
    """The host's latest calibration, JSON-ready; None when it never calibrated."""
    found = latest_calibration(host)
    if found is None:
        return None
    return {
        "id": found.pk,
        "finished_at": found.finished_at.isoformat(),
        "median_ns": found.median_ns,
        "noise_pct": found.noise_pct,
        "drift_pct": found.drift_pct,
        "reference_ns": found.reference_ns,
        "ok": found.ok,
    }


def environment_of(slot: Slot, seen: Seen, readings: dict[str, Any]) -> dict[str, Any]:
    try:
        engine_info = engine.info()
    except engine.EngineError as exc:
        log.warning("round %s: docker info failed: %s", slot.round_id, exc)
        engine_info = {}
    block = environment_block(
        host=slot.host,
        facts=_host_facts(slot.host),
        engine_info=engine_info,
        spec=seen.spec,
        gpu_devices=slot.gpu_devices,
        readings=readings,
        host_calibration=_calibration(slot.host),
        cgroup_version=seen.cgroup_version,
    )
    if seen.warmup is not None:  # thrown away, but its slice times are evidence too
        block["warmup"] = asdict(seen.warmup)
    return block


# The round's rows -------------------------------------------------------------------------


def _source(image: ClaimedImage) -> ImageSource:
    return ImageSource(tag=image.image_tag, ref=image.image_ref, digest=image.image_digest)


def plan_of(claim: RoundClaim) -> Plan:
    """What a claimed round runs (fixed when the round was created).

    Raises ``staging.StagingError`` (a platform fault: the round is void) when a request
    position is not in the campaign's cohort.
    """
    positions = list(claim.request_positions)
    members = {
        item.position: item
        for item in CohortItem.objects.filter(cohort_id=claim.cohort_id, position__in=positions)
    }
    missing = set(positions) - set(members)
    if missing:
        log.error(
            "round %s: %d request positions are not in cohort %s",
            claim.round_id,
            len(missing),
            claim.cohort_id,
        )
        raise staging.StagingError("A request of the round is not in the cohort.")
    return Plan(
        round_id=claim.round_id,
        benchmark=Benchmark.objects.get(pk=claim.benchmark_id),
        items=[members[position] for position in positions],
        slices=list(claim.slices),
        baseline=_source(claim.baseline),
        entries=[(int(entry.entry_id or 0), _source(entry)) for entry in claim.entries],
        repeats=claim.limits.slice_repeats,
    )


class RoundHeartbeat(Heartbeat):
    """Tells the domain the round still runs here (``round_heartbeat``) every
    :data:`HEARTBEAT_S` (``scoring.host.heartbeat``); sets ``lost`` when the round is no
    longer this host's (staff voided it, or it was voided as stale). A database error is
    tried again at the next beat. Uses its own database connection, closed when it ends."""

    def __init__(self, round_id: int, host: str) -> None:
        super().__init__(
            name=f"round-heartbeat-{round_id}",
            interval_s=HEARTBEAT_S,
            failure=f"round {round_id}: could not heartbeat",
        )
        self.round_id = round_id
        self.host = host

    def beat(self) -> None:
        if not round_heartbeat(self.round_id, self.host):
            log.error("round %s is no longer this host's (%s)", self.round_id, self.host)
            self.lost.set()


# The task's entry point -----------------------------------------------------------------


def _supervisor() -> tuple[Path, str]:
    """The supervisor binary and its sha256 (``runner.SupervisorError`` when unreadable)."""
    supervisor = Path(settings.PODIUM_SUPERVISOR)
    try:
        return supervisor, hashlib.sha256(supervisor.read_bytes()).hexdigest()
    except OSError as exc:
        log.error("cannot read the supervisor %s: %s", supervisor, exc)
        raise runner.SupervisorError("the supervisor binary is missing") from exc


def void_outcome(round_id: int, host: str, reason: str) -> RoundOutcome:
    """A round that ran nothing it could report: void for ``reason`` (host-side)."""
    return RoundOutcome(
        round_id=round_id,
        host=host,
        request_digest="",
        baseline_open=None,
        baseline_close=None,
        void_reason=reason,
    )


def remove_round_containers(round_id: int, host: str) -> None:
    """Kill and remove the containers of ``round_id`` on ``host`` (a worker that died
    mid-round left one running); engine errors are logged."""
    try:
        found = engine.list_containers(
            [f"{ROUND_LABEL}={round_id}", f"{machine_lock.HOST_LABEL}={host}"]
        )
    except engine.EngineError:
        log.exception("round %s: could not list its containers", round_id)
        return
    for container in found:
        try:
            engine.kill(str(container["Id"]))
            engine.remove_container(str(container["Id"]))
        except engine.EngineError:
            log.exception("round %s: could not remove container %s", round_id, container["Id"])


def run_round(round_id: int) -> None:
    """Run the round ``round_id`` on this scoring host and record what it saw, once.

    Idempotent: a round that ``round_claim`` does not hand to this host (already running
    elsewhere, finished, a redelivered message) is left alone. A host that is not ready
    (the engine, the lock, the health gates), draining, or drained by its calibration
    claims nothing and sends the round back to wait (``round_wait_for_capacity``). The
    outcome is recorded once the machine is released; a bug of ours records a void round
    (then re-raises), so a claimed round is settled by this host or, had the worker died,
    by its stale heartbeat (``round_void_stale``).
    """
    try:
        host = machine_lock.scoring_host()
    except engine.EngineError as exc:
        log.error("round %s: cannot name the scoring host: %s", round_id, exc)
        round_wait_for_capacity(round_id, reason="the container engine did not answer")
        return
    if not hosts.accepts_work(host):
        log.info("round %s: host %s takes no new work; the round waits", round_id, host)
        round_wait_for_capacity(round_id, reason=f"host {host} takes no new work")
        return

    def reschedule(reason: str) -> None:
        round_wait_for_capacity(round_id, reason=f"host {host}: {reason}")

    outcome: RoundOutcome | None = None
    try:
        with machine_lock.hold(reschedule=reschedule) as session:
            if not calibration.keep_calibrated(session):
                round_wait_for_capacity(round_id, reason=f"host {host} drained by calibration")
                return
            claim = round_claim(round_id, session.host)
            if claim is None:
                return
            outcome = void_outcome(round_id, session.host, "platform error: interrupted")
            try:
                outcome = run_claimed(claim, session)
            except Exception:
                log.exception("round %s: internal error", round_id)
                outcome = void_outcome(round_id, session.host, "platform error: internal error")
                raise
    except machine_lock.MachineWaiting as waiting:
        log.info("round %s: host %s is not ready: %s", round_id, host, waiting)
    finally:
        if outcome is not None:
            round_record(outcome)


def run_claimed(claim: RoundClaim, session: machine_lock.Session) -> RoundOutcome:
    """A claimed round on the held machine, its heartbeat beating meanwhile."""
    round_id = claim.round_id
    remove_round_containers(round_id, session.host)  # a dead worker's, on a redelivery
    try:
        plan = plan_of(claim)
        supervisor, supervisor_sha256 = _supervisor()
    except (staging.StagingError, runner.SupervisorError) as exc:
        return void_outcome(round_id, session.host, _fault(exc))
    slot = Slot(
        round_id=round_id,
        host=session.host,
        benchmark=plan.benchmark,
        supervisor=supervisor,
        supervisor_sha256=supervisor_sha256,
        gpu_devices=health.gpu_devices(),
        spare=session.spare,
        evidence_dir=round_dir(round_id) / "private",
    )
    heartbeat = RoundHeartbeat(round_id, session.host)
    heartbeat.start()
    try:
        return execute(
            plan,
            slot,
            readings=session.readings,
            lost=lambda: session.heartbeat.lost.is_set() or heartbeat.lost.is_set(),
        )
    finally:
        heartbeat.stop()
