"""What confines one build: the checked network, a cgroup of its own, and a guard.

A build (an environment's Dockerfile or a submission's build.sh) runs entrant code, so
:func:`sandbox` gives it, for its whole length:

- **the build network**, checked first (:func:`scoring.buildnet.require`): a build never
  starts unfiltered, and the guard checks again while it runs;
- **a cgroup of its own**, ``<PODIUM_BUILD_CGROUP_PARENT>/<job>``, that every container of
  the build is made under: it carries the PID bound (the engine's build API has no PID
  limit for RUN steps) and tells afterwards whether the build reached it, so a fork
  bomb is named as one;
- **memory, swap and CPU bounds** on every container (``engine.BuildBounds``), on the
  CPUs that do not score (``portal.cpus``);
- **a disk cap**: the storage drivers we run on (fuse-overlayfs, overlay2 on ext4) refuse
  ``--storage-opt size``, so a guard thread reads each build container's writable-layer
  size every :data:`GUARD_PERIOD_S` and kills one that wrote more than the cap.

The cgroup is made directly in the cgroup filesystem, which works with the engine's
``cgroupfs`` driver (cgroup v1 or v2); an engine on the ``systemd`` driver is refused
as a platform error, never built on without bounds.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from portal import cpus
from scoring import buildnet, engine

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
GUARD_PERIOD_S = 1.0
# The live rules are checked again this often while a build runs.
RECHECK_PERIOD_S = 10.0
_JOB = re.compile(r"[a-z]+-\d+")


class SandboxError(Exception):
    """The sandbox could not be made: a platform fault, never the entrant's."""


class Guard(threading.Thread):
    """Watches every container on the build network while a build runs.

    Kills a container of its own build (made under ``cgroup_parent``, which the build
    set through the engine and no entrant can change) whose writable layer grew past
    ``disk_cap_bytes``, and every container on the network if the firewall rules stop
    being in place. ``killed`` holds the ids it killed for the disk cap; ``unfiltered``
    the problems found, if the rules went missing.
    """

    def __init__(self, network: str, cgroup_parent: str, disk_cap_bytes: int) -> None:
        super().__init__(daemon=True, name=f"build-guard-{cgroup_parent}")
        self.network = network
        self.cgroup_parent = cgroup_parent
        self.disk_cap_bytes = disk_cap_bytes
        self.killed: set[str] = set()
        self.unfiltered: list[str] = []
        self._stopping = threading.Event()

    def run(self) -> None:
        last_check = time.monotonic()
        while not self._stopping.wait(GUARD_PERIOD_S):
            try:
                self._enforce_disk_cap()
                if time.monotonic() - last_check >= RECHECK_PERIOD_S:
                    last_check = time.monotonic()
                    self._enforce_rules()
            except engine.EngineError:
                log.warning("build guard: the engine did not answer", exc_info=True)

    def _enforce_disk_cap(self) -> None:
        for container in engine.containers_on_network(self.network, sizes=True):
            written = int(container.get("SizeRw") or 0)
            container_id = str(container["Id"])
            if (
                written > self.disk_cap_bytes
                and engine.cgroup_parent(container_id) == self.cgroup_parent
            ):
                log.warning(
                    "build container %s wrote %d bytes, over the %d cap: killed",
                    container_id[:12],
                    written,
                    self.disk_cap_bytes,
                )
                engine.kill(container_id)
                self.killed.add(container_id)

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

    def explain(self, *, exit_code: int | None) -> str:
        """A sentence on which bound ended a failed step, or "" when none did."""
        if self.guard.killed:
            return (
                f"A build step wrote more than {self.disk_cap_bytes:,} bytes to disk, the "
                "cap, and was stopped."
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


def job_name(kind: str, pk: int) -> str:
    return f"{kind}-{pk}"


@contextlib.contextmanager
def sandbox(*, job: str, disk_cap_bytes: int) -> Iterator[Box]:
    """Confine one build (see the module docstring) for the length of the block.

    Raises :class:`scoring.buildnet.NotEnforced` when the network rules are not in place
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
