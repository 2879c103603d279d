"""``manage.py reference_spread SLUG [--image TAG] [--runs N]``: measure the benchmark's
reference kit on this scoring host now (``scoring.run.reference``), holding the machine as a
score does, and record it: its spread is from then on the verification tolerance of the
benchmark's class at its official cohort's size.

``--image`` names the kit (the benchmark's starter kit image, built as any entry's or as
a campaign's baseline is) the first time; afterwards the hosts of the class measure it
again by themselves when due, with the image named last, and a campaign's pinned
baseline is its kit by default. Exit status 1 when the machine was not ready or the kit
could not be measured (the row says why).
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from portal.contests.models import Benchmark
from portal.contests.selectors import official_cohort_size
from scoring.host import machine
from scoring.run import reference


class Command(BaseCommand):
    help = "Measure a benchmark's reference kit on this scoring host (its verification tolerance)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("slug", metavar="SLUG", help="The benchmark's slug.")
        parser.add_argument("--image", default="", help="The kit's image (default: as before).")
        parser.add_argument(
            "--runs",
            type=int,
            default=None,
            help="Counted runs (default PODIUM_REFERENCE_RUNS), after one warm-up run.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        benchmark = Benchmark.objects.filter(slug=options["slug"]).first()
        if benchmark is None:
            raise CommandError(f"No benchmark {options['slug']!r}.")
        size = official_cohort_size(benchmark)
        image = options["image"] or reference.kit_image(benchmark, size)
        if not image:
            raise CommandError(
                f"No reference kit is known for {benchmark.slug}: name its image with --image."
            )
        runs = options["runs"] or int(settings.PODIUM_REFERENCE_RUNS)
        self.stdout.write(f"Measuring {image} on {benchmark.slug}: 1 warm-up and {runs} runs...")
        try:
            with machine.hold(reschedule=lambda _reason: None) as session:
                row = reference.measure(session, benchmark, image, runs)
        except machine.MachineWaiting as waiting:
            raise CommandError(f"The scoring machine is not ready: {waiting}") from None
        if not row.ok:
            raise CommandError(row.reason)
        self.stdout.write(
            f"{row.hardware_class}, {row.cohort_size} images: spread {row.spread_pct:g}% over "
            f"{len(row.wall_ns)} runs (median {(row.median_ns or 0) / 1e6:.1f} ms)."
        )
