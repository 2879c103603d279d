"""Which CPUs time scored runs and which do everything else (``PODIUM_SCORING_CPUS``).

The freezer pauses other containers while a run is timed, but not the host's own work:
the web server inspecting an uploaded archive, the build worker packing a context, the
engine committing a layer. On a machine large enough to split, scored containers (and
calibrations, and round slices: they share ``runner.container_spec``) get CPUs of their
own, and every other Podium process pins itself to the rest when it starts
(:func:`pin_off_scoring`: the web server from ``portal.wsgi``, every Celery worker
process and beat from their start signals in ``portal.core.celery``; the scoring worker itself
only waits for its container), so it and whatever it starts stay off them. Build
containers are put there too (``engine.BuildBounds``). The engine's own daemons are the
operator's to place (README, "CPUs of their own for scored runs").

The setting is a CPU list (``1``, ``2-3``, ``4-7,12``), ``auto`` (the default: see
:func:`default_scoring_cpus`) or ``shared`` (no split). The decision is pure
(:func:`decide`): plain values in, a :class:`CpuIsolation` out.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

AUTO = "auto"
SHARED = "shared"
# Fewer online CPUs than this are too few to split. On two, a split gives a scored run
# one CPU (halving what a multi-threaded submission computes with) and leaves one for
# the web server, the workers, the engine and builds together; on three, a run gets one
# CPU of three. From four on, half for runs and half for the rest keeps both usable.
MIN_CPUS_TO_SPLIT = 4
ONLINE_CPUS = Path("/sys/devices/system/cpu/online")


class CpuListError(ValueError):
    """A CPU list that cannot be used (the message says why)."""


def parse_cpu_list(text: str) -> frozenset[int]:
    """The CPUs of a kernel-style list (``"0-1,3"``); :class:`CpuListError` when malformed."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise CpuListError(f"{text!r} is not a CPU list (like 1, 2-3 or 0,4-7)")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise CpuListError(f"{part.strip()!r} in {text!r} is a backward range")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """The kernel-style list of ``cpus``, ranges folded (``{0, 1, 3}`` -> ``"0-1,3"``)."""
    parts: list[str] = []
    ordered = sorted(set(cpus))
    start = index = 0
    while index < len(ordered):
        start = index
        while index + 1 < len(ordered) and ordered[index + 1] == ordered[index] + 1:
            index += 1
        low, high = ordered[start], ordered[index]
        parts.append(str(low) if low == high else f"{low}-{high}")
        index += 1
    return ",".join(parts)


def default_scoring_cpus(online: Iterable[int]) -> frozenset[int]:
    """``auto``: the last half of the online CPUs (rounded down) score; none (no split)
    on a machine of fewer than ``MIN_CPUS_TO_SPLIT``."""
    ordered = sorted(set(online))
    if len(ordered) < MIN_CPUS_TO_SPLIT:
        return frozenset()
    return frozenset(ordered[len(ordered) - len(ordered) // 2 :])


@dataclass(frozen=True)
class CpuIsolation:
    """Scored runs on ``scoring``, everything else on ``other``; both empty when the
    CPUs are shared, and then ``reason`` says why."""

    scoring: frozenset[int]
    other: frozenset[int]
    reason: str = ""

    @property
    def split(self) -> bool:
        return bool(self.scoring)

    @property
    def scoring_cpus(self) -> str:
        """The scored container's ``cpuset_cpus`` ("" when shared: every CPU)."""
        return format_cpu_list(self.scoring)

    @property
    def other_cpus(self) -> str:
        """Where every other Podium process runs ("" when shared: every CPU)."""
        return format_cpu_list(self.other)

    def as_fact(self) -> dict[str, Any]:
        """What a scoring host reports (``ScoringHost.cpu_isolation``, the hosts API)."""
        if not self.split:
            return {"shared": True, "scoring_cpus": None, "other_cpus": None, "reason": self.reason}
        return {
            "shared": False,
            "scoring_cpus": self.scoring_cpus,
            "other_cpus": self.other_cpus,
            "reason": "",
        }


def decide(setting: str, online: Iterable[int]) -> CpuIsolation:
    """The split that ``setting`` (``PODIUM_SCORING_CPUS``) gives on a machine whose
    online CPUs are ``online``. :class:`CpuListError` when the setting names an offline
    CPU, or every CPU (nothing would be left for the rest)."""
    online_set = frozenset(online)
    value = setting.strip().lower()
    if value == SHARED:
        return CpuIsolation(
            frozenset(), frozenset(), "PODIUM_SCORING_CPUS=shared: scored runs share every CPU"
        )
    if value in ("", AUTO):
        scoring = default_scoring_cpus(online_set)
        if not scoring:
            return CpuIsolation(
                frozenset(),
                frozenset(),
                f"{len(online_set)} CPU{'s' if len(online_set) != 1 else ''}: too few to "
                f"split (it takes {MIN_CPUS_TO_SPLIT}); scored runs share them with the web "
                "server, the workers and the engine",
            )
    else:
        try:
            scoring = parse_cpu_list(value)
        except CpuListError as exc:
            raise CpuListError(f"PODIUM_SCORING_CPUS: {exc}, auto or shared") from exc
        offline = scoring - online_set
        if offline:
            raise CpuListError(
                f"PODIUM_SCORING_CPUS names CPU {format_cpu_list(offline)}, which is not "
                f"online here (online: {format_cpu_list(online_set)})"
            )
    other = online_set - scoring
    if not other:
        raise CpuListError(
            "PODIUM_SCORING_CPUS leaves no CPU for the web server, the workers and the engine"
        )
    return CpuIsolation(scoring, other)


def online_cpus() -> frozenset[int]:
    """The machine's online CPUs (the kernel's list, the same inside a container as on
    the host), else ``range(os.cpu_count())``."""
    try:
        return parse_cpu_list(ONLINE_CPUS.read_text())
    except (OSError, CpuListError):
        return frozenset(range(os.cpu_count() or 1))


def configured() -> CpuIsolation:
    """This machine's split, as the settings give it."""
    from django.conf import settings

    return decide(str(settings.PODIUM_SCORING_CPUS), online_cpus())


def pin_off_scoring(pid: int = 0) -> frozenset[int] | None:
    """Move process ``pid`` (0: this one; its threads and the children it starts from
    now on inherit it) onto the non-scoring CPUs. Returns the CPUs it is now allowed, or
    None when nothing changed (CPUs shared, or none of the others is allowed to it, as in
    a container confined elsewhere: then it logs why). A bad setting raises
    :class:`CpuListError`, so a process started with one stops at once and says why."""
    isolation = configured()
    if not isolation.split:
        return None
    allowed = frozenset(os.sched_getaffinity(pid))
    target = allowed & isolation.other
    if not target:
        log.warning(
            "process %s may only run on CPUs %s, none of the non-scoring CPUs %s: left there",
            pid or os.getpid(),
            format_cpu_list(allowed),
            isolation.other_cpus,
        )
        return None
    os.sched_setaffinity(pid, target)
    return target
