"""The health gates' measurements (``scoring.host.gates`` decides on them): pinned engine,
kernel, supervisor and GPU driver, memory and disk reserves, CPU idleness after the
freeze, GPU idle and temperature where configured. Used by ``scoring.host.machine.hold``.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from portal.contests.hardware import hardware_class
from portal.core import cpus, storage
from portal.hosts.selectors import noise_band_percent
from portal.submissions.models import Run
from scoring import engine
from scoring.host import gates, gpus
from scoring.host.gates import Reading

log = logging.getLogger(__name__)

CPU_SAMPLES = 3  # at most; the first one at or above the minimum ends the sampling


def gpu_devices() -> list[str]:
    """The GPUs this host gives a scored container (``PODIUM_GPU_DEVICES``: indices or
    UUIDs), when its hardware class has GPUs or ``PODIUM_GPU_GATES`` is on; else none."""
    row = hardware_class(settings.PODIUM_HARDWARE_CLASS)
    if (row is None or not row.gpus) and not settings.PODIUM_GPU_GATES:
        return []
    return list(settings.PODIUM_GPU_DEVICES)


def limits() -> gates.Limits:
    """The gates' limits on this host: settings, with the class's pins first (a class's
    pin, when set, is what every host of it must show; ``PODIUM_PIN_*`` pins a host whose
    class leaves that one empty), and the class's CPU gate (its maximum, else
    ``PODIUM_GATE_CPU_BUSY_MAX``; on a strict class, its published noise band)."""
    row = hardware_class(settings.PODIUM_HARDWARE_CLASS)

    def pin(field: str, fallback: str) -> str:
        return str(getattr(row, field) if row is not None else "") or fallback

    return gates.Limits(
        pin_engine_version=pin("pin_engine_version", settings.PODIUM_PIN_ENGINE_VERSION),
        pin_kernel=pin("pin_kernel", settings.PODIUM_PIN_KERNEL),
        pin_supervisor_sha256=pin("pin_supervisor_sha256", settings.PODIUM_PIN_SUPERVISOR_SHA256),
        pin_gpu_driver=pin("pin_gpu_driver", settings.PODIUM_PIN_GPU_DRIVER),
        pin_cuda=pin("pin_cuda", settings.PODIUM_PIN_CUDA),
        min_memory_bytes=settings.PODIUM_GATE_MIN_MEMORY_BYTES,
        min_disk_bytes=settings.PODIUM_GATE_MIN_DISK_BYTES,
        max_busy_cpus=(
            settings.PODIUM_GATE_CPU_BUSY_MAX
            if row is None or row.cpu_gate_busy_max is None
            else row.cpu_gate_busy_max
        ),
        cpu_noise_band_pct=(
            noise_band_percent(row.name) if row is not None and row.cpu_gate_noise_band else None
        ),
        gpu_devices=tuple(gpu_devices()),
        gpu_max_util_percent=settings.PODIUM_GPU_MAX_UTIL_PERCENT,
        gpu_max_memory_mib=settings.PODIUM_GPU_MAX_MEMORY_MIB,
        gpu_max_temp_c=settings.PODIUM_GPU_MAX_TEMP_C,
    )


_PROBE_ERRORS = (
    engine.EngineError,
    OSError,
    gates.ProbeError,
    gpus.GpuReadError,
    subprocess.SubprocessError,
    ValueError,
)


def _probe(name: str, measure: Callable[[], list[Reading]]) -> list[Reading]:
    try:
        return measure()
    except _PROBE_ERRORS as exc:
        log.warning("gate %s could not be measured: %s", name, exc)
        return [gates.probe_failed(name, type(exc).__name__)]


def ecc_before(host: str) -> dict[str, int]:
    """Each GPU's uncorrected ECC count as the host's last gated run read it (by UUID)."""
    last = (
        Run.objects.filter(host=host, readings__has_key="gpu_ecc")
        .order_by("-pk")
        .values_list("readings", flat=True)
        .first()
    )
    value = (last or {}).get("gpu_ecc", {}).get("value") or {}
    return {str(k): int(v) for k, v in value.items() if isinstance(v, int)}


def gpu_readings(gate_limits: gates.Limits, host: str) -> list[Reading]:
    snapshot = gpus.read(
        gate_limits.gpu_devices,
        samples=settings.PODIUM_GPU_UTIL_SAMPLES,
        interval_s=settings.PODIUM_GPU_UTIL_INTERVAL_S,
    )
    return gates.gpu(snapshot, gate_limits, ecc_before(host))


def busy_cpu_samples(
    maximum: float, sample_s: float, tries: int = CPU_SAMPLES, only: frozenset[int] | None = None
) -> list[float]:
    """Busy CPUs over ``sample_s`` each, until one is at most ``maximum`` (or ``tries``):
    of every CPU, or of ``only`` (the scoring CPUs of a host that splits them)."""
    stat = Path("/proc/stat")
    samples: list[float] = []
    for _ in range(tries):
        before = stat.read_text()
        time.sleep(sample_s)
        samples.append(gates.busy_cpus(before, stat.read_text(), only))
        if samples[-1] <= maximum:
            break
    return samples


def measure(gate_limits: gates.Limits, host: str = "") -> list[Reading]:
    """Every gate's reading on this host, CPU idleness last (after everything else settled).

    Never raises for a failed probe: that gate fails instead.
    """
    supervisor = Path(settings.PODIUM_SUPERVISOR)
    data_dir = Path(settings.PODIUM_DATA_DIR)
    readings: list[Reading] = []
    readings += _probe(
        "engine_version",
        lambda: [gates.pinned("engine_version", engine.version(), gate_limits.pin_engine_version)],
    )
    readings += _probe(
        "kernel", lambda: [gates.pinned("kernel", os.uname().release, gate_limits.pin_kernel)]
    )
    readings += _probe(
        "supervisor_sha256",
        lambda: [
            gates.pinned(
                "supervisor_sha256",
                storage.sha256_file(supervisor),
                gate_limits.pin_supervisor_sha256,
            )
        ],
    )
    readings += _probe(
        "memory_available",
        lambda: [
            gates.at_least(
                "memory_available",
                gates.mem_available_bytes(Path("/proc/meminfo").read_text()),
                gate_limits.min_memory_bytes,
            )
        ],
    )
    readings += _probe(
        "disk_free",
        lambda: [
            gates.at_least(
                "disk_free", shutil.disk_usage(data_dir).free, gate_limits.min_disk_bytes
            )
        ],
    )
    if gate_limits.gpu_devices:
        readings += _probe("gpu", lambda: gpu_readings(gate_limits, host))
    readings += _probe("cpu_idle", lambda: [cpu_idle(gate_limits)])
    return readings


def cpu_idle(gate_limits: gates.Limits) -> Reading:
    """The CPU gate: busy CPUs over the scoring CPUs (every CPU when they are shared),
    against the class's maximum for that many CPUs (``gates.busy_cpus_allowed``)."""
    only = cpus.configured().scoring or None
    count = len(only) if only else gates.cpu_count(Path("/proc/stat").read_text())
    maximum, why = gates.busy_cpus_allowed(gate_limits, count)
    samples = busy_cpu_samples(maximum, settings.PODIUM_GATE_CPU_SAMPLE_S, only=only)
    return gates.cpu_idle(samples, maximum, why)
