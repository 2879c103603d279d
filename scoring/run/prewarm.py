"""The warm start: the same page cache for every entrant (pure: no Django).

Before its clock, the supervisor (``supervise.c``, ``prewarm_walk``) reads every regular
file of the scoring container's filesystems that the entrant may read, through the
container's own mount: the image's runtime and checkpoint files and the staged cohort
(docs/rules.md, "The warm start"). Without it an entrant whose image files happen to be
cold on the host would pay for the disk on the clock, and one whose files are warm would
not. This module holds what the runner needs around it:

- ``portal.contests.sandbox.prewarm_bounds``: the byte, name and time bounds it passes
  (``--prewarm-bytes``, ``--prewarm-files``, ``--prewarm-ms``), the same for every run
  of a benchmark;
- the time bound is also what the host's outer timer adds to the score timeout
  (``runner.supervise``), since the walk happens before the supervisor's clock;
- :func:`from_line`: its readings on the supervisor's result line.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


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
