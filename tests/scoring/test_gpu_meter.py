"""The GPU meter: NVML sampled through a scored run on a GPU class, and what it publishes.

The sampler runs against a fake ``pynvml`` (the module ``scoring.host.gpus.Nvml`` imports)
that replays ``nvml/run.json`` one row per sample: ``[t_ms, util %, memory MiB, power W,
energy counter mJ]`` of one GPU over a 4-second run (idle start, model load, inference,
exit). That recording is synthetic, shaped after an NVIDIA H200 under the EVA-02 starter
kit (this machine has no GPU); ``scripts/gpu-check --out`` writes a real one in the same
format (``nvml-run.json``). The fake's clock is the recording's, so every figure is exact.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from portal.submissions.models import Run, Submission
from portal.submissions.runs import run_claim
from portal.submissions.selectors import resources_of
from scoring.host import gpus, health
from scoring.run import gpumeter, runner
from scoring.run.gpumeter import GpuMeter, Track, summary
from tests.scoring.test_runner import FakeEngine, queued, the_run

__all__ = ["queued"]

RECORDED = Path(__file__).parent / "nvml"
ROWS: list[list[Any]] = json.loads((RECORDED / "run.json").read_text())["samples"][0]
FIRST, LAST = ROWS[0], ROWS[-1]
COUNTER_J = (LAST[4] - FIRST[4]) / 1000  # what the energy counter says of the run


def trapezoids_j(rows: list[list[Any]]) -> float:
    """Power integrated over the recorded times, by hand: W x ms = mJ."""
    return sum((a[3] + b[3]) / 2 * (b[0] - a[0]) for a, b in itertools.pairwise(rows)) / 1000


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # pynvml's name
    pass


class FakeNvml:
    """Stands in for ``pynvml``: each GPU serves its recorded rows, one per sample (the
    utilization read starts a sample), then holds its last row; its clock is the time of
    the row served last."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported

    def __init__(
        self,
        recording: list[list[list[Any]]],
        *,
        counter: bool = True,
        fail_at: int | None = None,
        hang_at: int | None = None,
        init_error: str = "",
    ) -> None:
        self.recording = recording
        self.counter = counter
        self.fail_at = fail_at  # the sample (0-based) whose read fails
        self.hang_at = hang_at  # the sample whose read never returns (until released)
        self.init_error = init_error
        self.served = [0] * len(recording)
        self.t_ms = 0.0
        self.exhausted = threading.Event()  # every GPU served its last row
        self.failed = threading.Event()
        self.release = threading.Event()
        self.hanging = threading.Event()

    def played(self, timeout_s: float = 10.0) -> bool:
        """Wait until the recording ran out or a read failed (True), or ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.exhausted.is_set() or self.failed.is_set():
                return True
            time.sleep(0.005)
        return False

    def clock(self) -> int:
        return int(self.t_ms * 1_000_000)

    # pynvml's names from here on

    def nvmlInit(self) -> None:
        if self.init_error:
            raise NVMLError(self.init_error)

    def nvmlEventSetCreate(self) -> Any:
        raise NVMLError_NotSupported("Not Supported")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index >= len(self.recording):
            raise NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        raise NVMLError("Not Found")

    def _row(self, handle: int) -> list[Any]:
        rows = self.recording[handle]
        return rows[min(max(self.served[handle] - 1, 0), len(rows) - 1)]

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        sample = self.served[handle]
        if sample == self.fail_at:
            self.failed.set()
            raise NVMLError("Unknown Error")
        if sample == self.hang_at:
            self.hanging.set()
            self.release.wait(30)
        self.served[handle] += 1
        row = self._row(handle)
        self.t_ms = row[0]
        if all(n >= len(rows) for n, rows in zip(self.served, self.recording, strict=True)):
            self.exhausted.set()
        return SimpleNamespace(gpu=row[1], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(used=self._row(handle)[2] << 20, total=143_771 << 20)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return round(self._row(handle)[3] * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        if not self.counter:
            raise NVMLError_NotSupported("Not Supported")
        return int(self._row(handle)[4])


def install(monkeypatch: pytest.MonkeyPatch, fake: FakeNvml | None) -> FakeNvml | None:
    """``fake`` as the process's ``pynvml`` (None: nvidia-ml-py missing), no session open."""
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(gpus, "_sessions", {})
    return fake


def metered(fake: FakeNvml, images: int | None = 1000, **kwargs: Any) -> dict[str, Any]:
    """A run metered on the fake's clock until every GPU served its recording."""
    meter = GpuMeter([str(n) for n in range(len(fake.recording))], clock=fake.clock, **kwargs)
    meter.start()
    assert fake.played()
    return meter.stop(images=images)


# The sampler, against recorded readings ----------------------------------------------


def test_a_run_with_an_energy_counter_publishes_the_counters_energy(monkeypatch):
    fake = install(monkeypatch, FakeNvml([ROWS]))
    assert fake is not None

    readings = metered(fake, interval_ms=10)

    taken = readings["samples_taken"]
    assert taken >= len(ROWS)  # the first before the start, ..., the last after the exit
    assert readings["samples"][0][: len(ROWS)] == ROWS  # exactly what NVML said
    assert readings["source"] == "counter" and readings["error"] == ""
    assert readings["energy_j"] == pytest.approx(COUNTER_J)
    assert readings["energy_per_image_j"] == pytest.approx(COUNTER_J / 1000, abs=1e-6)
    # Samples after the recording ended hold its last row (an idle GPU, 0%).
    assert readings["gpu_util_mean_pct"] == pytest.approx(
        sum(row[1] for row in ROWS) / taken, abs=0.05
    )
    assert readings["memory_peak_mib"] == max(row[2] for row in ROWS)
    assert readings["duration_ms"] == LAST[0]
    assert readings["power_mean_w"] == pytest.approx(COUNTER_J / (LAST[0] / 1000), abs=0.05)
    assert readings["interval_ms"] == 10
    assert readings["devices"] == [
        {
            "device": "0",
            "energy_j": readings["energy_j"],
            "util_mean_pct": readings["gpu_util_mean_pct"],
            "memory_peak_mib": readings["memory_peak_mib"],
        }
    ]
    assert json.loads(json.dumps(readings)) == readings  # stored as JSON with the run


def test_without_an_energy_counter_power_is_integrated_and_says_so(monkeypatch):
    fake = install(monkeypatch, FakeNvml([ROWS], counter=False))
    assert fake is not None

    readings = metered(fake, interval_ms=10)

    assert readings["source"] == "power"
    assert all(sample[4] is None for sample in readings["samples"][0])
    assert readings["energy_j"] == pytest.approx(trapezoids_j(ROWS), abs=1e-3)
    assert readings["energy_per_image_j"] == pytest.approx(trapezoids_j(ROWS) / 1000, abs=1e-6)
    # An estimate: within a few percent of what the counter measured.
    assert readings["energy_j"] == pytest.approx(COUNTER_J, rel=0.05)


def test_nvml_failing_mid_run_leaves_no_figure_and_says_why(monkeypatch):
    fake = install(monkeypatch, FakeNvml([ROWS], fail_at=12))
    assert fake is not None

    readings = metered(fake, interval_ms=10)

    assert readings["error"] == "NVML failed 1.1 s into the run (Unknown Error)"
    # Part of a run's energy would look implausibly low: no figure at all.
    for key in ("energy_j", "energy_per_image_j", "gpu_util_mean_pct", "source"):
        assert readings[key] is None
    assert readings["samples"][0] == ROWS[:12]  # what was read, kept as evidence


@pytest.mark.parametrize(
    ("fake", "error"),
    [
        (
            FakeNvml([ROWS], init_error="Driver Not Loaded"),
            "NVML could not be read before the run (NVML could not start: Driver Not Loaded)",
        ),
        (
            FakeNvml([]),
            "NVML could not be read before the run (GPU 0 is not there: Invalid Argument)",
        ),
        (None, "NVML could not be read before the run (nvidia-ml-py is not installed)"),
    ],
)
def test_nvml_that_cannot_start_never_raises(monkeypatch, fake, error):
    install(monkeypatch, fake)
    meter = GpuMeter(["0"], interval_ms=10)

    meter.start()
    readings = meter.stop(images=10)

    assert readings["error"] == error
    assert readings["energy_per_image_j"] is None and readings["samples"] == [[]]


def test_a_sampler_stuck_in_nvml_is_left_behind(monkeypatch):
    fake = install(monkeypatch, FakeNvml([ROWS], hang_at=3))
    assert fake is not None
    monkeypatch.setattr(gpumeter, "STOP_TIMEOUT_S", 0.2)
    meter = GpuMeter(["0"], interval_ms=10, clock=fake.clock)
    try:
        meter.start()
        assert fake.hanging.wait(10)
        readings = meter.stop(images=10)
    finally:
        fake.release.set()

    assert readings["error"] == "the sampler did not stop within 0.2 s"
    assert readings["energy_j"] is None


def test_two_gpus_add_their_energy_and_average_their_utilization(monkeypatch):
    half = [[t, util // 2, mem // 2, power / 2, energy] for t, util, mem, power, energy in ROWS]
    fake = install(monkeypatch, FakeNvml([ROWS, half]))
    assert fake is not None

    readings = metered(fake, interval_ms=10)

    assert [device["device"] for device in readings["devices"]] == ["0", "1"]
    assert readings["energy_j"] == pytest.approx(2 * COUNTER_J)
    assert readings["memory_peak_mib"] == max(row[2] for row in ROWS)
    both = sum(row[1] + row[1] // 2 for row in ROWS)  # later samples: 0% on both
    assert readings["gpu_util_mean_pct"] == pytest.approx(
        both / (2 * readings["samples_taken"]), abs=0.05
    )


# The summary maths -------------------------------------------------------------------


def track(device: str, rows: list[tuple[float, int, int, float, int | None]]) -> Track:
    result = Track(device)
    for index, row in enumerate(rows):
        result.add(*row, last=index == len(rows) - 1)
    return result


def test_the_figures_of_two_seconds_at_steady_draw():
    # 300 W for 2 s: 600 J by power; the counter says 590 J. 100 images.
    steady = track("0", [(t, 80, 4000, 300.0, 10_000 + 295 * t) for t in range(0, 2001, 100)])

    figures = summary([steady], images=100)

    assert figures["source"] == "counter"
    assert figures["energy_j"] == 590.0
    assert figures["energy_per_image_j"] == 5.9
    assert figures["gpu_util_mean_pct"] == 80.0
    assert figures["power_mean_w"] == 295.0
    assert figures["duration_ms"] == 2000
    assert steady.power_mj == pytest.approx(600_000)


def test_one_gpu_without_a_counter_puts_every_gpu_on_power():
    counted = track("0", [(0, 100, 10, 200.0, 0), (1000, 100, 10, 200.0, 250_000)])
    uncounted = track("1", [(0, 50, 20, 100.0, None), (1000, 50, 30, 100.0, None)])

    figures = summary([counted, uncounted], images=None)

    assert figures["source"] == "power"
    assert figures["energy_j"] == 300.0  # 200 J + 100 J, the counter's 250 J unused
    assert figures["energy_per_image_j"] is None  # no image count, no figure per image
    assert figures["gpu_util_mean_pct"] == 75.0
    assert figures["memory_peak_mib"] == 30


def test_a_counter_that_went_backwards_is_not_trusted():
    reloaded = track("0", [(0, 0, 0, 100.0, 5_000_000), (1000, 0, 0, 100.0, 100)])

    assert summary([reloaded], images=1)["source"] == "power"
    assert summary([reloaded], images=1)["energy_j"] == 100.0


def test_a_long_run_keeps_a_bounded_evenly_spaced_sample_of_exact_totals():
    long_run = Track("0", max_kept=10)
    for tick in range(1001):
        long_run.add(tick * 100.0, tick % 101, tick, 100.0 + tick % 7, None, last=tick == 1000)

    kept_times = [sample[0] for sample in long_run.samples]
    assert len(long_run.samples) <= 10 and long_run.taken == 1001
    assert kept_times[0] == 0 and kept_times[-1] == 100_000  # the first and the last
    steps = [b - a for a, b in itertools.pairwise(kept_times)]
    assert len(set(steps[:-1])) == 1 and 0 < steps[-1] <= steps[0]  # evenly, plus the last
    # The totals count every sample, not the kept ones.
    assert long_run.util_mean_pct() == pytest.approx(sum(t % 101 for t in range(1001)) / 1001)
    assert long_run.memory_peak_mib == 1000
    expected_mj = sum((100.0 + t % 7 + 100.0 + (t + 1) % 7) / 2 * 100 for t in range(1000))
    assert long_run.power_mj == pytest.approx(expected_mj)


def test_no_reading_gives_no_figure():
    figures = summary([Track("0")], images=10)

    assert figures["energy_j"] is None and figures["gpu_util_mean_pct"] is None


# The scored run: stored only on a GPU class ------------------------------------------


class MeteredEngine(FakeEngine):
    """The fake engine, its container running until the fake NVML played its recording."""

    def __init__(self, fake: FakeNvml | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fake = fake

    def wait(self, container_id: str, timeout_s: float) -> int | None:
        if self.fake is not None:
            assert self.fake.played()
        return super().wait(container_id, timeout_s)


def score(submission: Submission, monkeypatch, fake: FakeNvml | None, **engine: Any) -> Run:
    MeteredEngine(fake, **engine).install(monkeypatch)
    run = run_claim(submission.pk, lease_s=60)
    assert run is not None
    runner.execute(run, submission, lease_s=60, readings={})
    return the_run(submission)


@pytest.fixture
def gpu_class(monkeypatch, settings):
    """This host's scored containers get GPU 0; the meter samples every 10 ms."""
    monkeypatch.setattr(health, "gpu_devices", lambda: ["0"])
    settings.PODIUM_GPU_SAMPLE_MS = 10


def test_a_run_on_a_gpu_class_stores_its_gpu_readings_with_the_cgroups(
    queued, monkeypatch, sent, gpu_class
):
    fake = install(monkeypatch, FakeNvml([ROWS]))

    run = score(queued, monkeypatch, fake)

    queued.refresh_from_db()
    assert queued.status == Submission.PASSED
    gpu = run.resources["gpu"]
    assert gpu["source"] == "counter" and gpu["error"] == ""
    assert gpu["energy_j"] == pytest.approx(COUNTER_J)
    assert gpu["energy_per_image_j"] == pytest.approx(COUNTER_J / 10)  # a 10-image cohort
    assert gpu["samples"][0][0][1:] == FIRST[1:]  # read before the container started
    assert "cpu_per_wall" in run.resources  # the cgroup's readings are still there
    published = resources_of(run.resources)
    assert published is not None
    assert published["energy_per_image_j"] == gpu["energy_per_image_j"]
    assert published["gpu_util_mean_pct"] == gpu["gpu_util_mean_pct"] > 0


def test_nvml_failing_mid_run_does_not_touch_the_run(queued, monkeypatch, sent, gpu_class):
    fake = install(monkeypatch, FakeNvml([ROWS], fail_at=5))

    run = score(queued, monkeypatch, fake)

    queued.refresh_from_db()
    assert queued.status == Submission.PASSED and run.passed
    assert run.resources["gpu"]["error"].startswith("NVML failed ")
    assert resources_of(run.resources)["energy_per_image_j"] is None  # type: ignore[index]


def test_a_run_the_host_timer_stops_still_keeps_its_gpu_readings(
    queued, monkeypatch, sent, gpu_class
):
    fake = install(monkeypatch, FakeNvml([ROWS]))

    run = score(queued, monkeypatch, fake, wait_result=None)

    assert run.verdict == Submission.ERRORED
    assert run.resources["gpu"]["energy_j"] == pytest.approx(COUNTER_J)


def test_a_run_on_a_cpu_class_never_touches_nvml(queued, monkeypatch, sent):
    install(monkeypatch, None)  # any NVML use would show as readings saying why
    assert health.gpu_devices() == []

    run = score(queued, monkeypatch, None)

    assert run.passed and "gpu" not in run.resources
    published = resources_of(run.resources)
    assert published is not None
    assert published["energy_per_image_j"] is None and published["gpu_util_mean_pct"] is None
