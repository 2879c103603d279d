"""``manage.py set_reference_energy SLUG RUN_ID``: the low_energy anomaly's yardstick.

Copies the GPU energy per image of a passing run of the benchmark's reference kit (on
its GPU class) into the benchmark's ``reference_energy_per_image_j``, audited with no
actor (an operator on the machine) as a change of the benchmark's rules. Staff may also
type the figure into the benchmark's admin page.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from portal.contests.models import Benchmark
from portal.core.errors import PodiumError
from portal.submissions.anomalies import benchmark_reference_energy_set


class Command(BaseCommand):
    help = "Set a benchmark's reference GPU energy per image from a run of its reference kit."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("slug", metavar="SLUG", help="The benchmark's slug.")
        parser.add_argument(
            "run_id", metavar="RUN_ID", type=int, help="A passing run of its reference kit."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        benchmark = Benchmark.objects.filter(slug=options["slug"]).first()
        if benchmark is None:
            raise CommandError(f"No benchmark {options['slug']!r}.")
        try:
            figure = benchmark_reference_energy_set(
                benchmark=benchmark, run_id=options["run_id"], actor=None
            )
        except PodiumError as exc:
            raise CommandError(exc.detail) from None
        floor = benchmark.energy_floor_pct
        self.stdout.write(
            f"{benchmark.slug}: reference GPU energy {figure:.6g} J per image (run "
            f"{options['run_id']}); "
            + (
                f"passing official runs under {floor}% of it are flagged."
                if floor
                else "the floor is 0: nothing is flagged."
            )
        )
