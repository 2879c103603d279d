"""The scored run's sandbox as data: one home for its paths, limits and flags (pure: no
Django).

The scoring worker creates every scored container from :func:`container_spec`
(``scoring.run.runner.container_spec`` adds the host's own parts: its GPUs and its
scoring CPUs), and the portal publishes the very same spec for a benchmark
(``GET /api/v1/benchmarks/{slug}/sandbox/``) so that ``podium run --local`` can start an
entry under the flags, limits and supervisor that score it. Nothing here reads a
setting: the caller passes the uids, the warm start's budget and the OOM score.

The spec is the keyword arguments of ``scoring.engine.create_container`` (the Docker
SDK's ``containers.create``): ``tmpfs`` maps a folder to its mount options, ``mounts``
are the engine API's bind mounts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from portal.contests.rules import RUN_ENTRYPOINT

# Paths inside the scoring container (docs/rules.md, "The runtime ABI").
SUPERVISOR_PATH = "/podium/supervise"
INPUT_DIR = "/contest/input"
MANIFEST_NAME = "manifest.tsv"
IMAGES_NAME = "images"
MANIFEST_PATH = f"{INPUT_DIR}/{MANIFEST_NAME}"
IMAGE_ROOT = f"{INPUT_DIR}/{IMAGES_NAME}"
# The entrant's scratch space: a tmpfs inside the container, not the worker's /tmp.
SCRATCH_DIR = "/tmp"  # noqa: S108 - a path inside the container
OUTPUT_DIR = "/contest/output"
OUTPUT_PATH = f"{OUTPUT_DIR}/predictions.i32"
LOG_DIR = "/contest/logs"
SHM_DIR = "/dev/shm"  # noqa: S108 - a path inside the container

# The entrant's stdout/stderr files live on their own tmpfs: a log flood fills it and
# gets ENOSPC instead of eating the entrant's /tmp or the host's disk. It belongs to the
# supervisor's uid (mode 0700): the entrant writes its logs only through the stdout and
# stderr the supervisor gave it, and can neither reach the files nor add any.
LOG_TMPFS_BYTES = 64 * 1024 * 1024
# Inode caps of the writable tmpfs mounts (each counts its own folder too). Empty files
# use no blocks, so ``size=`` alone does not stop a flood of them: a million take
# seconds and a gigabyte of kernel memory. At the cap, creating a file fails at once
# with ENOSPC. The output folder holds one file (and perhaps a temporary one to rename).
SCRATCH_INODES = 65_536
SHM_INODES = 32_768
OUTPUT_INODES = 64
LOG_INODES = 8
# How much of each log's end the supervisor carries back on its result line; keeps
# the line far below the json-file log cap below.
TAIL_BYTES = 64 * 1024
LOG_MAX_SIZE = "16m"
# The host's outer timer waits this long past the limit (and the warm start's bound), so
# that the supervisor, which kills at the limit itself, can kill, reap and report before
# the host gives up on it: a tenth of the limit, between 1 and 10 seconds.
MIN_MARGIN_MS = 1_000
MAX_MARGIN_MS = 10_000
# Before its clock starts, the supervisor waits this long for the engine to finish
# starting the container (runc, containerd, dockerd answering the start and our wait):
# on a small host that work otherwise competes with the entrant's first milliseconds.
SETTLE_MS = 20
# The engine must never run an image's HEALTHCHECK beside the supervisor: outside its
# process tree and its seccomp filter, a health check could renice or re-limit PID 1
# and compute off the clock.
NO_HEALTHCHECK: Mapping[str, list[str]] = {"test": ["NONE"]}
# What holds the system calls (see :func:`container_spec`): the engine's default
# profile, and the supervisor's own filter, compiled into its binary.
SECCOMP = "engine default, plus the supervisor's filter on the entrant's processes"

# The warm start (docs/rules.md, "The warm start"; ``scoring.run.prewarm``).
MIB = 1 << 20
GIB = 1 << 30
# The default byte budget (``PODIUM_PREWARM_BYTES`` overrides it per host): 2 GiB holds a
# CPU PyTorch or ONNX Runtime image (about 1 to 1.5 GiB of files) and a checkpoint of a
# few hundred MiB, besides the cohort. It is never more than half the run's memory limit
# (:func:`prewarm_bounds`): the pages read are charged to the container's memory cgroup,
# and a budget past what the cgroup keeps would only evict what was read first.
PREWARM_DEFAULT_BYTES = 2 * GIB
# Names (files, folders, links) the walk visits at most: a Python image with PyTorch has
# about 30,000; a hostile image with millions of empty files stops here.
PREWARM_DEFAULT_NAMES = 65_536
# The floor rates the time bound is sized from: far below what a healthy scoring host
# does (bench/prewarm.py, caches dropped, through fuse-overlayfs on a 2-CPU VM: 0.64 s per
# GiB, about 1.6 GiB/s, and 5,800 small files/s), so that the bound stops a stalled or
# pathological walk, never a healthy one.
PREWARM_FLOOR_BYTES_PER_S = 64 * MIB
PREWARM_FLOOR_NAMES_PER_S = 1_000
# Beyond the rates: the first lookups of a fresh container's mounts.
PREWARM_FIXED_MS = 1_000

# ELF machine numbers of the platforms a supervisor binary is built for.
_ELF_MACHINES = {62: "linux/amd64", 183: "linux/arm64"}


class RunLimits(Protocol):
    """A benchmark's limits of one scored run (``portal.contests.models.Benchmark``)."""

    @property
    def score_timeout_s(self) -> int: ...
    @property
    def run_memory_bytes(self) -> int: ...
    @property
    def run_pids_limit(self) -> int: ...
    @property
    def run_tmpfs_bytes(self) -> int: ...
    @property
    def run_shm_bytes(self) -> int: ...
    @property
    def run_output_tmpfs_bytes(self) -> int: ...


@dataclass(frozen=True)
class PrewarmBounds:
    """What the supervisor's warm start is given; ``budget_bytes`` 0 turns it off."""

    budget_bytes: int
    names: int
    time_ms: int  # the walk's own time bound, and what the outer timer allows for it


def prewarm_bounds(*, run_memory_bytes: int, budget_bytes: int | None = None) -> PrewarmBounds:
    """The walk's bounds for a run with ``run_memory_bytes`` of memory.

    ``budget_bytes``: the host's setting (``PODIUM_PREWARM_BYTES``), None for
    :data:`PREWARM_DEFAULT_BYTES`; capped at half of ``run_memory_bytes``. The time bound
    is the budget at :data:`PREWARM_FLOOR_BYTES_PER_S` plus the names at
    :data:`PREWARM_FLOOR_NAMES_PER_S` plus :data:`PREWARM_FIXED_MS`, rounded up; 0 when
    there is no walk.
    """
    budget = PREWARM_DEFAULT_BYTES if budget_bytes is None else budget_bytes
    budget = max(0, min(budget, run_memory_bytes // 2))
    if budget == 0:
        return PrewarmBounds(budget_bytes=0, names=0, time_ms=0)
    bytes_ms = -(-budget * 1000 // PREWARM_FLOOR_BYTES_PER_S)
    names_ms = -(-PREWARM_DEFAULT_NAMES * 1000 // PREWARM_FLOOR_NAMES_PER_S)
    return PrewarmBounds(
        budget_bytes=budget,
        names=PREWARM_DEFAULT_NAMES,
        time_ms=bytes_ms + names_ms + PREWARM_FIXED_MS,
    )


def supervisor_deadline_ms(score_timeout_s: int) -> int:
    """When the supervisor kills the entrant: at the score timeout itself, counted from
    its clock (the whole limit is the entrant's)."""
    return max(1, score_timeout_s * 1000)


def report_margin_ms(score_timeout_s: int) -> int:
    """How long past the limit the host's outer timer still waits for the supervisor to
    kill, reap and report: a tenth of the limit, between :data:`MIN_MARGIN_MS` and
    :data:`MAX_MARGIN_MS`."""
    return min(MAX_MARGIN_MS, max(MIN_MARGIN_MS, score_timeout_s * 1000 // 10))


def outer_timeout_s(score_timeout_s: int, warm: PrewarmBounds) -> float:
    """The host's outer timer: the score timeout plus the warm start's time bound plus the
    report margin (:func:`report_margin_ms`).

    It never fires before the supervisor's deadline: that deadline
    (:func:`supervisor_deadline_ms`, the limit counted from the supervisor's clock) ends
    at most the walk's time bound (the supervisor stops the walk there) plus the settle
    time after the host's start; the margin (at least a second) covers the settle time,
    the kill, the reaping and the report.
    """
    return score_timeout_s + (warm.time_ms + report_margin_ms(score_timeout_s)) / 1000


def check_uids(run_uid: int, supervisor_uid: int) -> None:
    """Raise ValueError unless the entrant's and the supervisor's uids differ and neither
    is root."""
    if run_uid == 0 or supervisor_uid in (0, run_uid):
        raise ValueError(
            f"the entrant's uid ({run_uid}) and the supervisor's ({supervisor_uid}) must "
            "differ and neither may be root"
        )


def container_spec(
    *,
    image: str,
    limits: RunLimits,
    supervisor: str,
    input_dir: str,
    expect_bytes: int,
    run_uid: int,
    supervisor_uid: int,
    warm: PrewarmBounds,
    labels: Mapping[str, str] | None = None,
    oom_score_adj: int | None = None,
    image_volumes: Sequence[str] = (),
) -> dict[str, Any]:
    """The keyword arguments of ``engine.create_container`` for one scored run, without
    the host's GPUs and CPUs: the sandbox of docs/rules.md, "The runtime ABI".

    ``supervisor`` and ``input_dir`` are the host's paths of the supervisor binary and
    the staged input, bind-mounted read-only at :data:`SUPERVISOR_PATH` and
    :data:`INPUT_DIR`. See ``scoring.run.runner.container_spec`` for why each flag is
    there (two uids, the seccomp filter, the image's declared volumes).
    """
    check_uids(run_uid, supervisor_uid)
    # Docker ignores tmpfs ``mode=`` where the image already has the folder (the copy-up
    # keeps the image's owner and mode), so ownership is given explicitly too.
    owned = f"uid={run_uid},gid={run_uid},mode=0700"
    no_exec = "rw,noexec,nosuid,nodev"
    spec: dict[str, Any] = {
        "image": image,
        "entrypoint": [
            SUPERVISOR_PATH,
            "--deadline-ms",
            str(supervisor_deadline_ms(limits.score_timeout_s)),
            "--log-dir",
            LOG_DIR,
            "--output",
            OUTPUT_PATH,
            "--expect-bytes",
            str(expect_bytes),
            "--tail-bytes",
            str(TAIL_BYTES),
            "--settle-ms",
            str(SETTLE_MS),
            "--prewarm-bytes",
            str(warm.budget_bytes),
            "--prewarm-files",
            str(warm.names),
            "--prewarm-ms",
            str(warm.time_ms),
            "--supervisor-user",
            f"{supervisor_uid}:{supervisor_uid}",
            "--entrant-user",
            f"{run_uid}:{run_uid}",
            "--",
            RUN_ENTRYPOINT,
            MANIFEST_PATH,
            IMAGE_ROOT,
            OUTPUT_PATH,
        ],
        "command": [],
        # Root for the supervisor's first instructions only.
        "user": "0:0",
        # The only writable scratch space, so relative writes of the entrant work.
        "working_dir": SCRATCH_DIR,
        "environment": [],
        "labels": dict(labels or {}),
        "network_mode": "none",
        "read_only": True,
        "cap_drop": ["ALL"],
        "cap_add": ["SETUID", "SETGID", "SETPCAP"],
        "security_opt": ["no-new-privileges"],
        "healthcheck": {key: list(value) for key, value in NO_HEALTHCHECK.items()},
        "pids_limit": limits.run_pids_limit,
        "mem_limit": limits.run_memory_bytes,
        "memswap_limit": limits.run_memory_bytes,
        "tmpfs": {
            SCRATCH_DIR: (
                f"rw,exec,nosuid,nodev,size={limits.run_tmpfs_bytes},"
                f"nr_inodes={SCRATCH_INODES},{owned}"
            ),
            SHM_DIR: f"{no_exec},size={limits.run_shm_bytes},nr_inodes={SHM_INODES},{owned}",
            OUTPUT_DIR: (
                f"{no_exec},size={limits.run_output_tmpfs_bytes},nr_inodes={OUTPUT_INODES},{owned}"
            ),
            LOG_DIR: (
                f"{no_exec},size={LOG_TMPFS_BYTES},nr_inodes={LOG_INODES},"
                f"uid={supervisor_uid},gid={supervisor_uid},mode=0700"
            ),
        },
        # ``mounts`` (not ``binds``): a missing source is an error instead of a new,
        # empty folder created by the engine.
        "mounts": [
            {"Type": "bind", "Source": supervisor, "Target": SUPERVISOR_PATH, "ReadOnly": True},
            {"Type": "bind", "Source": input_dir, "Target": INPUT_DIR, "ReadOnly": True},
        ],
        "log_config": {"type": "json-file", "config": {"max-size": LOG_MAX_SIZE}},
        "init": False,
    }
    for path in image_volumes:
        if path not in spec["tmpfs"]:
            spec["tmpfs"][path] = f"ro,{no_exec.removeprefix('rw,')},size=4k,nr_inodes=16"
    if oom_score_adj is not None:
        spec["oom_score_adj"] = int(oom_score_adj)
    return spec


def elf_platform(head: bytes) -> str | None:
    """The platform (``linux/amd64``, ``linux/arm64``) a 64-bit little-endian ELF binary
    is built for, from its first 20 bytes; None for anything else."""
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return None
    return _ELF_MACHINES.get(int.from_bytes(head[18:20], "little"))


# The submission build (``scoring.build.builds``): build.sh in the environment image.

BUILD_SHELL = "/bin/sh"
BUILD_WORKDIR = "/submission"
# build.sh is optional: without one the source is committed as it is.
BUILD_SCRIPT = (
    "if [ -f /submission/build.sh ]; then exec /bin/sh /submission/build.sh 2>&1; "
    "else echo 'No /submission/build.sh; nothing to build.'; fi"
)
BUILD_LOG_MAX_SIZE = "10m"


def build_container_spec(*, image: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The keyword arguments of the container that runs build.sh in ``image`` (the
    environment image, with the source unpacked at :data:`BUILD_WORKDIR`), without the
    build worker's own bounds (its network, cgroup, memory, CPUs and disk cap)."""
    return {
        "image": image,
        "command": [BUILD_SHELL, "-c", BUILD_SCRIPT],
        "entrypoint": [],  # the environment's ENTRYPOINT must not wrap build.sh
        "working_dir": BUILD_WORKDIR,
        "user": "0",
        "labels": dict(labels or {}),
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "healthcheck": {key: list(value) for key, value in NO_HEALTHCHECK.items()},
        "log_config": {"type": "json-file", "config": {"max-size": BUILD_LOG_MAX_SIZE}},
    }
