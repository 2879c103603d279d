"""The meter's readings (scoring/run/meter.py) from the cgroup files the supervisor carries.

The v1 contents were recorded from real scored containers (Docker 20.10, cgroup v1,
Linux 6.x): a shell pipeline holding a 20 MB string that read 1 MiB and wrote 2 MiB
with O_DIRECT, and a program whose child the OOM killer took under a 32 MiB limit. The
v2 contents follow the formats of the kernel's cgroup-v2 documentation.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scoring.run import meter
from scoring.run.meter import Resources

V1_RUN = {
    "cpuacct/cpuacct.usage": "352642942\n",
    "cpuacct/cpuacct.usage_user": "179965970\n",
    "cpuacct/cpuacct.usage_sys": "163991663\n",
    "cpuacct/cpuacct.stat": "user 18\nsystem 16\n",
    "memory/memory.max_usage_in_bytes": "47579136\n",
    "memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
    "pids/pids.peak": "6\n",
    "blkio/blkio.throttle.io_service_bytes": (
        "254:0 Read 1183744\n254:0 Write 2097152\n254:0 Sync 5378048\n254:0 Async 0\n"
        "254:0 Discard 2097152\n254:0 Total 5378048\nTotal 5378048\n"
    ),
}
V1_OOM = {
    "cpuacct/cpuacct.usage": "61024827\n",
    "cpuacct/cpuacct.usage_user": "8000000\n",
    "cpuacct/cpuacct.usage_sys": "47982163\n",
    "cpuacct/cpuacct.stat": "user 0\nsystem 5\n",
    "memory/memory.max_usage_in_bytes": "33554432\n",
    "memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
    "pids/pids.peak": "7\n",
    "blkio/blkio.throttle.io_service_bytes": "Total 0\n",
}
V2_RUN = {
    "cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n",
    "cpu.stat": (
        "usage_usec 1334567\nuser_usec 1034567\nsystem_usec 300000\nnice_usec 0\n"
        "core_sched.force_idle_usec 0\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n"
        "nr_bursts 0\nburst_usec 0\n"
    ),
    "memory.peak": "71303168\n",
    "memory.events": "low 0\nhigh 0\nmax 12\noom 0\noom_kill 0\noom_group_kill 0\n",
    "pids.peak": "9\n",
    "io.stat": (
        "8:16 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0\n"
        "8:0 rbytes=90430464 wbytes=299008000 rios=8950 wios=1252 dbytes=50331648 dios=3021\n"
    ),
}
V1_NAMES = [
    "cpuacct/cpuacct.usage",
    "cpuacct/cpuacct.usage_user",
    "cpuacct/cpuacct.usage_sys",
    "cpuacct/cpuacct.stat",
    "memory/memory.max_usage_in_bytes",
    "memory/memory.oom_control",
    "pids/pids.peak",
    "blkio/blkio.throttle.io_service_bytes",
    "blkio/blkio.io_service_bytes_recursive",
]
V2_NAMES = ["cgroup.controllers", "cpu.stat", "memory.peak", "memory.events", "pids.peak"]
V2_NAMES.append("io.stat")


def line(files: dict[str, str | bytes], meter_ns: int = 412_753) -> dict[str, Any]:
    """The two fields as the supervisor writes them (through JSON, as the runner reads)."""
    cgroup = {
        name: base64.b64encode(text.encode() if isinstance(text, str) else text).decode()
        for name, text in files.items()
    }
    return json.loads(json.dumps({"cgroup": cgroup, "meter_ns": meter_ns}))


def without(files: dict[str, str], *names: str) -> dict[str, str | bytes]:
    return {name: text for name, text in files.items() if name not in names}


def test_v1_readings_of_a_real_container() -> None:
    resources = meter.from_line(line(V1_RUN))
    # The exact total (cpuacct.usage), split as the sampled usage_user / usage_sys.
    user_share = 179965970 / (179965970 + 163991663)
    assert resources.cpu_user_s == pytest.approx(0.352642942 * user_share)
    assert resources.cpu_system_s == pytest.approx(0.352642942 * (1 - user_share))
    assert resources == Resources(
        cgroup_version=1,
        cpu_user_s=resources.cpu_user_s,
        cpu_system_s=resources.cpu_system_s,
        memory_peak_bytes=47579136,
        pids_peak=6,
        io_read_bytes=1183744,
        io_write_bytes=2097152,
        oom_events=0,
        meter_ms=0.412753,
    )


def test_v1_an_oom_kill_is_an_oom_event() -> None:
    resources = meter.from_line(line(V1_OOM))
    assert resources.oom_events == 1
    assert resources.memory_peak_bytes == 32 * 2**20
    assert (resources.io_read_bytes, resources.io_write_bytes) == (0, 0)


def test_v1_cpu_falls_back_to_cpuacct_stat_ticks() -> None:
    files = without(V1_RUN, "cpuacct/cpuacct.usage_user", "cpuacct/cpuacct.usage_sys")
    resources = meter.from_line(line(files))
    assert resources.cpu_user_s == pytest.approx(0.352642942 * 18 / 34)
    assert resources.cpu_system_s == pytest.approx(0.352642942 * 16 / 34)


def test_v1_cpu_without_the_total_is_the_samples_as_they_are() -> None:
    resources = meter.from_line(line(without(V1_RUN, "cpuacct/cpuacct.usage")))
    assert (resources.cpu_user_s, resources.cpu_system_s) == (0.17996597, 0.163991663)
    ticks_only = without(
        V1_RUN, "cpuacct/cpuacct.usage", "cpuacct/cpuacct.usage_user", "cpuacct/cpuacct.usage_sys"
    )
    resources = meter.from_line(line(ticks_only))
    assert (resources.cpu_user_s, resources.cpu_system_s) == (0.18, 0.16)


def test_v1_a_run_shorter_than_a_sample_is_all_user_time() -> None:
    files = {**V1_RUN, "cpuacct/cpuacct.usage_user": "0\n", "cpuacct/cpuacct.usage_sys": "0\n"}
    resources = meter.from_line(line(files))
    assert (resources.cpu_user_s, resources.cpu_system_s) == (0.352642942, 0.0)


def test_v1_io_falls_back_to_the_recursive_blkio_file() -> None:
    files: dict[str, str | bytes] = {
        **without(V1_RUN, "blkio/blkio.throttle.io_service_bytes"),
        "blkio/blkio.io_service_bytes_recursive": (
            "8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 0\n8:0 Async 12288\n8:0 Total 12288\n"
            "8:16 Read 1\n8:16 Write 2\n8:16 Sync 0\n8:16 Async 3\n8:16 Total 3\nTotal 12291\n"
        ),
    }
    resources = meter.from_line(line(files))
    assert (resources.io_read_bytes, resources.io_write_bytes) == (4097, 8194)


def test_v1_kernels_without_pids_peak_report_none() -> None:
    resources = meter.from_line(line(without(V1_RUN, "pids/pids.peak")))
    assert resources.pids_peak is None
    assert resources.memory_peak_bytes == 47579136


def test_v2_readings_in_the_kernel_documentation_formats() -> None:
    resources = meter.from_line(line(V2_RUN, meter_ns=1_500_000))
    assert resources == Resources(
        cgroup_version=2,
        cpu_user_s=1.034567,
        cpu_system_s=0.3,
        memory_peak_bytes=71303168,
        pids_peak=9,
        io_read_bytes=1459200 + 90430464,
        io_write_bytes=314773504 + 299008000,
        oom_events=0,
        meter_ms=1.5,
    )


def test_v2_an_empty_io_stat_is_no_io() -> None:
    resources = meter.from_line(line({**V2_RUN, "io.stat": ""}))
    assert (resources.io_read_bytes, resources.io_write_bytes) == (0, 0)


def test_v2_io_stat_ignores_keys_of_other_io_controllers() -> None:
    io_stat = (
        "259:0 rbytes=100 wbytes=200 rios=1 wios=2 dbytes=0 dios=0 cost.vrate=100.00 "
        "cost.usage=1234 cost.wait=0 cost.indebt=0 cost.indelay=0\n"
        "8:0 rbytes=1 wbytes=2 rios=1 wios=1 dbytes=0 dios=0 depth=max avg_lat=0 win=0\n"
    )
    resources = meter.from_line(line({**V2_RUN, "io.stat": io_stat}))
    assert (resources.io_read_bytes, resources.io_write_bytes) == (101, 202)


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ("oom 1\noom_kill 1\n", 1),
        ("oom 1\noom_kill 3\noom_group_kill 1\n", 3),  # one group kill takes several
        ("oom 2\noom_kill 0\n", 2),  # the limit was hit with nothing left to kill
        ("oom 4\n", 4),  # kernels before oom_kill
    ],
)
def test_v2_oom_events_are_the_larger_of_oom_and_oom_kill(events: str, expected: int) -> None:
    resources = meter.from_line(
        line({**V2_RUN, "memory.events": f"low 0\nhigh 0\nmax 1\n{events}"})
    )
    assert resources.oom_events == expected


def test_v2_files_the_kernel_does_not_offer_are_none() -> None:
    # memory.peak before Linux 5.19, pids.peak before 6.x, io.stat and cpu.stat's
    # fields without their controllers: the supervisor leaves a missing file out.
    resources = meter.from_line(line({"cgroup.controllers": "cpu\n", "cpu.stat": "usage_usec 7\n"}))
    assert resources == Resources(2, None, None, None, None, None, None, None, 0.412753)


def test_a_native_run_has_no_cgroup_readings() -> None:
    resources = meter.from_line(line({}, meter_ns=120))
    assert resources == Resources(0, None, None, None, None, None, None, None, 0.00012)


@pytest.mark.parametrize(
    "odd",
    ["", "\n", "abc\n", "-1\n", "12 34\n", "1.5\n", "max\n", b"\xff\xfe\x00", "9" * 5000],
    ids=["empty", "newline", "word", "negative", "two", "float", "max", "binary", "long"],
)
@pytest.mark.parametrize(
    ("files", "name", "fields"),
    [
        (V2_RUN, "memory.peak", {"memory_peak_bytes"}),
        (V2_RUN, "pids.peak", {"pids_peak"}),
        (V2_RUN, "cpu.stat", {"cpu_user_s", "cpu_system_s"}),
        (V2_RUN, "memory.events", {"oom_events"}),
        (V1_RUN, "memory/memory.max_usage_in_bytes", {"memory_peak_bytes"}),
        (V1_RUN, "memory/memory.oom_control", {"oom_events"}),
        (V1_RUN, "pids/pids.peak", {"pids_peak"}),
    ],
)
def test_an_odd_file_gives_none_for_its_readings_only(
    files: dict[str, str], name: str, fields: set[str], odd: str | bytes
) -> None:
    normal = meter.from_line(line(files)).as_dict()
    resources = meter.from_line(line({**files, name: odd})).as_dict()
    assert {field: resources[field] for field in fields} == dict.fromkeys(fields)
    others = set(resources) - fields
    assert {k: resources[k] for k in others} == {k: normal[k] for k in others}


@pytest.mark.parametrize(
    ("files", "name"),
    [(V2_RUN, "io.stat"), (V1_RUN, "blkio/blkio.throttle.io_service_bytes")],
)
@pytest.mark.parametrize(
    "odd",
    ["8:0 rbytes=1\n", "8:0 rbytes=x wbytes=1\n", "sda rbytes=1 wbytes=1\n", "8:0 Read\n", "junk"],
)
def test_an_io_file_with_an_odd_line_gives_no_sum(
    files: dict[str, str], name: str, odd: str
) -> None:
    resources = meter.from_line(line({**files, name: odd}))
    assert (resources.io_read_bytes, resources.io_write_bytes) == (None, None)


@given(
    files=st.dictionaries(
        st.sampled_from(V1_NAMES) | st.sampled_from(V2_NAMES), st.binary(max_size=300)
    ),
    meter_ns=st.integers(min_value=0, max_value=10**12),
)
def test_no_file_contents_make_it_raise(files: dict[str, str | bytes], meter_ns: int) -> None:
    resources = meter.from_line(line(files, meter_ns=meter_ns))
    assert resources.cgroup_version in (0, 1, 2)
    for value in resources.as_dict().values():
        assert value is None or value >= 0


@pytest.mark.parametrize(
    "data",
    [
        {"meter_ns": 1},
        {"cgroup": None, "meter_ns": 1},
        {"cgroup": ["cpu.stat"], "meter_ns": 1},
        {"cgroup": {"cpu.stat": 12}, "meter_ns": 1},
        {"cgroup": {"cpu.stat": None}, "meter_ns": 1},
        {"cgroup": {1: "AAAA"}, "meter_ns": 1},
        {"cgroup": {"cpu.stat": "not base64!"}, "meter_ns": 1},
        {"cgroup": {"cpu.stat": "AAA"}, "meter_ns": 1},  # bad padding
        {"cgroup": {}},
        {"cgroup": {}, "meter_ns": -1},
        {"cgroup": {}, "meter_ns": 1.5},
        {"cgroup": {}, "meter_ns": True},
        {"cgroup": {}, "meter_ns": "1"},
    ],
)
def test_a_line_that_is_not_the_supervisors_raises(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="supervisor"):
        meter.from_line(data)


def test_as_dict_is_json_ready_and_keyed_by_field() -> None:
    resources = meter.from_line(line(V1_RUN))
    assert json.loads(json.dumps(resources.as_dict())) == resources.as_dict()
    assert list(resources.as_dict()) == [
        "cgroup_version",
        "cpu_user_s",
        "cpu_system_s",
        "memory_peak_bytes",
        "pids_peak",
        "io_read_bytes",
        "io_write_bytes",
        "oom_events",
        "meter_ms",
    ]


def test_cpu_per_wall_is_cpu_seconds_per_wall_second() -> None:
    resources = meter.from_line(line(V2_RUN))
    assert meter.cpu_per_wall(resources, 2 * 10**9) == pytest.approx((1.034567 + 0.3) / 2)
    assert meter.cpu_per_wall(resources, 0) is None
    assert meter.cpu_per_wall(meter.from_line(line({})), 10**9) is None
