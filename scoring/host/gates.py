"""The health gates' decisions (pure: no Django, no Docker, no files).

docs/architecture.md, "The scored run", step 2: before anything is staged, the scoring host must
show the pinned software, enough free memory and disk, idle CPUs (measured after the
builds are frozen) and, where a GPU is configured, an idle and cool GPU. Each gate
returns a :class:`Reading`: whether it passed, the value it saw and one line saying
why. ``scoring.host.machine`` gathers the raw values (``/proc``, the engine, ``nvidia-smi``)
and passes them here; tests pass fakes.

A gate whose probe failed (the engine did not answer, a file could not be read) fails:
the platform waits and retries, it never scores on a machine it could not check.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from scoring.host import gpus

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
    pin_cuda: str = ""
    min_memory_bytes: int = 0
    min_disk_bytes: int = 0
    max_busy_cpus: float = 1.5
    # A strict class's published noise band (percent): the CPU gate then also allows no
    # more than :func:`noise_band_busy_cpus`. None: not strict, or no band published yet.
    cpu_noise_band_pct: float | None = None
    gpu_devices: tuple[str, ...] = ()
    gpu_max_util_percent: int = 5
    gpu_max_memory_mib: int = 1024
    gpu_max_temp_c: int = 60


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


def failed_text(failed: Sequence[Reading]) -> str:
    """Why the gates kept the machine, in one line: the failed gates by name, and for a
    pin its value here against the pin ("health check kernel failed (kernel 6.1.0 here,
    pinned 6.8.0)")."""
    text = "health check " + ", ".join(r.name for r in failed) + " failed"
    pins = [
        f"{r.name} {r.value or 'unknown'} here, pinned {r.detail.removeprefix('expected ')}"
        for r in failed
        if r.detail.startswith("expected ")
    ]
    return f"{text} ({'; '.join(pins)})" if pins else text


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


def cpu_times(proc_stat: str, cpus: Collection[int] | None = None) -> tuple[int, int]:
    """(idle, total) jiffies of the aggregate ``cpu`` line of ``/proc/stat``, or summed
    over the ``cpuN`` lines of ``cpus`` when given.

    Idle counts ``idle`` and ``iowait``; the total leaves out ``guest`` and
    ``guest_nice``, which the kernel already counts in ``user`` and ``nice``.
    """
    wanted = None if cpus is None else {f"cpu{cpu}" for cpu in cpus}
    idle = total = found = 0
    for line in proc_stat.splitlines():
        fields = line.split()
        if not fields or (fields[0] != "cpu" if wanted is None else fields[0] not in wanted):
            continue
        try:
            values = [int(v) for v in fields[1:9]]
        except ValueError:
            break
        if len(values) < 4:
            break
        idle += values[3] + (values[4] if len(values) > 4 else 0)
        total += sum(values)
        found += 1
        if wanted is None:
            return idle, total
    if wanted is None:
        raise ProbeError("no aggregate cpu line in /proc/stat")
    if found != len(wanted):
        raise ProbeError(f"/proc/stat lacks a line of CPU {sorted(wanted)}")
    return idle, total


def cpu_count(proc_stat: str) -> int:
    """How many CPUs ``/proc/stat`` lists (``cpu0``, ``cpu1``...)."""
    count = sum(
        1 for line in proc_stat.splitlines() if line.startswith("cpu") and line[3:4].isdigit()
    )
    if not count:
        raise ProbeError("no per-CPU lines in /proc/stat")
    return count


def idle_fraction(before: str, after: str, cpus: Collection[int] | None = None) -> float:
    """The fraction of CPU time idle between two ``/proc/stat`` snapshots (of ``cpus``
    only, when given)."""
    idle_before, total_before = cpu_times(before, cpus)
    idle_after, total_after = cpu_times(after, cpus)
    elapsed = total_after - total_before
    if elapsed <= 0:
        raise ProbeError("no CPU time passed between the two samples")
    return max(0.0, min(1.0, (idle_after - idle_before) / elapsed))


def busy_cpus(before: str, after: str, cpus: Collection[int] | None = None) -> float:
    """How many CPUs' worth of time was busy between two ``/proc/stat`` snapshots: over
    every CPU, or over ``cpus`` alone (a host whose scored runs have CPUs of their own
    judges only those: work on the others cannot slow a run)."""
    count = cpu_count(after) if cpus is None else len(cpus)
    return (1.0 - idle_fraction(before, after, cpus)) * count


def noise_band_busy_cpus(cpus: int, band_pct: float) -> float:
    """The most CPUs' worth of other work that slows a run on all ``cpus`` CPUs by no more
    than ``band_pct`` percent.

    Other work on ``b`` of ``n`` CPUs leaves a run that keeps every CPU busy ``n - b`` of
    them, so it takes ``n / (n - b)`` times as long: at most ``1 + band / 100`` while
    ``b <= n * band / (100 + band)``. The worst case on purpose: a run on fewer threads
    than CPUs loses less, but the gate cannot know what the next entry does.
    """
    return cpus * max(0.0, band_pct) / (100 + max(0.0, band_pct))


def busy_cpus_allowed(limits: Limits, cpus: int) -> tuple[float, str]:
    """The CPU gate's maximum on a host whose runs get ``cpus`` CPUs, and why ("" for the
    fixed maximum): the smaller of ``max_busy_cpus`` and, on a strict class with a
    published band, :func:`noise_band_busy_cpus`."""
    band = limits.cpu_noise_band_pct
    if band is not None:
        within_band = noise_band_busy_cpus(cpus, band)
        if within_band < limits.max_busy_cpus:
            return within_band, f"the noise band ±{band:g} % on {cpus} CPUs"
    return limits.max_busy_cpus, ""


def cpu_idle(samples: Sequence[float], maximum: float, why: str = "") -> Reading:
    """CPUs idle enough: at most ``maximum`` CPUs' worth of busy time, in the quietest of
    the samples (a passing blip is not a busy machine); ``why`` says where the maximum
    comes from, when not from the fixed setting.

    Counted in CPUs, not as a fraction: one busy core disturbs a run the same on a
    2-CPU and a 128-CPU host, but is 50 % of one and under 1 % of the other.
    """
    if not samples:
        return probe_failed("cpu_idle", "no sample")
    quietest = min(samples)
    ok = quietest <= maximum
    shown = ", ".join(f"{s:.2f}" for s in samples)
    relation = "<=" if ok else ">"
    source = f", {why}" if why else ""
    return Reading(
        "cpu_idle",
        ok=ok,
        value=round(quietest, 3),
        detail=f"{quietest:.2f} busy CPUs {relation} {maximum:.3g}{source} ({shown})",
    )


def gpu(
    snapshot: gpus.Snapshot, limits: Limits, ecc_before: dict[str, int] | None = None
) -> list[Reading]:
    """The GPU gates on one snapshot of the run's GPUs (``scoring.host.gpus.read``).

    Driver and CUDA versions equal the class's pins; no compute process on any of them;
    utilization at most ``gpu_max_util_percent`` in every sample and memory in use at most
    ``gpu_max_memory_mib``; temperature at most ``gpu_max_temp_c``; persistence mode on;
    no uncorrected ECC error since the last run (``ecc_before``: each GPU's volatile count
    then, by UUID; without it, since the driver loaded); no XID event since the last
    snapshot. A value the GPU does not support (ECC, persistence on some boards, XID
    events in some virtual machines) is recorded as such and does not fail its gate.
    """
    cards = snapshot.gpus
    readings = [
        pinned("gpu_driver", snapshot.driver, limits.pin_gpu_driver),
        pinned("gpu_cuda", snapshot.cuda, limits.pin_cuda),
    ]
    busy = [g.index for g in cards if g.processes]
    readings.append(
        Reading(
            "gpu_processes",
            ok=not busy,
            value=[{"index": g.index, "pids": g.processes} for g in cards],
            detail=f"compute processes on GPU {_indices(busy)}" if busy else "none",
        )
    )
    loaded = [
        g.index
        for g in cards
        if max(g.util_percent, default=0) > limits.gpu_max_util_percent
        or g.memory_used_mib > limits.gpu_max_memory_mib
    ]
    readings.append(
        Reading(
            "gpu_idle",
            ok=not loaded,
            value=[
                {"index": g.index, "util_percent": g.util_percent, "memory_mib": g.memory_used_mib}
                for g in cards
            ],
            detail=(
                f"busy: GPU {_indices(loaded)}"
                if loaded
                else f"<= {limits.gpu_max_util_percent} % in every sample and "
                f"<= {limits.gpu_max_memory_mib} MiB in use"
            ),
        )
    )
    hot = [g.index for g in cards if g.temp_c > limits.gpu_max_temp_c]
    readings.append(
        Reading(
            "gpu_temperature",
            ok=not hot,
            value=[{"index": g.index, "temp_c": g.temp_c} for g in cards],
            detail=(
                f"above {limits.gpu_max_temp_c} C: GPU {_indices(hot)}"
                if hot
                else f"<= {limits.gpu_max_temp_c} C"
            ),
        )
    )
    off = [g.index for g in cards if g.persistence is False]
    readings.append(
        Reading(
            "gpu_persistence",
            ok=not off,
            value=[{"index": g.index, "persistence": g.persistence} for g in cards],
            detail=(
                f"persistence mode off: GPU {_indices(off)}"
                if off
                else "on"
                if all(g.persistence for g in cards)
                else "not reported by this GPU"
            ),
        )
    )
    before = ecc_before or {}
    new_errors = [
        g.index
        for g in cards
        if g.ecc_uncorrected is not None and g.ecc_uncorrected > before.get(g.uuid, 0)
    ]
    readings.append(
        Reading(
            "gpu_ecc",
            ok=not new_errors,
            value={g.uuid: g.ecc_uncorrected for g in cards},
            detail=(
                f"new uncorrected ECC errors: GPU {_indices(new_errors)}"
                if new_errors
                else "no new uncorrected ECC error"
            ),
        )
    )
    xids = snapshot.xid_events
    readings.append(
        Reading(
            "gpu_xid",
            ok=not xids,
            value=xids,
            detail=(
                "XID events not reported by this machine"
                if xids is None
                else f"XID {', '.join(str(e['xid']) for e in xids)} since the last check"
                if xids
                else "no XID event since the last check"
            ),
        )
    )
    return readings


def _indices(indices: Iterable[int]) -> str:
    return ", ".join(map(str, indices))


def failing(readings: Iterable[Reading]) -> list[Reading]:
    return [reading for reading in readings if not reading.ok]


def as_json(readings: Iterable[Reading]) -> dict[str, dict[str, Any]]:
    """The readings as stored on ``Run.readings``: ``{name: {ok, value, detail}}``."""
    return {r.name: {k: v for k, v in asdict(r).items() if k != "name"} for r in readings}


def retry_delay_s(waits: int, first_s: float, max_s: float) -> float:
    """Backoff after the ``waits``-th consecutive wait (1-based): first_s doubling to max_s."""
    return float(min(max_s, first_s * 2 ** max(0, waits - 1)))
