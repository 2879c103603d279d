"""The warm start: the same page cache for every entrant (pure: no Django).

Before its clock, the supervisor (``supervise.c``, ``prewarm_walk``) reads every regular
file of the scoring container's filesystems that the entrant may read, through the
container's own mount: the image's runtime and checkpoint files and the staged cohort
(docs/rules.md, "The warm start"). Without it an entrant whose image files happen to be
cold on the host would pay for the disk on the clock, and one whose files are warm would
not. This module holds what the runner needs around it:

- :func:`bounds`: the byte, name and time bounds it passes (``--prewarm-bytes``,
  ``--prewarm-files``, ``--prewarm-ms``), the same for every run of a benchmark;
- the time bound is also what the host's outer timer adds to the score timeout
  (``runner.supervise``), since the walk happens before the supervisor's clock;
- :func:`from_line`: its readings on the supervisor's result line.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

MIB = 1 << 20
GIB = 1 << 30
# The default byte budget (``PODIUM_PREWARM_BYTES`` overrides it per host): 2 GiB holds a
# CPU PyTorch or ONNX Runtime image (about 1 to 1.5 GiB of files) and a checkpoint of a
# few hundred MiB, besides the cohort. It is never more than half the run's memory limit
# (:func:`bounds`): the pages read are charged to the container's memory cgroup, and a
# budget past what the cgroup keeps would only evict what was read first.
DEFAULT_BYTES = 2 * GIB
# Names (files, folders, links) the walk visits at most: a Python image with PyTorch has
# about 30,000; a hostile image with millions of empty files stops here.
DEFAULT_NAMES = 65_536
# The floor rates the time bound is sized from: far below what a healthy scoring host
# does (bench/prewarm.py, caches dropped, through fuse-overlayfs on a 2-CPU VM: 0.64 s per
# GiB, about 1.6 GiB/s, and 5,800 small files/s), so that the bound stops a stalled or
# pathological walk, never a healthy one.
FLOOR_BYTES_PER_S = 64 * MIB
FLOOR_NAMES_PER_S = 1_000
# Beyond the rates: the first lookups of a fresh container's mounts.
FIXED_MS = 1_000


@dataclass(frozen=True)
class Bounds:
    """What the runner gives the supervisor's walk; ``budget_bytes`` 0 turns it off."""

    budget_bytes: int
    names: int
    time_ms: int  # the walk's own time bound, and what the outer timer allows for it


def bounds(*, run_memory_bytes: int, budget_bytes: int | None = None) -> Bounds:
    """The walk's bounds for a run with ``run_memory_bytes`` of memory.

    ``budget_bytes``: the host's setting (``PODIUM_PREWARM_BYTES``), None for
    :data:`DEFAULT_BYTES`; capped at half of ``run_memory_bytes``. The time bound is the
    budget at :data:`FLOOR_BYTES_PER_S` plus the names at :data:`FLOOR_NAMES_PER_S`
    plus :data:`FIXED_MS`, rounded up; 0 when there is no walk.
    """
    budget = DEFAULT_BYTES if budget_bytes is None else budget_bytes
    budget = max(0, min(budget, run_memory_bytes // 2))
    if budget == 0:
        return Bounds(budget_bytes=0, names=0, time_ms=0)
    bytes_ms = -(-budget * 1000 // FLOOR_BYTES_PER_S)
    names_ms = -(-DEFAULT_NAMES * 1000 // FLOOR_NAMES_PER_S)
    return Bounds(budget_bytes=budget, names=DEFAULT_NAMES, time_ms=bytes_ms + names_ms + FIXED_MS)


@dataclass(frozen=True)
class Prewarm:
    """What the walk did, as kept with the run (``Run.resources["prewarm"]``)."""

    ms: float  # how long it took, before the supervisor's clock
    bytes: int
    files: int
    truncated: bool  # a bound stopped it

    def as_dict(self) -> dict[str, float | int | bool]:
        """JSON-ready, keyed by the field names."""
        return asdict(self)


def from_line(data: dict[str, Any]) -> Prewarm:
    """The readings in the supervisor's decoded result line (``json.loads`` of it).

    Raises :class:`ValueError` when ``prewarm_ns``, ``prewarm_bytes`` or
    ``prewarm_files`` is missing or not a non-negative integer, or ``prewarm_truncated``
    is not a boolean.
    """
    numbers = {}
    for key in ("prewarm_ns", "prewarm_bytes", "prewarm_files"):
        value = data.get(key)
        # ``type(...) is``: JSON true is not an integer here.
        if type(value) is not int or value < 0:
            raise ValueError(f"the supervisor's result has no valid {key!r}")
        numbers[key] = value
    truncated = data.get("prewarm_truncated")
    if type(truncated) is not bool:
        raise ValueError("the supervisor's result has no valid 'prewarm_truncated'")
    return Prewarm(
        ms=numbers["prewarm_ns"] / 1e6,
        bytes=numbers["prewarm_bytes"],
        files=numbers["prewarm_files"],
        truncated=truncated,
    )
