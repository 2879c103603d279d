"""The health gates' decisions (pure: no Django, no Docker, no files).

Architecture "The scored run", step 2: before anything is staged, the scoring host must
show the pinned software, enough free memory and disk, idle CPUs (measured after the
builds are frozen) and, where a GPU is configured, an idle and cool GPU. Each gate
returns a :class:`Reading`: whether it passed, the value it saw and one line saying
why. ``scoring.machine`` gathers the raw values (``/proc``, the engine, ``nvidia-smi``)
and passes them here; tests pass fakes.

A gate whose probe failed (the engine did not answer, a file could not be read) fails:
the platform waits and retries, it never scores on a machine it could not check.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

JSONValue = str | int | float | bool | None | list[Any] | dict[str, Any]


@dataclass(frozen=True)
class Reading:
    """One gate's result; ``value`` is what was measured (JSON-serializable)."""

    name: str
    ok: bool
    value: JSONValue
    detail: str = ""


@dataclass(frozen=True)
class Limits:
    """What the gates require (from settings; "" pins mean "record, don't require")."""

    pin_engine_version: str = ""
    pin_kernel: str = ""
    pin_supervisor_sha256: str = ""
    pin_gpu_driver: str = ""
    min_memory_bytes: int = 0
    min_disk_bytes: int = 0
    max_busy_cpus: float = 1.5
    gpu: bool = False
    gpu_max_util_percent: int = 5
    gpu_max_memory_mib: int = 1024
    gpu_max_temp_c: int = 60


@dataclass(frozen=True)
class GpuSample:
    """One GPU as ``nvidia-smi --query-gpu`` reports it."""

    index: int
    driver: str
    util_percent: int
    memory_used_mib: int
    temp_c: int


class ProbeError(Exception):
    """A raw value could not be read or parsed (the gate then fails)."""


def probe_failed(name: str, error: str) -> Reading:
    return Reading(name, ok=False, value=None, detail=f"could not be measured: {error}")


def pinned(name: str, actual: str, pin: str) -> Reading:
    """A software version (or digest) must equal its pin, when one is set."""
    if not pin:
        return Reading(name, ok=True, value=actual, detail="not pinned")
    if actual == pin:
        return Reading(name, ok=True, value=actual, detail="matches the pin")
    return Reading(name, ok=False, value=actual, detail=f"expected {pin}")


def mem_available_bytes(meminfo: str) -> int:
    """``MemAvailable`` of a ``/proc/meminfo`` text, in bytes."""
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        if key == "MemAvailable":
            fields = rest.split()
            if fields and fields[0].isdigit():
                unit = fields[1].lower() if len(fields) > 1 else ""
                return int(fields[0]) * (1024 if unit == "kb" else 1)
    raise ProbeError("no MemAvailable line in /proc/meminfo")


def at_least(name: str, value: int, minimum: int, unit: str = "bytes") -> Reading:
    """A reserve (free memory, free disk) must not be below its minimum."""
    ok = value >= minimum
    relation = ">=" if ok else "<"
    return Reading(name, ok=ok, value=value, detail=f"{value:,} {relation} {minimum:,} {unit}")


def cpu_times(proc_stat: str) -> tuple[int, int]:
    """(idle, total) jiffies of the aggregate ``cpu`` line of ``/proc/stat``.

    Idle counts ``idle`` and ``iowait``; the total leaves out ``guest`` and
    ``guest_nice``, which the kernel already counts in ``user`` and ``nice``.
    """
    for line in proc_stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            try:
                values = [int(v) for v in fields[1:9]]
            except ValueError:
                break
            if len(values) < 4:
                break
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            return idle, sum(values)
    raise ProbeError("no aggregate cpu line in /proc/stat")


def cpu_count(proc_stat: str) -> int:
    """How many CPUs ``/proc/stat`` lists (``cpu0``, ``cpu1``...)."""
    count = sum(
        1 for line in proc_stat.splitlines() if line.startswith("cpu") and line[3:4].isdigit()
    )
    if not count:
        raise ProbeError("no per-CPU lines in /proc/stat")
    return count


def idle_fraction(before: str, after: str) -> float:
    """The fraction of CPU time idle between two ``/proc/stat`` snapshots."""
    idle_before, total_before = cpu_times(before)
    idle_after, total_after = cpu_times(after)
    elapsed = total_after - total_before
    if elapsed <= 0:
        raise ProbeError("no CPU time passed between the two samples")
    return max(0.0, min(1.0, (idle_after - idle_before) / elapsed))


def busy_cpus(before: str, after: str) -> float:
    """How many CPUs' worth of time was busy between two ``/proc/stat`` snapshots."""
    return (1.0 - idle_fraction(before, after)) * cpu_count(after)


def cpu_idle(samples: Sequence[float], maximum: float) -> Reading:
    """CPUs idle enough: at most ``maximum`` CPUs' worth of busy time, in the quietest of
    the samples (a passing blip is not a busy machine).

    Counted in CPUs, not as a fraction: one busy core disturbs a run the same on a
    2-CPU and a 128-CPU host, but is 50 % of one and under 1 % of the other.
    """
    if not samples:
        return probe_failed("cpu_idle", "no sample")
    quietest = min(samples)
    ok = quietest <= maximum
    shown = ", ".join(f"{s:.2f}" for s in samples)
    relation = "<=" if ok else ">"
    return Reading(
        "cpu_idle",
        ok=ok,
        value=round(quietest, 3),
        detail=f"{quietest:.2f} busy CPUs {relation} {maximum} ({shown})",
    )


def parse_gpu_query(csv_text: str) -> list[GpuSample]:
    """Parse ``nvidia-smi --query-gpu=index,driver_version,utilization.gpu,memory.used,
    temperature.gpu --format=csv,noheader,nounits``."""
    gpus: list[GpuSample] = []
    for line in csv_text.splitlines():
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 5:
            raise ProbeError(f"unexpected nvidia-smi line: {line[:200]!r}")
        try:
            gpus.append(
                GpuSample(
                    index=int(fields[0]),
                    driver=fields[1],
                    util_percent=int(float(fields[2])),
                    memory_used_mib=int(float(fields[3])),
                    temp_c=int(float(fields[4])),
                )
            )
        except ValueError:
            raise ProbeError(f"unexpected nvidia-smi values: {line[:200]!r}") from None
    if not gpus:
        raise ProbeError("nvidia-smi listed no GPU")
    return gpus


def gpu(samples: Sequence[GpuSample], limits: Limits) -> list[Reading]:
    """Every GPU idle (utilization, memory in use) and cool, on the pinned driver."""
    drivers = sorted({s.driver for s in samples})
    readings = [pinned("gpu_driver", ",".join(drivers), limits.pin_gpu_driver)]
    busy = [
        s.index
        for s in samples
        if s.util_percent > limits.gpu_max_util_percent
        or s.memory_used_mib > limits.gpu_max_memory_mib
    ]
    readings.append(
        Reading(
            "gpu_idle",
            ok=not busy,
            value=[
                {"index": s.index, "util_percent": s.util_percent, "memory_mib": s.memory_used_mib}
                for s in samples
            ],
            detail=(
                f"busy: GPU {', '.join(map(str, busy))}"
                if busy
                else f"<= {limits.gpu_max_util_percent} % and "
                f"<= {limits.gpu_max_memory_mib} MiB in use"
            ),
        )
    )
    hot = [s.index for s in samples if s.temp_c > limits.gpu_max_temp_c]
    readings.append(
        Reading(
            "gpu_temperature",
            ok=not hot,
            value=[{"index": s.index, "temp_c": s.temp_c} for s in samples],
            detail=(
                f"above {limits.gpu_max_temp_c} C: GPU {', '.join(map(str, hot))}"
                if hot
                else f"<= {limits.gpu_max_temp_c} C"
            ),
        )
    )
    return readings


def failing(readings: Iterable[Reading]) -> list[Reading]:
    return [reading for reading in readings if not reading.ok]


def as_json(readings: Iterable[Reading]) -> dict[str, dict[str, Any]]:
    """The readings as stored on ``Run.readings``: ``{name: {ok, value, detail}}``."""
    return {r.name: {k: v for k, v in asdict(r).items() if k != "name"} for r in readings}


def retry_delay_s(waits: int, first_s: float, max_s: float) -> float:
    """Backoff after the ``waits``-th consecutive wait (1-based): first_s doubling to max_s."""
    return float(min(max_s, first_s * 2 ** max(0, waits - 1)))
