"""What confines one build: the checked network, a cgroup of its own, and a guard.

A build (an environment's Dockerfile or a submission's build.sh) runs entrant code, so
:func:`sandbox` gives it, for its whole length:

- **the build network**, checked first (:func:`scoring.build.buildnet.require`): a build never
  starts unfiltered, and the guard checks again while it runs;
- **a cgroup of its own**, ``<PODIUM_BUILD_CGROUP_PARENT>/<job>``, that every container of
  the build is made under: it carries the PID bound (the engine's build API has no PID
  limit for RUN steps) and tells afterwards whether the build reached it, so a fork
  bomb is named as one;
- **memory, swap and CPU bounds** on every container (``engine.BuildBounds``), on the
  CPUs that do not score (``portal.core.cpus``);
- **a disk cap** that fails closed: a guard thread reads each build container's
  writable-layer size every :data:`GUARD_PERIOD_S` and kills one that wrote more than the
  cap. Per storage driver:

  - *overlay2, fuse-overlayfs*: the engine's ``SizeRw``; where the engine cannot compute
    it (it reports ``-1``, for example once a path is about 4 KB long), the guard measures
    the upper directory (``GraphDriver.Data.UpperDir``) itself with :func:`layer_bytes`,
    a walk relative to directory descriptors that no path length stops. overlay2 on XFS
    with project quotas would take ``--storage-opt size``, but the build API has no such
    option for RUN steps, so the guard is what enforces the cap there too;
  - *any other driver* (vfs, btrfs, zfs, devicemapper, the containerd image store): the
    engine's ``SizeRw`` where it reports one; where it does not there is no upper
    directory to measure, so the size counts as over the cap and the step is stopped.

  A size that cannot be measured is never taken as zero: the step is stopped as over
  the cap. For RUN steps the cap is checked, not enforced by the kernel: a step can
  overshoot it by what it writes in one :data:`GUARD_PERIOD_S` (plus one measurement).
  build.sh's container is made by Podium, so it also gets the kernel's quota where the
  storage driver keeps one (``--storage-opt size``: overlay2 on XFS mounted with
  ``pquota``, btrfs, zfs): :meth:`Box.create_container` asks for it and, on an engine
  whose driver refuses the option, makes the container without it (the guard alone
  then holds the cap). The build log says which;
- **no GPU**: build.sh's container runs with the plain runtime (``runc``) and
  ``NVIDIA_VISIBLE_DEVICES=void`` (``engine.BuildBounds.host_config``), whatever the
  engine's default runtime and the image's ENV. The build API has no runtime option and
  a build argument does not override an image's ENV, so a RUN step gets the engine's
  default runtime. What keeps GPUs from it is the Dockerfile Podium builds: an ``ENV
  NVIDIA_VISIBLE_DEVICES=void`` right after every ``FROM``
  (``dockerfile_policy.salt_build_cache``), which the NVIDIA hook obeys, so an honest
  CUDA image builds on any engine. A step whose environment would still hand it GPUs
  on an engine whose default runtime is not ``runc`` (the entrant's own later ``ENV``
  asked for them) is killed by the guard within one :data:`GUARD_PERIOD_S` of its start,
  and the build fails saying why.

The cgroup is made directly in the cgroup filesystem, which works with the engine's
``cgroupfs`` driver (cgroup v1 or v2); an engine on the ``systemd`` driver is refused
as a platform error, never built on without bounds.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connections

from portal.core import cpus
from scoring import engine
from scoring.build import buildnet

log = logging.getLogger(__name__)

# The engines (by ``docker info`` ID) whose storage driver refused a size quota: asked
# once per worker process, never again.
_NO_SIZE_QUOTA: set[str] = set()

CGROUP_ROOT = Path("/sys/fs/cgroup")
GUARD_PERIOD_S = 1.0
# A layer within this of its kernel quota is taken as full (the quota counts blocks,
# with the filesystem's own rounding).
QUOTA_SLACK_BYTES = 1 << 20
# The live rules are checked again this often while a build runs.
RECHECK_PERIOD_S = 10.0
_JOB = re.compile(r"[a-z]+-\d+")
_PLAIN_RUNTIMES = {engine.BUILD_RUNTIME, "io.containerd.runc.v2", "io.containerd.runtime.v1.linux"}


class SandboxError(Exception):
    """The sandbox could not be made: a platform fault, never the entrant's."""


class Unmeasurable(OSError):
    """A writable layer's size could not be measured (the guard then counts it as over
    the cap)."""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A directory replaced (or removed) between the listing and the open is skipped: what
# stands there now is counted at the next check.
_GONE = (FileNotFoundError, NotADirectoryError)


def layer_bytes(top: str) -> int:
    """The disk blocks (``st_blocks * 512``) under directory ``top``, ``top`` included.

    Every directory is opened relative to its parent's descriptor and every entry stat'ed
    relative to its directory's (``openat``/``fstatat``), so no path string is ever built
    and no path length stops the walk; the walk is iterative and holds one directory
    open at a time (it climbs back through ``..``, checked against the directory it left),
    so no depth exhausts the stack or the descriptors. Symbolic links count as
    themselves and are never followed; a file with several hard links counts once.
    Entries removed while the walk runs are skipped. Raises :class:`Unmeasurable` (an
    ``OSError``) when the tree cannot be walked or changed shape under it.
    """
    seen: set[tuple[int, int]] = set()
    fd = os.open(top, _DIR_FLAGS)
    try:
        here = os.fstat(fd)
        total = here.st_blocks * 512
        subdirs, size = _scan(fd, seen)
        total += size
        stack: list[tuple[tuple[int, int], list[str]]] = [((here.st_dev, here.st_ino), subdirs)]
        while stack:
            pending = stack[-1][1]
            if pending:
                try:
                    child = os.open(pending.pop(), _DIR_FLAGS, dir_fd=fd)
                except _GONE:
                    continue
                except OSError as exc:
                    if exc.errno == errno.ELOOP:  # now a symbolic link: counted next time
                        continue
                    raise
                os.close(fd)
                fd = child
                here = os.fstat(fd)
                subdirs, size = _scan(fd, seen)
                total += size
                stack.append(((here.st_dev, here.st_ino), subdirs))
                continue
            stack.pop()
            if not stack:
                break
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            here = os.fstat(fd)
            if (here.st_dev, here.st_ino) != stack[-1][0]:
                raise Unmeasurable(f"a directory under {top} moved while it was measured")
        return total
    finally:
        os.close(fd)


def _scan(fd: int, seen: set[tuple[int, int]]) -> tuple[list[str], int]:
    """One directory's entries: the names of its subdirectories and the blocks of every
    entry (a subdirectory's own blocks included, a hard-linked file's only once)."""
    subdirs: list[str] = []
    size = 0
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(info.st_mode):
                subdirs.append(entry.name)
            elif info.st_nlink > 1:
                key = (info.st_dev, info.st_ino)
                if key in seen:
                    continue
                seen.add(key)
            size += info.st_blocks * 512
    return subdirs, size


def writable_layer_bytes(details: dict[str, Any]) -> int | None:
    """The bytes a container wrote to its own layer, measured in the upper directory its
    ``docker inspect`` names (overlay2, fuse-overlayfs); None when it names none or the
    walk fails."""
    upper = ((details.get("GraphDriver") or {}).get("Data") or {}).get("UpperDir")
    if not upper:
        return None
    try:
        return layer_bytes(str(upper))
    except OSError:
        log.warning("could not measure the writable layer %s", upper, exc_info=True)
        return None


def _still_running(container_id: str) -> bool:
    """Whether a build container is still running (or paused), asked again now: one whose
    step ended between the listing and the measurement has no layer left to measure, and
    no step is stopped for that."""
    try:
        state = engine.inspect_container(container_id).get("State") or {}
    except engine.NoSuchObject:
        return False
    return bool(state.get("Running") or state.get("Paused"))


def hands_gpus(details: dict[str, Any]) -> bool:
    """Whether a container's runtime would give it GPUs: a runtime other than the plain
    one, with an environment that asks the NVIDIA hook for devices (see the module
    docstring)."""
    runtime = str((details.get("HostConfig") or {}).get("Runtime") or engine.BUILD_RUNTIME)
    if runtime in _PLAIN_RUNTIMES:
        return False
    env: dict[str, str] = {}
    for item in (details.get("Config") or {}).get("Env") or []:
        name, _, value = str(item).partition("=")
        env[name] = value
    visible = env.get("NVIDIA_VISIBLE_DEVICES")
    if visible is None:
        return bool(env.get("CUDA_VERSION"))  # legacy CUDA images: the hook assumes "all"
    return visible.strip() not in {"", "void", "none"}


class Guard(threading.Thread):
    """Watches every container on the build network while a build runs.

    Kills a container of its own build (made under ``cgroup_parent``, which the build
    set through the engine and no entrant can change) whose writable layer grew past
    ``disk_cap_bytes`` or whose size cannot be known, one whose runtime hands it GPUs,
    and every container on the network if the firewall rules stop being in place.
    ``killed`` holds the ids it killed for the disk cap (``unmeasured`` those among them
    whose size could not be measured); ``gpu_killed`` those killed for GPUs;
    ``unfiltered`` the problems found, if the rules went missing.
    """

    def __init__(self, network: str, cgroup_parent: str, disk_cap_bytes: int) -> None:
        super().__init__(daemon=True, name=f"build-guard-{cgroup_parent}")
        self.network = network
        self.cgroup_parent = cgroup_parent
        self.disk_cap_bytes = disk_cap_bytes
        self.killed: set[str] = set()
        self.unmeasured: set[str] = set()
        self.gpu_killed: set[str] = set()
        self.unfiltered: list[str] = []
        self._stopping = threading.Event()

    def run(self) -> None:
        # The rules are checked on a thread of their own: a slow check (iptables waiting
        # for its lock, the database for its row) never holds up the disk cap.
        rules = threading.Thread(target=self._rules_loop, daemon=True, name=f"{self.name}-rules")
        rules.start()
        while not self._stopping.wait(GUARD_PERIOD_S):
            try:
                self._enforce_disk_cap()
            except engine.EngineError:
                log.warning("build guard: the engine did not answer", exc_info=True)
        rules.join(10)

    def _rules_loop(self) -> None:
        try:
            while not self._stopping.wait(RECHECK_PERIOD_S):
                try:
                    self._enforce_rules()
                except Exception:  # the check is tried again next period, never dropped
                    log.warning("build guard: the rules could not be checked", exc_info=True)
        finally:
            connections.close_all()  # this thread's own database connection, if it made one

    def _enforce_disk_cap(self) -> None:
        """Check every container of this build: its size (the engine's, or measured when
        the engine reports none; unknown counts as over the cap) and its runtime."""
        for container in engine.containers_on_network(self.network, sizes=True):
            container_id = str(container["Id"])
            if container_id in self.killed or container_id in self.gpu_killed:
                continue
            reported = container.get("SizeRw")  # -1 or absent: the engine could not tell
            known = reported if isinstance(reported, int) and reported >= 0 else None
            try:
                details = engine.inspect_container(container_id)
            except engine.NoSuchObject:
                continue  # the step ended since the listing
            if (details.get("HostConfig") or {}).get("CgroupParent") != self.cgroup_parent:
                continue
            if hands_gpus(details):
                log.warning("build container %s would see GPUs: killed", container_id[:12])
                engine.kill(container_id)
                self.gpu_killed.add(container_id)
                continue
            written = known if known is not None else writable_layer_bytes(details)
            if written is not None and written <= self.disk_cap_bytes:
                continue
            if written is None and not _still_running(container_id):
                continue  # it ended since the listing (its layer went with it): it writes no more
            log.warning(
                "build container %s wrote %s bytes, over the %d cap: killed",
                container_id[:12],
                "an unknown number of" if written is None else f"{written:d}",
                self.disk_cap_bytes,
            )
            engine.kill(container_id)
            self.killed.add(container_id)
            if written is None:
                self.unmeasured.add(container_id)

    def _enforce_rules(self) -> None:
        report = buildnet.check()
        if report.enforced:
            return
        log.error("build network rules went missing mid-build: %s", report.problems)
        self.unfiltered = report.problems
        for container in engine.containers_on_network(self.network):
            engine.kill(str(container["Id"]))

    def stop(self) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(10)


class Cgroup:
    """A build's own cgroup (cgroupfs layout), made before and removed after the build."""

    def __init__(self, job: str, pids_limit: int) -> None:
        if not _JOB.fullmatch(job):
            raise ValueError(f"not a build job name: {job!r}")
        self.relative = f"{settings.PODIUM_BUILD_CGROUP_PARENT.strip('/')}/{job}"
        self.pids_limit = pids_limit
        self.unified = (CGROUP_ROOT / "cgroup.controllers").exists()
        pids_root = CGROUP_ROOT if self.unified else CGROUP_ROOT / "pids"
        self.pids_dir = pids_root / self.relative

    @property
    def parent(self) -> str:
        """What the engine takes as ``cgroup_parent``."""
        return "/" + self.relative

    def create(self) -> None:
        try:
            if self.unified:
                self._enable_controllers()
            self.pids_dir.mkdir(parents=True, exist_ok=True)
            (self.pids_dir / "pids.max").write_text(str(self.pids_limit))
        except OSError as exc:
            raise SandboxError(f"the build's cgroup could not be made: {exc}") from exc

    def _enable_controllers(self) -> None:
        """cgroup v2: a controller's files exist in a group only once every ancestor
        delegates it (``cgroup.subtree_control``)."""
        current = CGROUP_ROOT
        for part in ["", *self.relative.split("/")]:
            current = current / part if part else current
            current.mkdir(exist_ok=True)
            wanted = {"pids", "memory", "cpu"} & set(
                (current / "cgroup.controllers").read_text().split()
            )
            (current / "cgroup.subtree_control").write_text(
                " ".join(f"+{name}" for name in sorted(wanted))
            )

    def reached_limit(self) -> bool:
        """Whether the build's processes reached the PID bound: a fork was refused here
        (``pids.events``), or the group's peak count (``pids.peak``, where the kernel
        keeps one) met the limit, which is where forks start failing. Newer kernels count
        a refused fork in the group that forked, a step container's group that is gone
        by now, so the peak is what tells."""
        with contextlib.suppress(OSError, ValueError):
            for line in (self.pids_dir / "pids.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "max" and int(value) > 0:
                    return True
        with contextlib.suppress(OSError, ValueError):
            return int((self.pids_dir / "pids.peak").read_text()) >= self.pids_limit
        return False

    def remove(self) -> None:
        """Remove the group once the engine removed its containers' groups (best effort:
        a leftover empty group holds nothing)."""
        for _ in range(20):
            try:
                self.pids_dir.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.25)
        log.warning("could not remove the build cgroup %s", self.pids_dir)


@dataclass
class Box:
    """A running build's confinement: its bounds for the engine, and what to tell."""

    bounds: engine.BuildBounds
    disk_cap_bytes: int
    cgroup: Cgroup
    guard: Guard
    kernel_quota: bool = False  # the last container made holds a kernel size quota

    def create_container(self, **spec: Any) -> str:
        """Create a container of this build (``engine.create_container``'s ``spec`` plus
        :attr:`bounds`), with the storage driver's size quota of :attr:`disk_cap_bytes`
        where the engine keeps one; :attr:`kernel_quota` tells whether it does."""
        spec = {**spec, **self.bounds.host_config()}
        engine_id = str(engine.info().get("ID", ""))
        if engine_id not in _NO_SIZE_QUOTA:
            try:
                container_id = engine.create_container(
                    storage_opt={"size": str(self.disk_cap_bytes)}, **spec
                )
            except engine.EngineError as exc:
                if not engine.refuses_size_quota(exc):
                    raise
                log.info("the engine keeps no size quota per container: %s", exc)
                _NO_SIZE_QUOTA.add(engine_id)
            else:
                self.kernel_quota = True
                return container_id
        self.kernel_quota = False
        return engine.create_container(**spec)

    def cap_note(self) -> str:
        """How the disk cap is held, for the build log."""
        how = (
            "the kernel's quota on this container, and a check every second"
            if self.kernel_quota
            else "a check every second (this host's storage driver keeps no quota)"
        )
        return f"Disk cap {self.disk_cap_bytes:,} bytes, held by {how}\n"

    def explain(self, *, exit_code: int | None, container_id: str = "") -> str:
        """A sentence on which bound ended a failed step, or "" when none did.
        ``container_id``: the failed container, still there, whose kernel quota (if it
        held one) may be what failed it."""
        if self.guard.gpu_killed:
            return (
                "A build step was stopped because it would have run with the host's GPUs "
                "(builds get no GPU; the image asks for them through "
                "NVIDIA_VISIBLE_DEVICES or CUDA_VERSION)."
            )
        if self.guard.unmeasured:
            return (
                "A build step was stopped: how much it wrote to disk could not be measured, "
                f"so it counts as over the cap of {self.disk_cap_bytes:,} bytes."
            )
        if self.guard.killed:
            return (
                f"A build step wrote more than {self.disk_cap_bytes:,} bytes to disk, the "
                "cap, and was stopped."
            )
        if self.kernel_quota and container_id and self._filled(container_id):
            return (
                f"The build filled its disk cap of {self.disk_cap_bytes:,} bytes: writes "
                "past it were refused (No space left on device)."
            )
        if self.cgroup.reached_limit():
            return (
                f"The build reached its limit of {self.bounds.pids_limit:,} processes "
                "(further forks were refused)."
            )
        if exit_code == 137:
            return (
                "A build step was killed, most likely for using more than its "
                f"{self.bounds.memory_bytes:,} bytes of memory."
            )
        return ""

    def _filled(self, container_id: str) -> bool:
        """Whether the container's layer came within :data:`QUOTA_SLACK_BYTES` of its
        quota (a size that cannot be measured tells nothing, and nothing is claimed)."""
        try:
            written = writable_layer_bytes(engine.inspect_container(container_id))
        except engine.EngineError:
            return False
        return written is not None and written >= self.disk_cap_bytes - QUOTA_SLACK_BYTES


def job_name(kind: str, pk: int) -> str:
    return f"{kind}-{pk}"


@contextlib.contextmanager
def sandbox(*, job: str, disk_cap_bytes: int) -> Iterator[Box]:
    """Confine one build (see the module docstring) for the length of the block.

    Raises :class:`scoring.build.buildnet.NotEnforced` when the network rules are not in place
    and :class:`SandboxError` (or :class:`engine.EngineError`) when the bounds cannot be
    set: in every case before anything of the build ran. Afterwards the guard stops and
    the cgroup is removed.
    """
    buildnet.require()
    driver = str(engine.info().get("CgroupDriver", ""))
    if driver != "cgroupfs":
        raise SandboxError(
            f"the engine's cgroup driver is {driver or 'unknown'}; builds need cgroupfs "
            "for their PID bound"
        )
    isolation = cpus.configured()
    cgroup = Cgroup(job, settings.PODIUM_BUILD_PIDS_LIMIT)
    cgroup.create()
    bounds = engine.BuildBounds(
        network=settings.PODIUM_BUILD_NETWORK,
        cgroup_parent=cgroup.parent,
        memory_bytes=settings.PODIUM_BUILD_MEMORY_BYTES,
        pids_limit=settings.PODIUM_BUILD_PIDS_LIMIT,
        cpus=settings.PODIUM_BUILD_CPUS,
        cpuset=isolation.other_cpus,
    )
    guard = Guard(bounds.network, cgroup.parent, disk_cap_bytes)
    guard.start()
    try:
        yield Box(bounds=bounds, disk_cap_bytes=disk_cap_bytes, cgroup=cgroup, guard=guard)
    finally:
        guard.stop()
        cgroup.remove()
