"""The GPU meter: what a scored run's GPUs did while its container ran (pure: no Django).

``scoring.run.meter`` reads the container's cgroup (CPU, memory, PIDs, I/O); on a GPU class
the work is on the GPU and those readings say nothing about it. :class:`GpuMeter`
samples NVML, through the gates' session (``scoring.host.gpus.session``), from just before
the container starts until it has exited, every ``interval_ms`` (the setting
``PODIUM_GPU_SAMPLE_MS``), for each of the run's GPUs:

- GPU utilization, % (``nvmlDeviceGetUtilizationRates``: the share of the driver's last
  sample period, 1/6 s to 1 s by product, in which a kernel ran);
- memory in use, MiB (``nvmlDeviceGetMemoryInfo``);
- power draw, W (``nvmlDeviceGetPowerUsage``);
- the energy counter, mJ since the driver loaded
  (``nvmlDeviceGetTotalEnergyConsumption``, Volta and later).

The run's energy is the counter's difference between the first reading (before the
start) and the last (after the exit), summed over the GPUs: ``"source": "counter"``.
Where a GPU has no counter, every GPU's energy is its power integrated over the sample
times instead (trapezoids), ``"source": "power"``: an estimate, as good as the driver's
power figure (itself averaged over a short window) and the sampling interval. Both
count the whole window, so the GPUs' idle draw during the container's start and its
model loading is part of a run's energy, as it is of the reference kit's.

What it costs the run: nothing it can measure. The sampling is a daemon thread of the
worker (on the worker's CPUs, never in the scored container or its process tree); the
first reading is taken before the container starts, the last after it exited, and the
run waits on no lock of the meter's. Memory is bounded: every sample counts in the
totals, but at most :data:`MAX_SAMPLES` per GPU are kept (when full, every other one is
dropped and from then on every other one is kept, so the kept ones stay evenly spaced,
plus the last reading).

A failure never fails the run: NVML that cannot start, a GPU that is not there, a read
that fails mid-run, or a sampler that does not stop. The readings then have figures of
``None`` and ``"error"`` says why (the samples read until then are kept as evidence).
Partial readings never give a figure: a run's energy from part of its window would look
implausibly low.

:meth:`GpuMeter.stop` returns the readings, stored with the run as
``Run.resources["gpu"]``: ``interval_ms``, ``devices`` (per GPU: the configured device
and its own energy, mean utilization and memory peak), ``samples`` (per GPU
``[[t_ms, util_pct, mem_mib, power_w, energy_mj], ...]``, ``energy_mj`` null without a
counter), ``samples_taken``, ``duration_ms``, ``source``, ``energy_j``,
``energy_per_image_j`` (the run's energy over its images), ``gpu_util_mean_pct`` (the
GPUs' mean of their mean utilization), ``memory_peak_mib`` (the highest of any GPU),
``power_mean_w`` (all GPUs together: energy over the window) and ``error``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scoring.host import gpus

log = logging.getLogger(__name__)

SOURCE_COUNTER = "counter"
SOURCE_POWER = "power"
# Samples kept per GPU (even, so that halving keeps the last reading): 100 s of a run at
# the default interval in full, a longer run evenly thinned. About 40 bytes each as JSON.
MAX_SAMPLES = 1000
# The shortest interval the meter honours: NVML's own figures move no faster.
MIN_INTERVAL_MS = 10
# How long stop() waits for the sampling thread after the container exited.
STOP_TIMEOUT_S = 5.0


@dataclass
class Track:
    """One GPU's readings over a run: every sample counts in its totals, at most
    ``max_kept`` are kept (see the module)."""

    device: str
    max_kept: int = MAX_SAMPLES
    samples: list[list[Any]] = field(default_factory=list)
    taken: int = 0
    stride: int = 1
    util_sum: int = 0
    memory_peak_mib: int = 0
    power_mj: float = 0.0  # power integrated over time: W x ms = mJ
    first_energy_mj: int | None = None
    last_energy_mj: int | None = None
    first_t_ms: float = 0.0
    last_t_ms: float = 0.0
    last_power_w: float = 0.0

    def add(
        self,
        t_ms: float,
        util_pct: int,
        mem_mib: int,
        power_w: float,
        energy_mj: int | None,
        *,
        last: bool = False,
    ) -> None:
        """One reading at ``t_ms`` since the meter started (``last``: the final one,
        always kept)."""
        if self.taken:
            self.power_mj += (self.last_power_w + power_w) / 2 * (t_ms - self.last_t_ms)
        else:
            self.first_t_ms = t_ms
            self.first_energy_mj = energy_mj
        self.last_t_ms, self.last_power_w, self.last_energy_mj = t_ms, power_w, energy_mj
        self.util_sum += util_pct
        self.memory_peak_mib = max(self.memory_peak_mib, mem_mib)
        index = self.taken
        self.taken += 1
        if last or index % self.stride == 0:
            self.samples.append([round(t_ms), util_pct, mem_mib, round(power_w, 3), energy_mj])
            if len(self.samples) > max(2, self.max_kept - self.max_kept % 2):
                self.samples = self.samples[::2]
                self.stride *= 2

    def counter_mj(self) -> int | None:
        """The counter's difference over the run; None without a counter (or one that went
        backwards: the driver reloaded)."""
        if self.first_energy_mj is None or self.last_energy_mj is None:
            return None
        delta = self.last_energy_mj - self.first_energy_mj
        return delta if delta >= 0 else None

    def util_mean_pct(self) -> float | None:
        return self.util_sum / self.taken if self.taken else None


def summary(tracks: Sequence[Track], images: int | None) -> dict[str, Any]:
    """The run's figures from its GPUs' tracks (see the module); all None without a reading.

    The counter is the source when every GPU has one, else power integration for all.
    """
    if not tracks or any(track.taken == 0 for track in tracks):
        return {
            "source": None,
            "duration_ms": None,
            "energy_j": None,
            "energy_per_image_j": None,
            "gpu_util_mean_pct": None,
            "memory_peak_mib": None,
            "power_mean_w": None,
            "devices": [{"device": track.device} for track in tracks],
        }
    counters = [track.counter_mj() for track in tracks]
    source = SOURCE_COUNTER if all(c is not None for c in counters) else SOURCE_POWER
    energies_j = [
        (counter if source == SOURCE_COUNTER and counter is not None else track.power_mj) / 1000
        for counter, track in zip(counters, tracks, strict=True)
    ]
    energy_j = sum(energies_j)
    duration_ms = max(track.last_t_ms - track.first_t_ms for track in tracks)
    means = [track.util_mean_pct() or 0.0 for track in tracks]
    return {
        "source": source,
        "duration_ms": round(duration_ms),
        "energy_j": round(energy_j, 3),
        "energy_per_image_j": round(energy_j / images, 6) if images else None,
        "gpu_util_mean_pct": round(sum(means) / len(means), 1),
        "memory_peak_mib": max(track.memory_peak_mib for track in tracks),
        "power_mean_w": round(energy_j / (duration_ms / 1000), 1) if duration_ms > 0 else None,
        "devices": [
            {
                "device": track.device,
                "energy_j": round(energy, 3),
                "util_mean_pct": round(mean, 1),
                "memory_peak_mib": track.memory_peak_mib,
            }
            for track, energy, mean in zip(tracks, energies_j, means, strict=True)
        ],
    }


class GpuMeter:
    """Samples ``devices`` from :meth:`start` to :meth:`stop` in a thread of its own.

    ``open_session`` and ``clock`` (nanoseconds) are the seams the tests replace; by
    default this process's NVML session and the monotonic clock.
    """

    def __init__(
        self,
        devices: Sequence[str],
        *,
        interval_ms: int,
        max_samples: int = MAX_SAMPLES,
        open_session: Callable[[Sequence[str]], gpus.Nvml] = gpus.session,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.devices = list(devices)
        self.interval_ms = max(MIN_INTERVAL_MS, int(interval_ms))
        self.tracks = [Track(device, max_kept=max_samples) for device in self.devices]
        self.error = ""
        self.stopping = threading.Event()
        self._open_session = open_session
        self._clock = clock
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._counters: list[bool] = []
        self._started_ns = 0
        self._thread: threading.Thread | None = None

    # The worker's side ----------------------------------------------------------------

    def start(self) -> None:
        """The first reading, then the sampling thread. Call right before the container
        starts; never raises (a failure is in the readings)."""
        try:
            session = self._open_session(self.devices)
            self._nvml, self._handles = session.nvml, list(session.handles)
            self._counters = [self._has_counter(handle) for handle in self._handles]
            self._started_ns = self._clock()
            self._sample()
        except Exception as exc:  # any failure: the run goes on without GPU figures
            self._fail(f"NVML could not be read before the run ({_text(exc)})")
            return
        self._thread = threading.Thread(target=self._loop, name="podium-gpu-meter", daemon=True)
        self._thread.start()

    def stop(self, images: int | None) -> dict[str, Any]:
        """The last reading (the container has exited) and the readings to store with the
        run; ``images``: how many the run had, for the energy per image. Never raises."""
        self.stopping.set()
        thread = self._thread
        if thread is not None:
            thread.join(STOP_TIMEOUT_S)
            if thread.is_alive():
                # Hung in NVML: its tracks are left to it, and none of them is reported.
                self._fail(f"the sampler did not stop within {STOP_TIMEOUT_S:g} s")
                self.tracks = [Track(track.device) for track in self.tracks]
        return self.readings(images)

    def readings(self, images: int | None) -> dict[str, Any]:
        """What :meth:`stop` returns (see the module)."""
        # Partial readings give no figure (the samples read until then are kept).
        counted = [Track(track.device) for track in self.tracks] if self.error else self.tracks
        figures = summary(counted, images)
        return {
            "interval_ms": self.interval_ms,
            "samples": [track.samples for track in self.tracks],
            "samples_taken": max((track.taken for track in self.tracks), default=0),
            **figures,
            "error": self.error,
        }

    # The sampling thread -----------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self.stopping.wait(self.interval_ms / 1000):
                self._sample()
            self._sample(last=True)
        except Exception as exc:  # never reaches the run: recorded in the readings
            elapsed_s = (self._clock() - self._started_ns) / 1e9
            self._fail(f"NVML failed {elapsed_s:.1f} s into the run ({_text(exc)})")

    def _sample(self, *, last: bool = False) -> None:
        """One reading of every GPU; its time is taken after the reads (what they saw)."""
        nvml = self._nvml
        rows = []
        for handle, counter in zip(self._handles, self._counters, strict=True):
            util = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            memory_mib = int(nvml.nvmlDeviceGetMemoryInfo(handle).used) >> 20
            power_w = int(nvml.nvmlDeviceGetPowerUsage(handle)) / 1000
            energy = int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle)) if counter else None
            rows.append((util, memory_mib, power_w, energy))
        t_ms = (self._clock() - self._started_ns) / 1e6
        for track, row in zip(self.tracks, rows, strict=True):
            track.add(t_ms, *row, last=last)

    def _has_counter(self, handle: Any) -> bool:
        nvml = self._nvml
        unsupported = tuple(
            getattr(nvml, name)
            for name in ("NVMLError_NotSupported", "NVMLError_FunctionNotFound")
            if hasattr(nvml, name)
        )
        try:
            nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except unsupported:
            return False
        return True

    def _fail(self, reason: str) -> None:
        if not self.error:
            self.error = reason
            log.warning("GPU meter: %s", reason)


def _text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
