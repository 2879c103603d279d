"""``manage.py seed_eva02``: the flagship benchmark and its hardware class, ready for a cohort.

Idempotent. ``eva02-imagenet1k-v3`` is created, or brought back to the rules' numbers
(docs/rules.md, "The flagship benchmark"): every field that differs is set and named in
the output, so running it again changes nothing and says so. The ``gpu-h200`` hardware
class row gets its platform (ARM64 hosts with an NVIDIA H200: Grace Hopper class), GPU
count and GPU model. Its five pins (GPU driver, CUDA, kernel, engine, supervisor) are
asked for as options, set when given and otherwise left as they are: the benchmark
accepts no upload until all five are set (``HardwareClass.missing_pins``). Cohorts are not
touched: the command ends by saying what staff must still do (pin the class, import the
cohorts with ``import_cohort``, a final cohort for the final rerun among them, start a
scoring host of the class).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from portal.contests import rules
from portal.contests.models import GIB, Benchmark, Cohort, HardwareClass
from portal.web.management.commands.seed_demo import (
    FLAGSHIP_CLOSES_AT,
    FLAGSHIP_DESCRIPTION,
    FLAGSHIP_OPENS_AT,
    FLAGSHIP_SLUG,
)

HARDWARE_CLASS = "gpu-h200"
HARDWARE = {
    "platform": HardwareClass.ARM64,
    "gpus": 1,
    "gpu_model": "NVIDIA H200",
    # The strict CPU-idleness gate: at most half a CPU of other work, and never more
    # than would slow a run on every CPU by the class's published noise band.
    "cpu_gate_busy_max": 0.5,
    "cpu_gate_noise_band": True,
}
HARDWARE_DESCRIPTION = "One NVIDIA H200 per scored run, on an ARM64 host (linux/arm64)."
# The class's pins, by option: (option, HardwareClass field, where a host shows it).
PIN_OPTIONS = (
    ("gpu_driver", "pin_gpu_driver", "nvidia-smi's driver version"),
    ("cuda", "pin_cuda", "nvidia-smi's CUDA version"),
    ("kernel", "pin_kernel", "uname -r"),
    ("engine_version", "pin_engine_version", "docker version's server version"),
    ("supervisor_sha256", "pin_supervisor_sha256", "sha256sum of the host's supervisor"),
)

# Docker Hub's official images, the PyTorch and NVIDIA organisations there, and NVIDIA's
# own registry: where the CUDA/PyTorch bases an entrant needs come from.
ALLOWED_REGISTRIES = "docker.io/library/\ndocker.io/pytorch/\ndocker.io/nvidia/\nnvcr.io/nvidia/\n"

# The flagship's validation-data boundary, which every official upload confirms.
BOUNDARY = """\
Nothing derived from the ImageNet-1k validation set may be in a submission or in anything \
it uses, or be consulted while it runs, or have helped make it: not the images or any part \
of them, not their labels, reference answers or content hashes, and no embedding, \
statistic or other representation learned or computed from them. That covers training, \
fine-tuning, distillation, calibration and every other way of fitting a model, \
checkpoint or artifact.

The one allowed use is evaluation. You may score a candidate on official runs, on the \
published practice material or on your own validation runs, and let the numbers and the \
failures you see guide your work; the validation data itself never goes into an artifact.

During a run, each input image may be used only to produce its own answer in that run. \
Recognizing an input by matching it against stored validation content is consultation, \
and forbidden.

You must be able to show where your source, environments, models, checkpoints and built \
artifacts come from. Apparent winners are reviewed for it; a submission that cannot \
establish this boundary is disqualified and all of its runs leave the board."""

# docs/rules.md ("The flagship benchmark"), field by field.
FLAGSHIP: dict[str, Any] = {
    "title": "EVA-02 ImageNet-1k inference",
    "description": FLAGSHIP_DESCRIPTION,
    "opens_at": FLAGSHIP_OPENS_AT,
    "closes_at": FLAGSHIP_CLOSES_AT,
    "cohort_size": 10_000,
    "pass_min_matches": 9_900,
    "attempts_per_day": 2,
    "attempt_timezone": "Asia/Seoul",
    "practice_per_day": 10,
    "max_environments": 2,
    "max_image_bytes": 16 * GIB,
    "build_timeout_s": 30 * 60,
    "max_concurrent_builds": 2,
    "score_timeout_s": 16 * 60,
    "runtime_tail_bytes": 16 * 1024,
    "verify_top": 20,
    "verify_tolerance_pct": 10,
    "hardware_class": HARDWARE_CLASS,
    "allowed_registries": ALLOWED_REGISTRIES,
    "validation_boundary": BOUNDARY,
    "review_top": 3,
}


def _column(name: str) -> str:
    """The attribute holding a setting's stored value: a foreign key's own value (the
    hardware class's name, its row seeded first), not the related row."""
    return str(getattr(Benchmark._meta.get_field(name), "attname", name))


class Command(BaseCommand):
    help = (
        "Create (or bring back to the rules' numbers) the eva02-imagenet1k-v3 benchmark and "
        "its gpu-h200 hardware class, and say what staff must still do."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        for option, _field, shown_by in PIN_OPTIONS:
            parser.add_argument(
                f"--{option.replace('_', '-')}",
                default="",
                help=f"Pin every {HARDWARE_CLASS} host to this ({shown_by}).",
            )

    def handle(self, *args: Any, **options: Any) -> None:
        pins = {field: str(options[option]).strip() for option, field, _ in PIN_OPTIONS}
        with transaction.atomic():
            hardware = self._seed_hardware_class({k: v for k, v in pins.items() if v})
            benchmark = self._seed_benchmark()
        self._next_steps(benchmark, hardware)

    def _seed_hardware_class(self, pins: dict[str, str]) -> HardwareClass:
        wanted = {**HARDWARE, **pins}
        row, created = HardwareClass.objects.select_for_update().get_or_create(
            name=HARDWARE_CLASS, defaults={**wanted, "description": HARDWARE_DESCRIPTION}
        )
        if created:
            self.stdout.write(f"Created hardware class {HARDWARE_CLASS}.")
            return row
        changed = [name for name, value in wanted.items() if getattr(row, name) != value]
        for name in changed:
            setattr(row, name, wanted[name])
        if changed:
            row.save(update_fields=changed)
            self.stdout.write(f"Updated hardware class {HARDWARE_CLASS}: {', '.join(changed)}.")
        else:
            self.stdout.write(f"Hardware class {HARDWARE_CLASS} is in place.")
        return row

    def _seed_benchmark(self) -> Benchmark:
        benchmark = Benchmark.objects.select_for_update().filter(slug=FLAGSHIP_SLUG).first()
        if benchmark is None:
            values = {_column(name): value for name, value in FLAGSHIP.items()}
            benchmark = Benchmark(slug=FLAGSHIP_SLUG, **values)
            benchmark.full_clean()
            benchmark.save()
            self.stdout.write(f"Created benchmark {FLAGSHIP_SLUG}.")
            return benchmark
        changed = [
            name for name, value in FLAGSHIP.items() if getattr(benchmark, _column(name)) != value
        ]
        if not changed:
            self.stdout.write(f"Benchmark {FLAGSHIP_SLUG} has the rules' settings.")
            return benchmark
        shown = []
        for name in changed:
            old = getattr(benchmark, _column(name))
            setattr(benchmark, _column(name), FLAGSHIP[name])
            long_text = name in ("description", "allowed_registries", "validation_boundary")
            shown.append(name if long_text else f"{name} {old} -> {FLAGSHIP[name]}")
        benchmark.full_clean()
        benchmark.save(update_fields=changed)
        self.stdout.write(f"Updated benchmark {FLAGSHIP_SLUG}: {'; '.join(shown)}.")
        return benchmark

    def _next_steps(self, benchmark: Benchmark, hardware: HardwareClass) -> None:
        sizes = {cohort.kind: cohort.items.count() for cohort in benchmark.cohorts.all()}
        official, practice = sizes.get(Cohort.OFFICIAL), sizes.get(Cohort.PRACTICE)
        steps = []
        missing = hardware.missing_pins()
        if missing:
            wanted = [
                f"--{option.replace('_', '-')} V"
                for option, field, _ in PIN_OPTIONS
                if not getattr(hardware, field)
            ]
            steps.append(
                f"Pin the class's {', '.join(missing)} (as a host of the class shows them); "
                "no upload is accepted until all five are set:\n"
                f"    manage.py seed_eva02 {' '.join(wanted)}"
            )
        else:
            self.stdout.write(f"Hardware class {HARDWARE_CLASS} is pinned.")
        if official is None or practice is None:
            steps.append(
                "Import both cohorts from the ImageNet validation JPEGs, the frozen reference "
                "file and the private seed (never on the command line):\n"
                f"    manage.py import_cohort --benchmark {FLAGSHIP_SLUG} --imagenet-val DIR "
                "--reference FILE --seed-file FILE"
            )
        else:
            self.stdout.write(
                f"Cohorts in place: official {official:,} images, practice {practice:,}."
            )
        final = sizes.get(Cohort.FINAL)
        if final is None:
            steps.append(
                "Import a final cohort for the final rerun: private like the official one and "
                "fresh, images no run has seen (without it the rerun is on the official "
                "cohort, not fresh, and staff must confirm that choice):\n"
                f"    manage.py import_cohort --benchmark {FLAGSHIP_SLUG} --kind final "
                "--images DIR --answers FILE"
            )
        else:
            self.stdout.write(f"Final cohort in place: {final:,} images.")
        canaries = sizes.get(Cohort.CANARY, 0)
        needed = rules.canaries_wanted(official or FLAGSHIP["cohort_size"])
        if canaries < needed:
            steps.append(
                f"Import a canary pool of at least {needed:,} images that no public set holds"
                f" (now {canaries:,}), with the reference model's answers; without one,"
                " verification cannot stop a lookup table:\n"
                f"    manage.py import_cohort --benchmark {FLAGSHIP_SLUG} --kind canary "
                "--images DIR --answers FILE"
            )
        steps.append(
            f"Start a scoring host of class {HARDWARE_CLASS} (PODIUM_HARDWARE_CLASS="
            f"{HARDWARE_CLASS}, PODIUM_GPU_DEVICES naming its GPU) on an ARM64 machine."
        )
        self.stdout.write("Still to do:")
        for number, step in enumerate(steps, start=1):
            self.stdout.write(f"  {number}. {step}")
