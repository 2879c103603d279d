"""``manage.py estimation_suite SLUG``: a metered-estimation phase's suites.

- ``--role phase|final|public --seed-file FILE``: generate the role's suite from the
  private seed in FILE (its first line; never stored, only its SHA-256). A scoring host
  of the benchmark's class generates the MLPs and their Monte Carlo reference, off any
  entrant's clock; ``--show`` follows its progress.
- ``--role ROLE --import DIR``: take a prepared whestbench dataset folder instead (``whest
  dataset bake``'s output) with the phase's width and depth.
- ``--show`` (alone): each suite's generation record.
"""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from portal.contests.models import Benchmark
from portal.core import errors
from portal.estimation import services
from portal.estimation.models import Suite


class Command(BaseCommand):
    help = "Generate, import or show a metered-estimation phase's suites."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--role", choices=[r for r, _ in Suite.ROLES])
        source = parser.add_mutually_exclusive_group()
        source.add_argument("--seed-file", type=Path, metavar="FILE")
        source.add_argument("--import", dest="import_dir", type=Path, metavar="DIR")
        parser.add_argument("--show", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        benchmark = Benchmark.objects.filter(slug=options["slug"]).first()
        if benchmark is None:
            raise CommandError(f"no benchmark {options['slug']!r}")
        role: str | None = options["role"]
        try:
            if options["seed_file"] is not None or options["import_dir"] is not None:
                if role is None:
                    raise CommandError("--role is needed to generate or import a suite")
                self._make(benchmark, role, options["seed_file"], options["import_dir"])
            elif not options["show"]:
                raise CommandError("say --seed-file, --import or --show")
        except errors.PodiumError as exc:
            raise CommandError(exc.detail) from exc
        if options["show"]:
            self._show(benchmark)

    def _make(
        self, benchmark: Benchmark, role: str, seed_file: Path | None, folder: Path | None
    ) -> None:
        if folder is not None:
            suite = services.suite_import(benchmark=benchmark, role=role, folder=folder, user=None)
            self.stdout.write(
                f"Imported the {role} suite ({suite.n_mlps} MLPs) as suite {suite.pk}."
            )
            return
        if seed_file is None:
            raise CommandError("say --seed-file or --import")
        try:
            seed = seed_file.read_text().splitlines()[0].strip()
        except (OSError, IndexError) as exc:
            raise CommandError(f"cannot read a seed from {seed_file}") from exc
        suite = services.suite_generate(
            benchmark=benchmark, role=role, private_seed=seed, user=None
        )
        self.stdout.write(
            f"Suite {suite.pk} ({role}, {suite.n_mlps} MLPs) is queued for a scoring host of "
            f"class {benchmark.hardware_class_id}; follow it with --show."
        )

    def _show(self, benchmark: Benchmark) -> None:
        suites = Suite.objects.filter(benchmark=benchmark).order_by("role")
        if not suites:
            self.stdout.write("No suites.")
        for s in suites:
            self.stdout.write(
                f"{s.role}: suite {s.pk}, {s.status}, {s.origin}, {s.progress_done}/"
                f"{s.progress_total} MLPs, {s.width}x{s.depth}, {s.n_samples:,} samples, "
                f"seed sha256 {s.seed_sha256[:16] or '-'}, data sha256 "
                f"{s.dataset_sha256[:16] or '-'}, on {s.generated_on or '-'}, finished "
                f"{s.finished_at.isoformat() if s.finished_at else '-'}"
                + (f"; {s.note}" if s.note else "")
            )
