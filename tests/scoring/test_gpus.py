"""GPUs on a scoring host: the gates' decisions on recorded NVML readings, the scored
container's device request (on the real engine), builds that never get a GPU, and a host
of a GPU class that refuses to register where it could not give a run its GPU.

``nvml/idle.json`` and ``nvml/busy.json`` are NVML snapshots recorded by
``scripts/gpu-check --out`` on a machine with an NVIDIA H200, idle and under a CUDA load;
the hot and ECC cases are the idle recording with one value changed.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from portal.contests.models import Cohort, HardwareClass
from portal.hosts.models import ScoringHost
from portal.submissions.models import Run
from scoring import engine
from scoring.build import builds
from scoring.cohort.staging import StagedRun
from scoring.host import gates, gpus, health, hosts
from scoring.host.gates import Limits, Reading
from scoring.images import platforms
from scoring.run import runner
from tests import factories
from tests.scoring.test_builds import accept, build_sh
from tests.scoring.test_staging import make_submission

RECORDED = Path(__file__).parent / "nvml"
BUSYBOX = "localhost/podium/busybox:1"


def recorded(name: str) -> gpus.Snapshot:
    return gpus.snapshot_from_json(json.loads((RECORDED / f"{name}.json").read_text()))


def changed(snapshot: gpus.Snapshot, **values: Any) -> gpus.Snapshot:
    """The snapshot with GPU 0's ``values`` replaced."""
    first = dataclasses.replace(snapshot.gpus[0], **values)
    return dataclasses.replace(snapshot, gpus=[first, *snapshot.gpus[1:]])


def pinned_to(snapshot: gpus.Snapshot) -> Limits:
    """The default limits, pinned to the recording's own driver and CUDA versions."""
    return Limits(pin_gpu_driver=snapshot.driver, pin_cuda=snapshot.cuda, gpu_devices=("0",))


def failing(readings: list[Reading]) -> dict[str, str]:
    return {r.name: r.detail for r in readings if not r.ok}


def ecc_now(snapshot: gpus.Snapshot) -> dict[str, int]:
    return {g.uuid: g.ecc_uncorrected or 0 for g in snapshot.gpus}


# The gates' decisions, on recorded readings ---------------------------------------------


def test_an_idle_gpu_passes_every_gate():
    idle = recorded("idle")
    readings = gates.gpu(idle, pinned_to(idle), ecc_now(idle))
    assert {r.name for r in readings} == {
        "gpu_driver",
        "gpu_cuda",
        "gpu_processes",
        "gpu_idle",
        "gpu_temperature",
        "gpu_persistence",
        "gpu_ecc",
        "gpu_xid",
    }
    assert failing(readings) == {}


def test_a_busy_gpu_is_refused_for_its_load_and_its_process():
    busy = recorded("busy")
    refused = failing(gates.gpu(busy, pinned_to(busy), ecc_now(busy)))
    assert refused["gpu_idle"] == "busy: GPU 0"
    assert refused["gpu_processes"] == "compute processes on GPU 0"
    assert max(busy.gpus[0].util_percent) > Limits().gpu_max_util_percent


def test_a_compute_process_alone_refuses_the_gpu():
    idle = changed(recorded("idle"), processes=[4242])
    refused = failing(gates.gpu(idle, pinned_to(idle), ecc_now(idle)))
    assert refused == {"gpu_processes": "compute processes on GPU 0"}


def test_one_busy_sample_in_the_window_is_enough_to_refuse():
    idle = changed(recorded("idle"), util_percent=[0, 0, 37, 0, 0])
    assert set(failing(gates.gpu(idle, pinned_to(idle), ecc_now(idle)))) == {"gpu_idle"}


def test_memory_held_by_someone_refuses_the_gpu():
    idle = changed(recorded("idle"), memory_used_mib=20_000)
    assert set(failing(gates.gpu(idle, pinned_to(idle), ecc_now(idle)))) == {"gpu_idle"}


def test_a_hot_gpu_is_refused():
    hot = changed(recorded("idle"), temp_c=71)
    assert failing(gates.gpu(hot, pinned_to(hot), ecc_now(hot))) == {
        "gpu_temperature": "above 60 C: GPU 0"
    }


def test_new_uncorrected_ecc_errors_since_the_last_run_refuse_the_gpu():
    idle = recorded("idle")
    uuid = idle.gpus[0].uuid
    errors = changed(idle, ecc_uncorrected=3)
    assert set(failing(gates.gpu(errors, pinned_to(idle), {uuid: 1}))) == {"gpu_ecc"}
    # The same count as at the last run: nothing new.
    assert failing(gates.gpu(errors, pinned_to(idle), {uuid: 3})) == {}
    # No run before: counted since the driver loaded.
    assert set(failing(gates.gpu(errors, pinned_to(idle), None))) == {"gpu_ecc"}


def test_a_gpu_without_ecc_or_persistence_reporting_is_recorded_so_and_passes():
    idle = changed(recorded("idle"), ecc_uncorrected=None, persistence=None)
    readings = {r.name: r for r in gates.gpu(idle, pinned_to(idle), None)}
    assert readings["gpu_ecc"].ok and readings["gpu_persistence"].ok


def test_persistence_mode_off_refuses_the_gpu():
    off = changed(recorded("idle"), persistence=False)
    assert set(failing(gates.gpu(off, pinned_to(off), ecc_now(off)))) == {"gpu_persistence"}


def test_xid_events_since_the_last_check_refuse_the_gpu():
    idle = recorded("idle")
    xid = dataclasses.replace(idle, xid_events=[{"xid": 79, "gpu_instance": 0}])
    assert failing(gates.gpu(xid, pinned_to(idle), ecc_now(idle))) == {
        "gpu_xid": "XID 79 since the last check"
    }
    unknown = dataclasses.replace(idle, xid_events=None)
    reading = {r.name: r for r in gates.gpu(unknown, pinned_to(idle), ecc_now(idle))}["gpu_xid"]
    assert reading.ok and reading.detail == "XID events not reported by this machine"


def test_a_driver_or_cuda_other_than_the_pinned_one_is_refused():
    idle = recorded("idle")
    other = Limits(pin_gpu_driver="535.104.05", pin_cuda=idle.cuda)
    assert set(failing(gates.gpu(idle, other, ecc_now(idle)))) == {"gpu_driver"}
    other = Limits(pin_gpu_driver=idle.driver, pin_cuda="12.4")
    assert set(failing(gates.gpu(idle, other, ecc_now(idle)))) == {"gpu_cuda"}


def test_snapshots_round_trip_through_json_as_stored_on_the_run():
    idle = recorded("idle")
    assert gpus.snapshot_from_json(json.loads(json.dumps(gpus.snapshot_to_json(idle)))) == idle
    readings = gates.as_json(gates.gpu(idle, pinned_to(idle), ecc_now(idle)))
    assert json.loads(json.dumps(readings)) == readings


@pytest.mark.parametrize(("nvml", "text"), [(13000, "13.0"), (12040, "12.4"), (11080, "11.8")])
def test_nvml_cuda_versions_read_as_people_write_them(nvml, text):
    assert gpus.cuda_version(nvml) == text


@pytest.mark.django_db
def test_the_ecc_baseline_is_the_hosts_last_gated_run(benchmark):
    cohort = Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)

    def run(host: str, count: int) -> None:
        Run.objects.create(
            submission=make_submission(factories.UserFactory(), benchmark),
            cohort=cohort,
            host=host,
            readings={"gpu_ecc": {"ok": True, "value": {"GPU-1": count}, "detail": ""}},
        )

    run("gpu-a", 1)
    run("gpu-a", 2)
    run("gpu-b", 9)
    assert health.ecc_before("gpu-a") == {"GPU-1": 2}
    assert health.ecc_before("nobody") == {}


def nvidia_smi_works() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode == 0


@pytest.mark.django_db
@pytest.mark.skipif(nvidia_smi_works(), reason="this machine has a GPU NVML can read")
def test_a_gpu_nvml_cannot_read_fails_the_gate_instead_of_scoring(settings):
    settings.PODIUM_GPU_GATES = True
    settings.PODIUM_GPU_DEVICES = ["0"]
    readings = health.measure(health.limits(), "gpu-a")
    gpu = {r.name: r for r in readings}["gpu"]
    assert not gpu.ok and gpu.detail == "could not be measured: GpuReadError"


# The scored container ---------------------------------------------------------------------


def test_a_scored_container_gets_exactly_the_configured_gpus():
    spec = gpus.container_gpus(["GPU-5d0e", "1"])
    assert spec["device_requests"] == [
        {"driver": "nvidia", "device_ids": ["GPU-5d0e", "1"], "capabilities": [["gpu"]]}
    ]
    assert spec["environment"] == [
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
        "NVIDIA_VISIBLE_DEVICES=GPU-5d0e,1",
    ]
    cdi = gpus.container_gpus(["0"], cdi=True)
    assert cdi["device_requests"] == [{"driver": "cdi", "device_ids": ["nvidia.com/gpu=0"]}]
    assert gpus.container_gpus([]) == {}


def staged(tmp_path: Path) -> StagedRun:
    (tmp_path / "input").mkdir()
    return StagedRun(
        run_id=1,
        root=tmp_path,
        input_dir=tmp_path / "input",
        manifest=tmp_path / "input" / "manifest.tsv",
        rows=1,
        references=[0],
        request_ids=["a"],
        staged_names=["a.jpg"],
    )


@pytest.mark.django_db
def test_the_scored_container_spec_has_gpus_only_on_a_gpu_host(tmp_path, settings):
    benchmark = factories.BenchmarkFactory()
    common = {
        "image": BUSYBOX,
        "staged": staged(tmp_path),
        "benchmark": benchmark,
        "supervisor": settings.PODIUM_SUPERVISOR,
        "expect_bytes": 4,
    }
    cpu = runner.container_spec(**common)
    assert "device_requests" not in cpu and "devices" not in cpu
    assert cpu["environment"] == []
    gpu = runner.container_spec(**common, gpu_devices=["0"])
    assert gpu["device_requests"][0]["device_ids"] == ["0"]
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in gpu["environment"]


@pytest.mark.django_db
def test_the_hosts_gpus_reach_the_scored_container_only_on_a_gpu_class(settings):
    settings.PODIUM_HARDWARE_CLASS = "gpu-test"
    settings.PODIUM_GPU_DEVICES = ["0"]
    assert health.gpu_devices() == []  # a class nobody described has no GPU
    HardwareClass.objects.create(name="gpu-test", gpus=1, gpu_model="NVIDIA H200")
    assert health.gpu_devices() == ["0"]


@pytest.mark.docker
@pytest.mark.django_db
def test_the_engine_records_exactly_the_requested_gpus_on_the_scored_container(tmp_path, settings):
    """The spec, through the one Docker module, on the real engine (created, not started:
    this engine has no GPU to start it with)."""
    spec = runner.container_spec(
        image=BUSYBOX,
        staged=staged(tmp_path),
        benchmark=factories.BenchmarkFactory(),
        supervisor=settings.PODIUM_SUPERVISOR,
        expect_bytes=4,
        gpu_devices=["GPU-5d0e"],
    )
    container_id = engine.create_container(**spec)
    try:
        config = engine.client().api.inspect_container(container_id)
        requests = config["HostConfig"]["DeviceRequests"]
        assert [(r["Driver"], r["DeviceIDs"], r["Capabilities"]) for r in requests] == [
            ("nvidia", ["GPU-5d0e"], [["gpu"]])
        ]
        assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in config["Config"]["Env"]
    finally:
        engine.remove_container(container_id)


@pytest.mark.docker
@pytest.mark.django_db
def test_a_build_never_gets_a_gpu_even_on_a_gpu_host(
    alice, benchmark, sent, made, tmp_path, settings, monkeypatch
):
    settings.PODIUM_GPU_DEVICES = ["0"]
    settings.PODIUM_HARDWARE_CLASS = benchmark.hardware_class_id
    HardwareClass.objects.filter(name=benchmark.hardware_class_id).update(
        gpus=1,  # a GPU class opens only with all five pins
        pin_gpu_driver="570.1",
        pin_cuda="12.8",
        pin_kernel="6.8.0",
        pin_engine_version="28.2.2",
        pin_supervisor_sha256="a" * 64,
    )
    specs: list[dict[str, Any]] = []
    recording = engine.create_container  # the ``made`` fixture's spy: it cleans up

    def create_spy(**spec: Any) -> str:
        specs.append(dict(spec))
        return recording(**spec)

    monkeypatch.setattr(engine, "create_container", create_spy)
    submission = accept(
        alice,
        benchmark,
        tmp_path,
        {"build.sh": build_sh("chmod 755 /submission/run"), "run": (b"#!/bin/sh\n", 0o644)},
    )
    builds.build_submission(submission.pk)
    submission.refresh_from_db()
    made["images"].append(submission.image_tag)
    assert submission.status == submission.QUEUED, submission.failure_reason
    assert specs, "build.sh ran in no container"
    for spec in specs:
        assert "device_requests" not in spec and "devices" not in spec
        # Nothing that hands out a GPU: the plain runtime, and the NVIDIA hook told "void".
        assert spec.get("runtime") == "runc"
        environment = spec.get("environment") or {}
        if isinstance(environment, dict):
            environment = [f"{key}={value}" for key, value in environment.items()]
        nvidia = [str(v) for v in environment if "NVIDIA" in str(v)]
        assert nvidia == ["NVIDIA_VISIBLE_DEVICES=void"], nvidia


# Registration ---------------------------------------------------------------------------

LISTED = [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-5d0e"}]


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({}, ""),
        ({"devices": ["GPU-5d0e"]}, ""),
        ({"gpus_in_class": 0, "devices": [], "runtimes": []}, ""),
        ({"devices": []}, "the class gives each host 1 GPU(s) but PODIUM_GPU_DEVICES names 0"),
        ({"runtimes": ["runc"]}, "the Docker Engine has no NVIDIA runtime"),
        ({"runtimes": ["runc"], "cdi": True}, ""),
        ({"devices": ["3"]}, "nvidia-smi does not list GPU 3"),
        ({"listed": []}, "nvidia-smi does not list GPU 0"),
    ],
)
def test_a_gpu_class_host_registers_only_when_it_can_give_runs_their_gpus(kwargs, problem):
    arguments = {
        "gpus_in_class": 1,
        "devices": ["0"],
        "runtimes": ["runc", "nvidia"],
        "cdi": False,
        "listed": LISTED,
        **kwargs,
    }
    assert gpus.registration_problem(**arguments).startswith(problem)
    assert bool(gpus.registration_problem(**arguments)) == bool(problem)


@pytest.mark.docker
@pytest.mark.django_db
@pytest.mark.skipif(nvidia_smi_works(), reason="this machine has a GPU")
def test_a_host_without_the_nvidia_runtime_refuses_its_gpu_class(settings, caplog):
    settings.PODIUM_HOST_NAME = "gpu-host-1"
    settings.PODIUM_HARDWARE_CLASS = "gpu-test"
    settings.PODIUM_GPU_DEVICES = ["0"]
    HardwareClass.objects.create(name="gpu-test", gpus=1)
    with pytest.raises(hosts.HostRefused, match="NVIDIA runtime"):
        hosts.register()
    assert not ScoringHost.objects.exists()
    assert not hosts.accepts_work("gpu-host-1")
    assert any("refuses to register for gpu-test" in r.getMessage() for r in caplog.records)
    # The same machine serves a CPU class.
    settings.PODIUM_HARDWARE_CLASS = "cpu-test"
    assert hosts.register().hardware_class_id == "cpu-test"


@pytest.mark.docker
@pytest.mark.django_db
def test_a_host_refuses_a_class_of_another_architecture(settings):
    own = platforms.host_platform()
    other = HardwareClass.ARM64 if own == HardwareClass.AMD64 else HardwareClass.AMD64
    settings.PODIUM_HOST_NAME = "arch-host-1"
    settings.PODIUM_HARDWARE_CLASS = "cpu-other"
    HardwareClass.objects.create(name="cpu-other", platform=other)
    with pytest.raises(hosts.HostRefused, match=f"runs {other} images but this host is {own}"):
        hosts.register()
    assert not hosts.accepts_work("arch-host-1")
    HardwareClass.objects.create(name="cpu-own", platform=own)
    settings.PODIUM_HARDWARE_CLASS = "cpu-own"
    assert hosts.register().hardware_class_id == "cpu-own"
