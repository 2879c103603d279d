"""What entrants are told of a benchmark's hardware class, in the API and on its page."""

from __future__ import annotations

import re

from django.core.cache import cache
from django.test import Client

from portal.contests.models import HardwareClass
from tests import factories


def page_text(url: str) -> str:
    """The page's words, without tags, on one line."""
    return " ".join(re.sub(r"<[^>]+>", "", Client().get(url).content.decode()).split())


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
        "kernel": None,
        "engine": None,
        "supervisor_sha256": None,
        "unpinned": ["kernel", "engine", "supervisor"],
        "cpu_gate": {"busy_cpus_max": 1024.0, "default": True, "noise_band": False},
    }
    page = page_text(f"/b/{benchmark.slug}/")
    assert "Each run gets 1 GPU (NVIDIA H200)" in page
    assert "driver 580.159.04, CUDA 13.0" in page
    assert (
        "Not open yet: the class's kernel, engine, supervisor are not pinned, so no upload "
        "is accepted until the organizers pin them." in page
    )

    HardwareClass.objects.filter(name="gpu-h200").update(
        pin_kernel="6.8.0-64k", pin_engine_version="28.2.2", pin_supervisor_sha256="c" * 64
    )
    data = anon.get(f"/api/v1/benchmarks/{benchmark.slug}/").json()
    assert (data["hardware"]["kernel"], data["hardware"]["unpinned"]) == ("6.8.0-64k", [])
    cache.clear()  # the rules' facts of the hosts are cached (RULES_CACHE_S): as once it has passed
    page = page_text(f"/b/{benchmark.slug}/")
    assert "Every host runs kernel 6.8.0-64k and Docker Engine 28.2.2" in page
    assert "Not open yet" not in page


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
        "kernel": None,
        "engine": None,
        "supervisor_sha256": None,
        "unpinned": [],
        "cpu_gate": {"busy_cpus_max": 1024.0, "default": True, "noise_band": False},
    }
    page = Client().get(f"/b/{benchmark.slug}/").content.decode()
    assert "Runs get no GPU." in page
