"""The host's own speed, probed off the clock right before and right after each scored run.

The probe is a fixed loop of Python (``LOOP`` steps, about 15 ms of one core on a 2-CPU
development VM), timed ``SAMPLES`` times on each CPU that times runs, in turn (the
scoring CPUs where the host splits them, else every CPU; at most ``MAX_CPUS`` of them,
spread evenly): about 0.15 s on two CPUs, 0.3 s at most. It is the loop a campaign round's
benchmark probes between passes with, and it answers one question: did this machine run
as fast after the run as before it? A CPU that another process took meanwhile, a clock
that throttled or a neighbour on a shared hypervisor all show up as a change.

What it records (``Run.host_speed``): each CPU's median loop time before and after (ns),
the largest change of one CPU's median (percent, signed: positive is slower after), the
probe's own noise (half the range of a CPU's samples, in percent of their median, the
worst of before and after), and the band it was judged against. A run is **marked**
(``Run.host_speed_changed``) when the change is beyond both the class's published noise
band (``PODIUM_CALIBRATION_DRIFT_PCT`` before one is published) and the probe's own
noise: a change the probe cannot tell from its own jitter is no evidence.

:func:`probe` measures (this process's CPU affinity is moved and put back); the rest is
pure.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from portal.hosts import noise

LOOP = 400_000
SAMPLES = 5
MAX_CPUS = 4


def _spread(cpus: Collection[int], most: int) -> list[int]:
    """At most ``most`` of ``cpus``, evenly spread (all of them when there are few)."""
    ordered = sorted(cpus)
    if len(ordered) <= most:
        return ordered
    step = len(ordered) / most
    return [ordered[int(index * step)] for index in range(most)]


def _loop_ns() -> int:
    started = time.perf_counter_ns()
    total = 0
    for step in range(LOOP):
        total += step
    return time.perf_counter_ns() - started


def probe(cpus: Collection[int] | None = None) -> dict[int, list[int]]:
    """``SAMPLES`` timings (ns) of the loop on each of ``cpus`` (default: every CPU this
    process may use), at most ``MAX_CPUS`` of them; the process's affinity is restored."""
    allowed = os.sched_getaffinity(0)
    chosen = _spread(cpus or allowed, MAX_CPUS)
    samples: dict[int, list[int]] = {}
    try:
        for cpu in chosen:
            os.sched_setaffinity(0, {cpu})
            samples[cpu] = [_loop_ns() for _ in range(SAMPLES)]
    finally:
        os.sched_setaffinity(0, allowed)
    return samples


@dataclass(frozen=True)
class Judgement:
    """Before and after, compared (see the module doc)."""

    change_pct: float  # the largest change of one CPU's median, signed (+: slower after)
    noise_pct: float  # the probe's own noise, the worst CPU of before and after
    band_pct: float  # what the change was judged against
    changed: bool

    def as_json(
        self, before: Mapping[int, list[int]], after: Mapping[int, list[int]]
    ) -> dict[str, Any]:
        """As kept on ``Run.host_speed``: each CPU's median before and after, and the
        judgement."""
        return {
            "before_ns": {str(cpu): noise.median_ns(values) for cpu, values in before.items()},
            "after_ns": {str(cpu): noise.median_ns(values) for cpu, values in after.items()},
            "change_pct": round(self.change_pct, 2),
            "noise_pct": round(self.noise_pct, 2),
            "band_pct": round(self.band_pct, 2),
            "changed": self.changed,
        }


def judge(
    before: Mapping[int, list[int]], after: Mapping[int, list[int]], band_pct: float
) -> Judgement:
    """Whether the host changed speed between ``before`` and ``after`` (probes of the same
    CPUs): the largest change of one CPU's median beyond both ``band_pct`` and the probe's
    own noise. ValueError when the two share no CPU with samples."""
    common = [cpu for cpu in before if before[cpu] and after.get(cpu)]
    if not common:
        raise ValueError("the two probes share no CPU")
    changes = [
        (noise.median_ns(after[cpu]) / noise.median_ns(before[cpu]) - 1) * 100 for cpu in common
    ]
    change = max(changes, key=abs)
    jitter = max(noise.noise_pct(list(side[cpu])) for side in (before, after) for cpu in common)
    return Judgement(
        change_pct=change,
        noise_pct=jitter,
        band_pct=band_pct,
        changed=abs(change) > max(band_pct, jitter),
    )
