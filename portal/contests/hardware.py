"""The hardware classes benchmarks run on: a class's row (read, or created for a name
nobody described), its Docker platform, what entrants are told of it, and whether it can
open (a GPU class needs every pin)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from portal.contests.models import HardwareClass


def hardware_class(name: str) -> HardwareClass | None:
    """The class's row, or None for a class nothing names (a CPU class)."""
    return HardwareClass.objects.filter(name=name).first()


def hardware_class_row(name: str) -> HardwareClass:
    """The row of the class called ``name``, created when there is none as a CPU class of
    the engine's default platform (blank platform, no GPUs: what a class with no row
    means). The one place that creates a class for a name: whatever stores a class name
    (a benchmark, a host registering, a campaign) asks it first, since those are foreign
    keys on the name. Idempotent; a concurrent creation of the same name is retried by
    ``get_or_create``."""
    row, _ = HardwareClass.objects.get_or_create(
        name=name, defaults={"platform": HardwareClass.DEFAULT_PLATFORM}
    )
    return row


def _platform(row: HardwareClass | None) -> str:
    # A blank platform, like no row, is the engine's default.
    return (row.platform if row is not None else "") or str(settings.PODIUM_DOCKER_PLATFORM)


def class_platform(name: str) -> str:
    """The Docker platform of a class's images (``linux/amd64``, ``linux/arm64``): its
    row's, else (no row, or a blank platform) ``PODIUM_DOCKER_PLATFORM`` ("" lets the
    engine choose its own)."""
    return _platform(hardware_class(name))


def class_missing_pins(name: str) -> list[str]:
    """The pins a GPU class still lacks (``HardwareClass.missing_pins``); [] for a CPU
    class or a class with no row."""
    row = hardware_class(name)
    return row.missing_pins() if row is not None else []


def class_cpu_gate(row: HardwareClass | None) -> dict[str, Any]:
    """A class's CPU-idleness gate: ``busy_cpus_max``, the most CPUs' worth of other work a
    host may show before a run (the class's, else ``PODIUM_GATE_CPU_BUSY_MAX``), whether
    that is the platform's ``default``, and ``noise_band`` (strict: also no more than
    would slow a run on every CPU by the class's published noise band)."""
    own = row.cpu_gate_busy_max if row is not None else None
    return {
        "busy_cpus_max": float(settings.PODIUM_GATE_CPU_BUSY_MAX if own is None else own),
        "default": own is None,
        "noise_band": bool(row is not None and row.cpu_gate_noise_band),
    }


def class_hardware(name: str) -> dict[str, Any]:
    """What entrants are told of a benchmark's hardware class: platform, GPUs per run, GPU
    model, the pinned software (null where not pinned), as ``unpinned`` the pins a GPU
    class still lacks (its benchmarks accept no upload until there are none), and its
    CPU-idleness gate (``cpu_gate``, :func:`class_cpu_gate`)."""
    row = hardware_class(name)
    platform = _platform(row)

    def pin(field: str) -> str | None:
        return (getattr(row, field) or None) if row is not None else None

    return {
        "name": name,
        "platform": platform or None,
        "gpus": row.gpus if row is not None else 0,
        "gpu_model": pin("gpu_model"),
        "gpu_driver": pin("pin_gpu_driver"),
        "cuda": pin("pin_cuda"),
        "kernel": pin("pin_kernel"),
        "engine": pin("pin_engine_version"),
        "supervisor_sha256": pin("pin_supervisor_sha256"),
        "unpinned": row.missing_pins() if row is not None else [],
        "cpu_gate": class_cpu_gate(row),
    }
