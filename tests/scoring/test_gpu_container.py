"""On a machine with an NVIDIA GPU and the NVIDIA Container Toolkit only (``pytest -m gpu``):
a scored container sees exactly its configured GPU, and the gates read it through NVML.

Skipped elsewhere (no ``nvidia-smi``, no NVIDIA runtime in the engine, or no CUDA image
in the engine: ``PODIUM_GPU_TEST_IMAGE``, default ``docker.io/nvidia/cuda:12.4.1-base-
ubuntu22.04``, which the engine may pull). ``PODIUM_GPU_DEVICES`` names the GPU (default
``0``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from scoring import engine
from scoring.cohort.staging import StagedRun
from scoring.host import gates, gpus
from scoring.run import runner
from tests import factories

pytestmark = [pytest.mark.gpu, pytest.mark.django_db]

IMAGE = os.environ.get("PODIUM_GPU_TEST_IMAGE", "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04")
DEVICES = os.environ.get("PODIUM_GPU_DEVICES", "0").split(",")


def gpu_machine_problem() -> str:
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi here"
    if subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode:
        return "nvidia-smi finds no GPU"
    try:
        if "nvidia" not in (engine.info().get("Runtimes") or {}):
            return "the Docker Engine has no NVIDIA runtime"
        if not engine.image_exists(IMAGE):
            engine.client().images.pull(IMAGE)
    except Exception as exc:  # no engine, no image: nothing to test here
        return f"no engine or no {IMAGE}: {type(exc).__name__}"
    return ""


@pytest.fixture(scope="module", autouse=True)
def gpu_machine() -> None:
    problem = gpu_machine_problem()
    if problem:
        pytest.skip(problem)


def test_a_scored_container_sees_exactly_its_gpu_and_the_gates_read_it(tmp_path: Path, settings):
    listed = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    uuids = {
        index.strip(): uuid.strip()
        for index, uuid in (line.split(",") for line in listed.splitlines())
    }
    wanted = {uuids.get(device, device) for device in DEVICES}
    (tmp_path / "input").mkdir()
    staged = StagedRun(
        run_id=1,
        root=tmp_path,
        input_dir=tmp_path / "input",
        manifest=tmp_path / "input" / "manifest.tsv",
        rows=1,
        references=[0],
        request_ids=["a"],
        staged_names=["a.jpg"],
    )
    spec = runner.container_spec(
        image=IMAGE,
        staged=staged,
        benchmark=factories.BenchmarkFactory(),
        supervisor=settings.PODIUM_SUPERVISOR,
        expect_bytes=4,
        gpu_devices=DEVICES,
    )
    # The scored sandbox, with a CUDA device query in place of the supervisor and entrant.
    spec["entrypoint"] = ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"]
    container_id = engine.create_container(**spec)
    try:
        engine.start(container_id)
        assert engine.wait(container_id, 120) == 0, engine.logs(container_id, stderr=True)
        seen = set(engine.logs(container_id).decode().split())
    finally:
        engine.remove_container(container_id)
    assert seen == wanted

    snapshot = gpus.read(DEVICES)
    readings = gates.gpu(snapshot, gates.Limits(gpu_devices=tuple(DEVICES)))
    assert {g.uuid for g in snapshot.gpus} == wanted
    assert {r.name for r in readings} >= {"gpu_idle", "gpu_temperature", "gpu_processes"}
