"""``manage.py estimation_final SLUG``: start a closed metered-estimation phase's final
rerun (each team's nominated entries, or its best, graded on the final suite), or
``--show`` its standings."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from portal.contests.models import Benchmark
from portal.core import errors
from portal.estimation import selectors, services


class Command(BaseCommand):
    help = "Start, or show, a metered-estimation phase's final rerun."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--show", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        benchmark = Benchmark.objects.filter(slug=options["slug"]).first()
        if benchmark is None:
            raise CommandError(f"no benchmark {options['slug']!r}")
        if not options["show"]:
            try:
                finals = services.final_start(benchmark=benchmark, user=None)
            except errors.PodiumError as exc:
                raise CommandError(exc.detail) from exc
            self.stdout.write(f"Queued {len(finals)} entries for the final rerun.")
        for row in selectors.final_standings(benchmark):
            who = row.team or row.entrant
            score = "-" if row.score is None else f"{row.score:.6g}"
            self.stdout.write(
                f"{row.rank or '-'}\t{who}\tentry {row.entry_id}\t{row.status}\t{score}"
            )
