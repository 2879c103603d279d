"""The health gates' decisions, on fake readings (no Docker, no database, no GPU)."""

from __future__ import annotations

import pytest

from scoring.host import gates
from scoring.host.gates import Reading

MEMINFO = """MemTotal:       24683616 kB
MemFree:        22425600 kB
MemAvailable:    2097152 kB
Buffers:           12345 kB
"""


def proc_stat(idle: int, busy: int, cpus: int = 2) -> str:
    """A /proc/stat with ``busy`` jiffies of user time and ``idle`` of idle (+ iowait 0)."""
    lines = [f"cpu  {busy} 0 0 {idle} 0 0 0 0 7 7"]
    lines += [f"cpu{n} 1 0 0 1 0 0 0 0 0 0" for n in range(cpus)]
    lines += ["intr 1 2 3", "ctxt 99"]
    return "\n".join(lines) + "\n"


# Pinned software ----------------------------------------------------------------------


def test_an_unpinned_version_is_recorded_and_passes():
    reading = gates.pinned("engine_version", "20.10.24+dfsg1", "")
    assert reading == Reading("engine_version", True, "20.10.24+dfsg1", "not pinned")


def test_a_pinned_version_must_match_exactly():
    assert gates.pinned("kernel", "6.1.0-18-amd64", "6.1.0-18-amd64").ok
    drifted = gates.pinned("kernel", "6.1.0-21-amd64", "6.1.0-18-amd64")
    assert not drifted.ok
    assert drifted.value == "6.1.0-21-amd64" and "6.1.0-18-amd64" in drifted.detail


# Reserves -----------------------------------------------------------------------------


def test_available_memory_is_read_in_bytes():
    assert gates.mem_available_bytes(MEMINFO) == 2 << 30


def test_a_meminfo_without_memavailable_cannot_be_measured():
    with pytest.raises(gates.ProbeError):
        gates.mem_available_bytes("MemTotal: 1 kB\n")


@pytest.mark.parametrize(("value", "ok"), [(5 << 30, True), ((5 << 30) - 1, False)])
def test_a_reserve_passes_at_its_minimum_and_fails_below(value, ok):
    reading = gates.at_least("disk_free", value, 5 << 30)
    assert reading.ok is ok and reading.value == value


# CPU idleness -------------------------------------------------------------------------


def test_busy_cpus_are_counted_from_two_snapshots():
    before = proc_stat(idle=1000, busy=1000)
    # 200 jiffies passed: 50 busy, 150 idle -> a quarter of 2 CPUs busy = 0.5 CPUs.
    after = proc_stat(idle=1150, busy=1050)
    assert gates.idle_fraction(before, after) == pytest.approx(0.75)
    assert gates.busy_cpus(before, after) == pytest.approx(0.5)


def per_cpu_stat(jiffies: dict[int, tuple[int, int]]) -> str:
    """A /proc/stat whose ``cpuN`` lines have (busy, idle) jiffies each."""
    busy = sum(b for b, _ in jiffies.values())
    idle = sum(i for _, i in jiffies.values())
    lines = [f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0"]
    lines += [f"cpu{n} {b} 0 0 {i} 0 0 0 0 0 0" for n, (b, i) in sorted(jiffies.items())]
    return "\n".join(lines) + "\n"


def test_a_split_host_counts_only_its_scoring_cpus():
    before = per_cpu_stat({0: (0, 0), 1: (0, 0), 2: (0, 0), 3: (0, 0)})
    # 100 jiffies each: CPUs 0 and 1 (the rest: web, builds) flat out, 2 and 3 (scoring) idle
    # but for a tenth of CPU 3.
    after = per_cpu_stat({0: (100, 0), 1: (100, 0), 2: (0, 100), 3: (10, 90)})

    assert gates.busy_cpus(before, after) == pytest.approx(2.1)
    assert gates.busy_cpus(before, after, frozenset({2, 3})) == pytest.approx(0.1)
    assert gates.cpu_idle([gates.busy_cpus(before, after, frozenset({2, 3}))], 1.5).ok
    assert not gates.cpu_idle([gates.busy_cpus(before, after)], 1.5).ok
    with pytest.raises(gates.ProbeError):
        gates.busy_cpus(before, after, frozenset({7}))


def test_iowait_counts_as_idle_and_guest_time_is_not_counted_twice():
    before = "cpu  100 0 0 100 0 0 0 0 0 0\ncpu0 1\n"
    after = "cpu  100 0 0 150 50 0 0 0 900 900\ncpu0 1\n"  # guest is inside user already
    assert gates.idle_fraction(before, after) == 1.0


def test_a_sample_with_no_time_passed_cannot_be_measured():
    with pytest.raises(gates.ProbeError):
        gates.idle_fraction(proc_stat(1, 1), proc_stat(1, 1))


def test_the_quietest_sample_decides_the_cpu_gate():
    reading = gates.cpu_idle([1.9, 1.2, 1.7], maximum=1.5)
    assert reading.ok and reading.value == 1.2
    busy = gates.cpu_idle([1.9, 1.6], maximum=1.5)
    assert not busy.ok and busy.value == 1.6
    assert not gates.cpu_idle([], maximum=1.5).ok


def test_one_busy_core_moves_a_run_on_every_cpu_past_a_small_noise_band():
    # Other work on b of n CPUs leaves a run on every CPU n - b: n / (n - b) times as long.
    allowed = gates.noise_band_busy_cpus(2, 2.0)
    assert 2 / (2 - allowed) == pytest.approx(1.02)
    assert allowed == pytest.approx(0.0392, abs=1e-4)
    assert gates.noise_band_busy_cpus(64, 1.0) == pytest.approx(0.634, abs=1e-3)


def test_a_strict_class_takes_the_smaller_of_its_maximum_and_its_noise_band():
    strict = gates.Limits(max_busy_cpus=0.5, cpu_noise_band_pct=2.0)
    assert gates.busy_cpus_allowed(strict, 2) == (
        pytest.approx(0.0392, abs=1e-4),
        "the noise band ±2 % on 2 CPUs",
    )
    # On a large host the band allows more than the class's own maximum, which holds.
    assert gates.busy_cpus_allowed(strict, 128) == (0.5, "")
    # No band published yet, or a lenient class: the maximum alone.
    assert gates.busy_cpus_allowed(gates.Limits(max_busy_cpus=0.5), 2) == (0.5, "")
    lenient = gates.Limits(max_busy_cpus=1.5)
    assert gates.busy_cpus_allowed(lenient, 2) == (1.5, "")

    # One core spun by a loop on a 2-CPU host: refused by the strict class, not the lenient.
    maximum, why = gates.busy_cpus_allowed(strict, 2)
    refused = gates.cpu_idle([1.02, 1.01, 1.03], maximum, why)
    assert not refused.ok and refused.value == 1.01
    assert refused.detail.startswith("1.01 busy CPUs > 0.0392, the noise band ±2 % on 2 CPUs")
    assert gates.cpu_idle([1.02, 1.01, 1.03], 1.5).ok
    # A quiet host passes the strict class.
    assert gates.cpu_idle([0.02], maximum, why).ok


# GPUs: tests/scoring/test_gpus.py --------------------------------------------------------


# Readings and backoff -------------------------------------------------------------------


def test_readings_are_stored_as_json_by_name():
    readings = [gates.pinned("kernel", "6.1", ""), gates.probe_failed("disk_free", "OSError")]
    assert gates.as_json(readings) == {
        "kernel": {"ok": True, "value": "6.1", "detail": "not pinned"},
        "disk_free": {"ok": False, "value": None, "detail": "could not be measured: OSError"},
    }
    assert [r.name for r in gates.failing(readings)] == ["disk_free"]


def test_waiting_backs_off_from_five_minutes_doubling_to_an_hour():
    delays = [gates.retry_delay_s(n, 300, 3600) for n in range(1, 8)]
    assert delays == [300, 600, 1200, 2400, 3600, 3600, 3600]
