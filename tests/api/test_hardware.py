"""What entrants are told of a benchmark's hardware class, in the API and on its page."""

from __future__ import annotations

from django.test import Client

from portal.hosts.models import HardwareClass
from tests import factories


def test_a_gpu_benchmark_names_its_gpu_model_driver_and_cuda(db, anon):
    HardwareClass.objects.create(
        name="gpu-h200",
        gpus=1,
        gpu_model="NVIDIA H200",
        pin_gpu_driver="580.159.04",
        pin_cuda="13.0",
    )
    benchmark = factories.BenchmarkFactory(hardware_class="gpu-h200")

    data = anon.get(f"/api/v1/benchmarks/{benchmark.slug}/").json()
    assert data["hardware"] == {
        "name": "gpu-h200",
        "platform": "linux/amd64",
        "gpus": 1,
        "gpu_model": "NVIDIA H200",
        "gpu_driver": "580.159.04",
        "cuda": "13.0",
    }
    page = Client().get(f"/b/{benchmark.slug}/").content.decode()
    assert "Each run gets 1 GPU (NVIDIA H200)" in " ".join(page.split())
    assert "driver 580.159.04, CUDA 13.0" in " ".join(page.split())


def test_a_class_nobody_described_is_a_cpu_class(db, anon, settings):
    settings.PODIUM_DOCKER_PLATFORM = ""
    benchmark = factories.BenchmarkFactory(hardware_class="cpu-x86_64")

    data = anon.get(f"/api/v1/benchmarks/{benchmark.slug}/").json()
    assert data["hardware"] == {
        "name": "cpu-x86_64",
        "platform": None,
        "gpus": 0,
        "gpu_model": None,
        "gpu_driver": None,
        "cuda": None,
    }
    page = Client().get(f"/b/{benchmark.slug}/").content.decode()
    assert "Runs get no GPU." in page
