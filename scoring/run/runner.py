"""One timed, scored run of a submission (docs/architecture.md, "The scored run", steps
3 to 7).

``scoring.worker.score_next`` (the Celery task ``scoring.score_next``, a class's wake-up)
claims the next waiting run in the fair order and :func:`execute` scores it;
:func:`score_submission` does the same for one named submission. Either claims with a
conditional update (a redelivered task finds nothing to claim and does nothing); the run
stages the cohort, creates the sandboxed container off the clock, starts it under the
host's outer timer, reads the trusted supervisor's one result line, checks that the
host interval contains the trusted one, and decides the verdict off the clock.

Who is blamed:

- Anything the entrant's code can cause (a crash, a timeout, invalid or wrong output)
  is a verdict (``errored`` / ``failed``): the attempt counts.
- Anything it cannot cause is a platform fault, recorded with
  ``run_record_infra_failure`` (requeued once, refunded the second time): a Docker
  Engine error, a cohort file that no longer matches its frozen hash, a missing or
  malformed supervisor line, a supervisor that did not exit cleanly, host and
  trusted clocks that disagree, or (with a registry) a submission image that cannot
  be pulled or is not the one that was built.

Reasons written to the run are shown to the entrant, so they never carry cohort
member names or host paths; the details go to the worker's log.

Steps 1 and 2 (the machine lock, frozen builds, the health gates) are
``scoring.host.machine``'s; :func:`machine` is their seam. The order is lock, gates, then
claim and stage; a machine that is not ready reschedules the score before anything is
claimed. While the lock is held its heartbeat renews the run's lease every
``PODIUM_LEASE_S / 3`` seconds, so the reaper settles the run of a dead worker within
``PODIUM_LEASE_S`` plus its own period.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from django.conf import settings

from podium_policy import verdict
from portal.contests import rules, sandbox
from portal.contests.models import Benchmark
from portal.core import cpus, storage
from portal.hosts.selectors import noise_band_percent
from portal.hosts.speed import run_host_speed_rescore
from portal.submissions.final import run_record_final
from portal.submissions.models import Run, Submission
from portal.submissions.runs import (
    run_claim,
    run_mark_running,
    run_record_infra_failure,
    run_record_verdict,
    submission_machine_waits,
)
from portal.submissions.verification import official_run, run_record_verification
from scoring import engine
from scoring.cohort import staging
from scoring.cohort.staging import StagedRun
from scoring.host import gpus, health, speed
from scoring.host import machine as machine_lock
from scoring.images import registry
from scoring.run import gpumeter, meter, prewarm

log = logging.getLogger(__name__)

# What the supervisor writes to its own stderr once its warm start is over, right before
# its clock: a run the host's outer timer stops without it was stopped on our side of
# the line (a platform fault), never on the entrant's.
PREWARMED = b"supervise: prewarmed\n"
RUN_LOG = storage.RUN_LOG
# The memory limit covers the container's tmpfs mounts, so an entrant can fill it with
# files that outlive its processes; if the OOM killer then picked the supervisor, the
# run would end without a result line (a platform fault: a free retry). The supervisor
# raises the entrant's oom_score_adj to 1000, but the entrant may lower it again, down
# to the minimum set by the engine's privileged write of this value (-1000: the OOM
# killer never picks PID 1). Lowering a score needs CAP_SYS_RESOURCE in the engine:
# a rootful engine has it; a rootless or nested one fails every start with it. So it is
# the setting ``PODIUM_RUN_OOM_SCORE_ADJ`` (None: not asked for), to be -1000 wherever
# the engine allows it.
RUN_OOM_SCORE_ADJ_SETTING = "PODIUM_RUN_OOM_SCORE_ADJ"


class SupervisorError(Exception):
    """The supervisor gave no valid result (a platform fault; the message is entrant-safe)."""


@dataclass(frozen=True)
class SupervisorResult:
    """The supervisor's result line, decoded. All times are CLOCK_MONOTONIC nanoseconds."""

    start_ns: int
    end_ns: int
    wall_ns: int
    exit_code: int | None
    signal: int | None
    killed: bool
    rusage: dict[str, int]
    output_bytes: int  # the output file's size, -1 when there was none
    output_error: str  # "" when the output file could be read
    output: bytes | None  # at most expect_bytes + 1 bytes of it; None with output_error
    stdout_tail: bytes
    stderr_tail: bytes
    line: bytes  # the result line itself, kept as evidence for staff
    resources: meter.Resources  # the container's cgroup, read after the tree was reaped
    prewarm: prewarm.Prewarm  # the warm start, before the clock


# The container ------------------------------------------------------------------


def supervisor_deadline_ms(score_timeout_s: int) -> int:
    """When the supervisor kills the entrant: at the score timeout itself."""
    return sandbox.supervisor_deadline_ms(score_timeout_s)


def prewarm_bounds(benchmark: Benchmark) -> sandbox.PrewarmBounds:
    """The warm start's bounds for a run of ``benchmark`` on this host (the host's
    ``PODIUM_PREWARM_BYTES``, or the default; see ``portal.contests.sandbox.prewarm_bounds``)."""
    return sandbox.prewarm_bounds(
        run_memory_bytes=benchmark.run_memory_bytes,
        budget_bytes=settings.PODIUM_PREWARM_BYTES,
    )


def outer_timeout_s(benchmark: Benchmark) -> float:
    """The host's outer timer: the score timeout plus the warm start's time bound plus the
    report margin (``portal.contests.sandbox.outer_timeout_s``)."""
    return sandbox.outer_timeout_s(benchmark.score_timeout_s, prewarm_bounds(benchmark))


def supervisor_uid() -> int:
    """The supervisor's uid and gid in the scoring container (``PODIUM_SUPERVISOR_UID``):
    never the entrant's nor root, so the kernel refuses every prlimit, renice, ionice and
    sched_set* of an entrant process aimed at it, also from processes outside the
    supervisor's seccomp filter."""
    return int(settings.PODIUM_SUPERVISOR_UID)


def container_spec(
    *,
    image: str,
    staged: StagedRun,
    benchmark: Benchmark,
    supervisor: Path,
    expect_bytes: int,
    uid: int | None = None,
    gpu_devices: Sequence[str] = (),
    gpu_cdi: bool = False,
    scoring_cpus: str | None = None,
    image_volumes: Sequence[str] = (),
) -> dict[str, Any]:
    """The keyword arguments of ``engine.create_container`` for one scored run (pure).

    The sandbox of docs/rules.md, "The runtime ABI": no network, read-only root
    filesystem and inputs, the entrant as a non-root ``uid`` (``settings.PODIUM_RUN_UID``
    by default) with no capabilities and no privilege gain, bounded memory (no swap beyond
    it), PIDs, tmpfs sizes and inode counts, no Docker socket, no host environment, no
    health check, a capped container log. The trusted supervisor (a static binary, mounted
    read-only; not Docker's ``--init``) is PID 1 and runs ``/submission/run MANIFEST
    IMAGE_ROOT OUTPUT``.

    Two uids: the supervisor's (:func:`supervisor_uid`) and the entrant's. The container
    starts as root holding only CAP_SETUID, CAP_SETGID and CAP_SETPCAP (bounding set
    included), for the supervisor's first instructions: it empties the bounding set and
    the supplementary groups, becomes its own uid with no capability left, and starts
    the entrant as ``uid`` (see supervise.c). No image code runs before that: the
    entrypoint is the supervisor, and health checks are off.

    Seccomp: no ``seccomp=`` option, on purpose. One would replace Docker's default
    profile; instead the container keeps it and the supervisor stacks its own filter on
    the entrant's process tree, which refuses by itself everything Podium relies on
    (whatever the engine's default allows): ptrace and the like, io_uring, sockets of
    any family but AF_UNIX, new namespaces, keyrings, bpf, perf_event_open, userfaultfd,
    and prlimit64, setpriority, ioprio_set and sched_set* aimed at PID 1; see
    supervise.c. The supervisor's oom_score_adj comes from ``PODIUM_RUN_OOM_SCORE_ADJ``
    (see ``RUN_OOM_SCORE_ADJ_SETTING``).

    GPUs: exactly ``gpu_devices`` (the host's configured GPUs, on a GPU class), through
    ``scoring.host.gpus.container_gpus``; none otherwise.

    Volumes: each path in ``image_volumes`` (the volumes the image's config declares,
    ``engine.image_volumes``) gets an empty read-only tmpfs, so the engine makes no
    anonymous volume there: it would be writable whatever the read-only root, and no
    size counts it. (Builds refuse base images that declare one; this covers an image
    built before that rule.) What the image holds under such a path is not visible.

    CPUs: the container runs on ``scoring_cpus`` (a cpuset; by default this machine's
    ``PODIUM_SCORING_CPUS``, ``portal.core.cpus``), every other Podium process on the rest;
    "" shares every CPU. There is never a CPU quota: a quota's period throttling would
    add to the timing noise, and the cpuset is the limit.
    """
    run_uid = int(settings.PODIUM_RUN_UID if uid is None else uid)
    oom_score_adj = getattr(settings, RUN_OOM_SCORE_ADJ_SETTING, None)
    spec = sandbox.container_spec(
        image=image,
        limits=benchmark,
        supervisor=str(supervisor),
        input_dir=str(staged.input_dir),
        expect_bytes=expect_bytes,
        run_uid=run_uid,
        supervisor_uid=supervisor_uid(),
        warm=prewarm_bounds(benchmark),
        labels={"podium.run": str(staged.run_id)},
        oom_score_adj=None if oom_score_adj is None else int(oom_score_adj),
        image_volumes=image_volumes,
    )
    cpuset = cpus.configured().scoring_cpus if scoring_cpus is None else scoring_cpus
    if cpuset:
        spec["cpuset_cpus"] = cpuset
    gpu_spec = gpus.container_gpus(gpu_devices, cdi=gpu_cdi)
    spec["environment"] = [*spec["environment"], *gpu_spec.pop("environment", [])]
    spec.update(gpu_spec)
    return spec


# The supervisor's result line ------------------------------------------------------


def _field(data: dict[str, Any], key: str, kind: type, *, nullable: bool = False) -> Any:
    value = data.get(key)
    if value is None and nullable and key in data:
        return None
    # ``type(...) is``: JSON true is not an integer here.
    if type(value) is not kind:
        raise SupervisorError(f"the supervisor's result has no valid {key!r}")
    return value


def _b64(data: dict[str, Any], key: str) -> bytes:
    try:
        return base64.b64decode(_field(data, key, str), validate=True)
    except binascii.Error:
        raise SupervisorError(f"the supervisor's result has no valid {key!r}") from None


def parse_supervisor_line(stdout: bytes) -> SupervisorResult:
    """Decode the supervisor's result: the LAST non-empty line of the container's stdout.

    Raises :class:`SupervisorError` (a platform fault) when there is no such line, it
    is not the supervisor's JSON object, or a field is missing, mistyped or
    inconsistent (``wall_ns`` must equal ``end_ns - start_ns``).
    """
    lines = [line for line in stdout.split(b"\n") if line.strip()]
    if not lines:
        raise SupervisorError("the supervisor wrote no result line")
    try:
        data = json.loads(lines[-1])
    except ValueError:  # UnicodeDecodeError is a ValueError too
        raise SupervisorError("the supervisor's result line is not JSON") from None
    if not isinstance(data, dict) or type(data.get("podium_supervisor")) is not int:
        raise SupervisorError("the last line of the container's output is not the supervisor's")
    if data["podium_supervisor"] != 1:
        raise SupervisorError("the supervisor's result has an unknown version")
    start_ns = _field(data, "start_ns", int)
    end_ns = _field(data, "end_ns", int)
    wall_ns = _field(data, "wall_ns", int)
    if not 0 <= start_ns <= end_ns or wall_ns != end_ns - start_ns:
        raise SupervisorError("the supervisor's times are inconsistent")
    raw_rusage = _field(data, "rusage", dict)
    rusage = {key: _field(raw_rusage, key, int) for key in ("utime_us", "stime_us", "maxrss_kb")}
    output_error = _field(data, "output_error", str)
    output_bytes = _field(data, "output_bytes", int)
    output = _b64(data, "output_b64")
    if output_error == "" and output_bytes < 0:
        raise SupervisorError("the supervisor's output fields are inconsistent")
    try:
        resources = meter.from_line(data)
    except ValueError:
        raise SupervisorError("the supervisor's result has no valid meter readings") from None
    try:
        warm_start = prewarm.from_line(data)
    except ValueError:
        raise SupervisorError("the supervisor's result has no valid warm start readings") from None
    return SupervisorResult(
        start_ns=start_ns,
        end_ns=end_ns,
        wall_ns=wall_ns,
        exit_code=_field(data, "exit_code", int, nullable=True),
        signal=_field(data, "signal", int, nullable=True),
        killed=_field(data, "killed", bool),
        rusage=rusage,
        output_bytes=output_bytes,
        output_error=output_error,
        output=None if output_error else output,
        stdout_tail=_b64(data, "stdout_tail_b64"),
        stderr_tail=_b64(data, "stderr_tail_b64"),
        line=lines[-1].strip(),
        resources=resources,
        prewarm=warm_start,
    )


# The run ----------------------------------------------------------------------------


@contextmanager
def machine(submission: Submission, *, waits: int = 0) -> Iterator[machine_lock.Session]:
    """The machine lock and the health gates (docs/architecture.md, "The scored run",
    steps 1 and 2).

    Takes the scoring host's exclusive lock (pausing builds), passes the gates and
    yields a session whose ``readings`` are stored on the run; releases the lock (and
    unpauses the builds) on exit. A machine that is not ready reschedules the
    submission and raises :class:`machine_lock.MachineWaiting` instead of entering
    the block. See ``scoring.host.machine.hold``.
    """
    with machine_lock.hold(submission_id=int(submission.pk), waits=waits) as session:
        yield session


def elapsed_ms(since_ns: int) -> float:
    """Milliseconds since ``since_ns`` (``time.perf_counter_ns``), to the microsecond."""
    return round((time.perf_counter_ns() - since_ns) / 1e6, 3)


def _write_run_log(root: Path, result: SupervisorResult | None, note: str = "") -> None:
    """The entrant's stdout and stderr tails, for the web to show (each bounded by
    ``sandbox.TAIL_BYTES``)."""
    root.mkdir(parents=True, exist_ok=True)
    parts = [note.encode() + b"\n"] if note else []
    if result is not None:
        parts += [b"== stdout ==\n", result.stdout_tail, b"\n== stderr ==\n", result.stderr_tail]
    (root / RUN_LOG).write_bytes(b"".join(parts))


def _keep_evidence(run_id: int, result: SupervisorResult) -> None:
    """For staff review: the supervisor's result line and the output file as read."""
    private = storage.ensure_dir(storage.run_private_dir(run_id))
    files = {storage.RUN_SUPERVISOR: result.line + b"\n"}
    if result.output is not None:
        files[storage.RUN_OUTPUT] = result.output
    for name, data in files.items():
        path = private / name
        path.write_bytes(data)
        path.chmod(0o600)


def clock_started(container_id: str) -> bool:
    """Whether the supervisor of a stopped container got past its warm start (its stderr
    says so, ``PREWARMED``): if not, nothing of the entrant's ran, and whatever stopped
    it is a platform fault."""
    return PREWARMED in engine.logs(container_id, stdout=False, stderr=True)


def _log_supervisor_stderr(run_id: int, container_id: str) -> None:
    """For staff: the end of the supervisor's own stderr (the entrant never writes there)."""
    try:
        stderr = engine.logs(container_id, stdout=False, stderr=True)
    except engine.EngineError:
        return
    if stderr:
        log.error("run %s: supervisor stderr: %s", run_id, stderr[-2000:].decode(errors="replace"))


def score_submission(submission_id: int, waits: int = 0) -> None:
    """Score a queued submission once, or verify a ``verifying`` one: claim, run, record.

    Idempotent: a submission that is neither ``queued`` nor ``verifying`` (already
    claimed, a redelivered task) is left alone, and so is a message whose ``waits`` (how
    many times the submission had waited for the machine when it was sent) is not the
    current count: a stale duplicate of a rescheduled score. Exactly one of the publish
    stage or ``run_record_infra_failure`` settles the claimed run, unless someone else
    (the reaper, staff) settled it first. The container and the staged input are
    removed in every case.
    """
    submission = Submission.objects.select_related("benchmark").filter(pk=submission_id).first()
    if submission is None or submission.status not in Submission.WAITING_FOR_SCORE:
        return
    if waits != submission_machine_waits(submission_id):
        log.info("submission %s: stale score message (waits=%s) ignored", submission_id, waits)
        return
    lease_s = int(settings.PODIUM_LEASE_S)
    try:
        with machine(submission, waits=waits) as session:
            run = run_claim(submission_id, lease_s=lease_s)
            if run is None:
                return
            session.attach(int(run.pk))
            execute(
                run,
                submission,
                lease_s=lease_s,
                readings=session.readings,
                host=session.host,
                spare=session.spare,
            )
    except machine_lock.MachineWaiting as waiting:
        log.info("submission %s waits for the scoring machine: %s", submission_id, waiting)


# The stages of a run ------------------------------------------------------------------
#
# stage -> create -> supervise -> read -> judge -> publish, each a short function with a
# typed result. A platform fault is an exception (engine.EngineError, StagingError,
# SupervisorError); an end the entrant caused before the supervisor could report (the
# host's timer, the memory limit) is an Outcome from ``read``. A score and a
# verification go through the same stages: verification stages the cohort shuffled and
# rewritten, and publishes through ``run_record_verification``.


@dataclass
class Measured:
    """What the run has measured so far: written with its verdict or its platform fault."""

    overhead_ms: dict[str, float] = field(default_factory=dict)
    total: int | None = None
    container_id: str = ""
    host_start_ns: int | None = None
    host_end_ns: int | None = None
    gpu: dict[str, Any] | None = None  # the GPU meter's readings, on a GPU class only
    published_ns: int | None = None  # perf_counter_ns when the verdict was recorded
    # The host's own speed before the run, then judged after it (see host_speed_before).
    speed_before: dict[int, list[int]] | None = None
    host_speed: dict[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        known = {
            "total": self.total,
            "container_id": self.container_id,
            "host_start_ns": self.host_start_ns,
            "host_end_ns": self.host_end_ns,
        }
        speed = (
            {"host_speed": self.host_speed, "host_speed_changed": self.host_speed["changed"]}
            if self.host_speed
            else {}
        )
        return (
            {"overhead_ms": self.overhead_ms}
            | speed
            | {key: value for key, value in known.items() if value not in (None, "")}
        )


@dataclass(frozen=True)
class Container:
    id: str
    supervisor_sha256: str


@dataclass(frozen=True)
class Supervised:
    status_code: int | None  # the container's exit status; None: the host's timer fired
    host_start_ns: int
    host_end_ns: int


@dataclass(frozen=True)
class Outcome:
    """A verdict (passed, failed or errored), its reason and the fields written with it."""

    status: str
    reason: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Image:
    ref: str  # what the container is created from
    pulled: bool  # pulled from the registry for this run: removed from this engine after it


def pull(submission: Submission, measured: Measured) -> Image:
    """Off the clock, first: the submission image on this engine.

    Without a registry (``PODIUM_REGISTRY`` empty) the build's own tag, as is. With one,
    the recorded reference by digest, pulled (layers already here are not fetched again)
    and refused (``registry.ImageRefused``, a platform fault) unless the image's ID is the
    recorded ``image_digest``: a tag pushed over, or a reference changed, never runs. A
    submission built before the registry was configured has no reference: its local tag
    runs only if it is the recorded image.
    """
    if not settings.PODIUM_REGISTRY:
        return Image(submission.image_tag, pulled=False)
    started = time.perf_counter_ns()
    if submission.image_ref:
        registry.pull_verified(submission.image_ref, submission.image_digest)
        image = Image(submission.image_ref, pulled=True)
    else:
        registry.check_local(submission.image_tag, submission.image_digest)
        image = Image(submission.image_tag, pulled=False)
    measured.overhead_ms["pull"] = elapsed_ms(started)
    return image


def stage(run: Run, measured: Measured) -> StagedRun:
    """Step 3: the cohort (or, to verify, a prepared set), in a fresh random order.

    A verification's yardstick is the entrant's own official answers for the same
    members (its images are re-encoded, so the reference answers are not): they replace
    the references, read from the official run's kept evidence before anything is staged.
    A verification and a final run carry canaries, which keep their reference answers.
    """
    started = time.perf_counter_ns()
    verification = run.purpose == Run.VERIFY
    own = _official_answers(run) if verification else None
    staged = staging.stage(
        run, verification=verification, canaries=verification or run.purpose == Run.FINAL
    )
    if own is not None:
        canaries = staged.canaries or [False] * staged.rows
        staged = replace(
            staged,
            references=[
                reference if canary else own[position]
                for reference, canary, position in zip(
                    staged.references, canaries, staged.positions, strict=True
                )
            ],
        )
    measured.overhead_ms["staging"] = elapsed_ms(started)
    measured.total = staged.rows
    return staged


def _official_answers(run: Run) -> dict[int, int]:
    """The answers of the official run that ``run`` verifies, by cohort position, from its
    evidence (``mapping.tsv`` and ``output.bin``). Missing or inconsistent evidence is a
    :class:`staging.StagingError`: the platform's fault, never the entrant's."""
    official = official_run(run.submission)
    if official is None or official.cohort_id != run.cohort_id:
        raise staging.StagingError("The official run this verification checks is not there.")
    private = storage.run_private_dir(int(official.pk))
    try:
        mapping = (private / storage.RUN_MAPPING).read_text(encoding="utf-8").splitlines()
        output = (private / storage.RUN_OUTPUT).read_bytes()
        positions = [int(line.split("\t", 1)[0]) for line in mapping]
    except (OSError, ValueError) as exc:
        log.error("run %s: the official run %s's evidence: %s", run.pk, official.pk, exc)
        raise staging.StagingError("The official run's answers could not be read.") from exc
    if len(output) != 4 * len(positions):
        log.error(
            "run %s: official run %s: %d output bytes for %d rows",
            run.pk,
            official.pk,
            len(output),
            len(positions),
        )
        raise staging.StagingError("The official run's answers could not be read.")
    return {
        position: int.from_bytes(output[4 * row : 4 * row + 4], "little", signed=True)
        for row, position in enumerate(positions)
    }


def declared_volumes(image: str) -> list[str]:
    """The volumes ``image`` declares (see :func:`container_spec`); none when the engine
    cannot show the image (missing, or a reference it refuses): creating the container
    from it then fails on its own, as a platform fault."""
    try:
        return engine.image_volumes(image)
    except engine.EngineError as exc:
        log.warning("cannot read the volumes of image %s: %s", image, exc)
        return []


def sandbox_spec(image: str, staged: StagedRun, benchmark: Benchmark) -> tuple[dict[str, Any], str]:
    """A scored run's container spec for ``image`` over ``staged`` on this host
    (:func:`container_spec` with the benchmark's limits and the host's GPUs), and the
    SHA-256 of the supervisor it mounts. Raises :class:`SupervisorError` when the
    supervisor cannot be read."""
    supervisor = Path(settings.PODIUM_SUPERVISOR)
    try:
        supervisor_sha256 = storage.sha256_file(supervisor)
    except OSError as exc:
        raise SupervisorError("the supervisor binary is missing") from exc
    spec = container_spec(
        image=image,
        staged=staged,
        benchmark=benchmark,
        supervisor=supervisor,
        expect_bytes=4 * staged.rows,
        gpu_devices=health.gpu_devices(),
        gpu_cdi=settings.PODIUM_GPU_CDI,
        image_volumes=declared_volumes(image),
    )
    return spec, supervisor_sha256


def create(
    run: Run,
    image: str,
    staged: StagedRun,
    benchmark: Benchmark,
    measured: Measured,
    *,
    host: str = "",
    spare: Callable[[str], None] | None = None,
) -> Container:
    """Step 4: the sandboxed container, created (not started) off the clock."""
    try:
        spec, supervisor_sha256 = sandbox_spec(image, staged, benchmark)
    except SupervisorError as exc:
        log.error(
            "run %s: cannot read the supervisor %s: %s",
            run.pk,
            settings.PODIUM_SUPERVISOR,
            exc.__cause__,
        )
        raise
    if host:  # whose machine it runs on: the reaper finds it by run and host
        spec["labels"] = {**spec.get("labels", {}), machine_lock.HOST_LABEL: host}
    started = time.perf_counter_ns()
    container_id = engine.create_container(**spec)
    measured.overhead_ms["create"] = elapsed_ms(started)
    measured.container_id = container_id
    if spare is not None:  # before it starts: the freezer pauses any other container
        spare(container_id)
    return Container(id=container_id, supervisor_sha256=supervisor_sha256)


def _probe_speed(measured: Measured) -> dict[int, list[int]] | None:
    """The host's speed now (``scoring.host.speed.probe`` on the scoring CPUs), off the
    clock; None when it is off (``PODIUM_HOST_SPEED_PROBE``) or could not be taken (never
    the entrant's fault: the run is then simply not judged). Its time joins the overhead."""
    if not settings.PODIUM_HOST_SPEED_PROBE:
        return None
    started = time.perf_counter_ns()
    try:
        return speed.probe(cpus.configured().scoring or None)
    except OSError as exc:
        log.warning("the host's speed could not be probed: %s", exc)
        return None
    finally:
        spent = elapsed_ms(started)
        measured.overhead_ms["host_speed"] = measured.overhead_ms.get("host_speed", 0) + spent


def host_speed_before(measured: Measured) -> None:
    """Off the clock, right before the run: the host's speed, kept to compare with."""
    measured.speed_before = _probe_speed(measured)


def host_speed_after(measured: Measured, benchmark: Benchmark) -> None:
    """Off the clock, right after the run: the host's speed again, judged against the
    class's published noise band (``PODIUM_CALIBRATION_DRIFT_PCT`` before one is
    published) and kept in ``measured.host_speed`` (``scoring.host.speed.judge``)."""
    if measured.speed_before is None:
        return
    after = _probe_speed(measured)
    if after is None:
        return
    band = noise_band_percent(benchmark.hardware_class_id)
    band_pct = float(settings.PODIUM_CALIBRATION_DRIFT_PCT) if band is None else band
    try:
        judged = speed.judge(measured.speed_before, after, band_pct)
    except ValueError as exc:
        log.warning("the host's speed could not be judged: %s", exc)
        return
    measured.host_speed = judged.as_json(measured.speed_before, after)


def supervise(container: Container, benchmark: Benchmark, measured: Measured) -> Supervised:
    """Step 5: start it under the host's outer timer, which must contain the trusted one.

    On a GPU class the GPU meter (``scoring.run.gpumeter``, a thread of this worker) samples
    the run's GPUs from just before the start until the container has exited; its
    readings go to ``measured.gpu`` whatever happens (they never fail the run).
    """
    devices = health.gpu_devices()
    gpu_meter = (
        gpumeter.GpuMeter(devices, interval_ms=settings.PODIUM_GPU_SAMPLE_MS) if devices else None
    )
    if gpu_meter is not None:
        gpu_meter.start()
    try:
        host_start = time.monotonic_ns()
        engine.start(container.id)
        left_s = outer_timeout_s(benchmark) - (time.monotonic_ns() - host_start) / 1e9
        status_code = engine.wait(container.id, timeout_s=max(left_s, 1.0))
        host_end = time.monotonic_ns()
        measured.host_start_ns, measured.host_end_ns = host_start, host_end
        if status_code is None:
            engine.kill(container.id)
    finally:
        if gpu_meter is not None:
            measured.gpu = gpu_meter.stop(images=measured.total)
    return Supervised(status_code=status_code, host_start_ns=host_start, host_end_ns=host_end)


def read(
    run: Run,
    container: Container,
    supervised: Supervised,
    staged: StagedRun,
    benchmark: Benchmark,
    measured: Measured,
) -> SupervisorResult | Outcome:
    """Step 6: the supervisor's result line, checked, with the logs and evidence kept.

    An end the entrant caused before the supervisor could report is an Outcome; a
    supervisor that failed or lied about the clock is a platform fault.
    """
    if supervised.status_code is None:
        if not clock_started(container.id):
            # Stopped before the supervisor's clock: while it prewarmed, never the
            # entrant's time.
            raise SupervisorError("the run was stopped before its clock started")
        # The supervisor should have stopped everything before this; whatever held the
        # container past the limit was the entrant's, so the attempt counts.
        reason = f"The run did not finish within the {benchmark.score_timeout_s}-second limit."
        _write_run_log(staged.root, None, note=reason)
        return Outcome(Submission.ERRORED, reason, {"killed": True})
    started = time.perf_counter_ns()
    # The supervisor exits 0 right after its line; anything else means it failed (its
    # own stderr, logged by the caller, says why), never the entrant's doing.
    if (
        supervised.status_code != 0
        and engine.state(container.id).get("OOMKilled")
        and clock_started(container.id)
    ):
        # The container hit its memory limit after the warm start and the kernel took
        # the supervisor: only the entrant's processes can have used that memory, so the
        # attempt counts. (Before the clock nothing of the entrant's ran: our fault.)
        reason = (
            f"The run used more than its {benchmark.run_memory_bytes:,}-byte memory "
            "limit and was stopped."
        )
        _write_run_log(staged.root, None, note=reason)
        return Outcome(Submission.ERRORED, reason)
    if supervised.status_code != 0:
        raise SupervisorError(f"the supervisor exited with status {supervised.status_code}")
    result = parse_supervisor_line(engine.logs(container.id, stdout=True, stderr=False))
    _write_run_log(staged.root, result)
    _keep_evidence(int(run.pk), result)
    measured.overhead_ms["collect"] = elapsed_ms(started)
    if not supervised.host_start_ns <= result.start_ns <= result.end_ns <= supervised.host_end_ns:
        log.error(
            "run %s: host interval [%s, %s] does not contain the trusted [%s, %s]",
            run.pk,
            supervised.host_start_ns,
            supervised.host_end_ns,
            result.start_ns,
            result.end_ns,
        )
        raise SupervisorError("the host clock did not contain the trusted interval")
    return result


def judge(
    result: SupervisorResult, staged: StagedRun, benchmark: Benchmark, measured: Measured
) -> Outcome:
    """Step 7, off the clock: validate the output, compare it, decide."""
    started = time.perf_counter_ns()
    canaries = sum(staged.canaries)
    members = staged.rows - canaries
    if staged.verification:  # agreement with its own official answers (see stage)
        needed = rules.pass_threshold(members, benchmark.verify_self_agreement_pct, 100)
    else:
        needed = rules.pass_threshold(members, benchmark.pass_min_matches, benchmark.cohort_size)
    # Canaries: the official pass rule, against the reference answers.
    canaries_needed = rules.pass_threshold(
        canaries, benchmark.pass_min_matches, benchmark.cohort_size
    )
    expected_bytes = 4 * staged.rows
    output_error = result.output_error
    if not output_error and result.output_bytes > expected_bytes:
        # The supervisor carries at most one byte too many; say the file's real size.
        output_error = (
            f"The output has {result.output_bytes} bytes; "
            f"4 x {staged.rows} = {expected_bytes} were expected."
        )
    decision = verdict.decide(
        output=result.output,
        output_error=output_error,
        exit_code=result.exit_code,
        signal=result.signal,
        killed=result.killed,
        references=staged.references,
        needed=needed,
        yardstick="its official answers" if staged.verification else "the reference",
        canaries=staged.canaries,
        canaries_needed=canaries_needed,
    )
    output_sha256 = "" if result.output is None else hashlib.sha256(result.output).hexdigest()
    measured.overhead_ms["compare"] = elapsed_ms(started)
    return Outcome(
        decision.status,
        decision.reason,
        {
            "wall_time_ns": result.wall_ns,
            "trusted_start_ns": result.start_ns,
            "trusted_end_ns": result.end_ns,
            "exit_code": result.exit_code,
            "exit_signal": result.signal,
            "killed": result.killed,
            "rusage": result.rusage,
            "matches": decision.matches,
            "output_sha256": output_sha256,
            "resources": result.resources.as_dict()
            | {
                "cpu_per_wall": meter.cpu_per_wall(result.resources, result.wall_ns),
                "prewarm": result.prewarm.as_dict(),
            },
        },
    )


def publish(run: Run, outcome: Outcome, measured: Measured) -> None:
    """The verdict, once: a score's ranks (or goes to verification), a verification's
    confirms or rejects the official run, a final run's is kept for the standings."""
    record = {Run.VERIFY: run_record_verification, Run.FINAL: run_record_final}.get(
        run.purpose, run_record_verdict
    )
    fields = outcome.fields
    if measured.gpu is not None:  # the GPU meter's readings join the cgroup's
        fields = fields | {"resources": {**fields.get("resources", {}), "gpu": measured.gpu}}
    record(
        run_id=int(run.pk),
        status=outcome.status,
        reason=outcome.reason,
        **fields,
        **measured.fields(),
    )


def execute(
    run: Run,
    submission: Submission,
    *,
    lease_s: int,
    readings: dict[str, Any],
    host: str = "",
    spare: Callable[[str], None] | None = None,
    phases_ms: dict[str, float] | None = None,
) -> Measured:
    """One claimed run through the stages, settled exactly once (see the module doc).
    ``phases_ms``: how long taking the machine and claiming the run took (kept with the
    run's overhead). What it measured is returned."""
    run_id = int(run.pk)
    benchmark = submission.benchmark
    measured = Measured(overhead_ms=dict(phases_ms or {}))
    staged: StagedRun | None = None
    container: Container | None = None
    image: Image | None = None
    step = "pulling the submission image"
    try:
        image = pull(submission, measured)
        step = "staging the cohort"
        staged = stage(run, measured)
        step = "creating the container"
        container = create(run, image.ref, staged, benchmark, measured, host=host, spare=spare)
        if not run_mark_running(
            run_id=run_id,
            lease_s=lease_s,
            container_id=container.id,
            supervisor_sha256=container.supervisor_sha256,
            readings=readings,
        ):
            log.warning("run %s was settled by someone else before it started", run_id)
            return measured
        step = "running the container"
        host_speed_before(measured)
        supervised = supervise(container, benchmark, measured)
        host_speed_after(measured, benchmark)
        step = "reading the supervisor's result"
        result = read(run, container, supervised, staged, benchmark, measured)
        step = "deciding the verdict"
        outcome = (
            result if isinstance(result, Outcome) else judge(result, staged, benchmark, measured)
        )
        publish(run, outcome, measured)
        measured.published_ns = time.perf_counter_ns()
        if measured.host_speed.get("changed"):
            run_host_speed_rescore(run_id=run_id)
    except (
        engine.EngineError,
        staging.StagingError,
        SupervisorError,
        registry.ImageRefused,
    ) as exc:
        if isinstance(exc, engine.EngineError):
            log.error("run %s: container engine error while %s: %s", run_id, step, exc)
            reason = f"platform error: the container engine failed while {step}"
        else:
            log.error("run %s: platform fault while %s: %s", run_id, step, exc)
            text = str(exc).rstrip(".")
            reason = f"platform error: {text[:1].lower()}{text[1:]}"
        if isinstance(exc, SupervisorError) and container is not None:
            _log_supervisor_stderr(run_id, container.id)
        run_record_infra_failure(run_id=run_id, reason=reason, **measured.fields())
    except Exception:
        # A bug of ours is never the entrant's fault either; re-raised for the worker log.
        log.exception("run %s: internal error while %s", run_id, step)
        run_record_infra_failure(
            run_id=run_id,
            reason=f"platform error: internal error while {step}",
            **measured.fields(),
        )
        raise
    finally:
        if container is not None:
            try:
                engine.remove_container(container.id)
            except engine.EngineError as exc:
                log.error("run %s: could not remove container %s: %s", run_id, container.id, exc)
        if image is not None and image.pulled:
            registry.discard(image.ref)  # the build host and the registry keep it
        if staged is not None:
            staging.unstage(staged)
    return measured
