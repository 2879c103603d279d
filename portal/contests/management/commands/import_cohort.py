"""``manage.py import_cohort``: staff import a benchmark's official or practice cohort."""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from portal.contests.cohorts import cohort_import, read_answers_file
from portal.contests.models import Benchmark, Cohort


class Command(BaseCommand):
    help = (
        "Import (or replace, while no run has used it) a benchmark's cohort: the images "
        "listed in an answers file ('relative_path<TAB>class' per line) are copied, hashed "
        "and given their fixed scoring order."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--benchmark", required=True, metavar="SLUG")
        parser.add_argument("--kind", required=True, choices=[Cohort.OFFICIAL, Cohort.PRACTICE])
        parser.add_argument("--images", required=True, type=Path, metavar="DIR")
        parser.add_argument("--answers", required=True, type=Path, metavar="FILE")

    def handle(self, *args: Any, **options: Any) -> None:
        slug: str = options["benchmark"]
        try:
            benchmark = Benchmark.objects.get(slug=slug)
        except Benchmark.DoesNotExist:
            raise CommandError(f"no benchmark {slug!r}") from None
        try:
            answers = read_answers_file(options["answers"])
            cohort = cohort_import(
                benchmark=benchmark,
                kind=options["kind"],
                images_dir=options["images"],
                answers=answers,
            )
        except (OSError, ValueError) as error:
            raise CommandError(str(error)) from error
        self.stdout.write(
            f"Imported the {cohort.kind} cohort of {benchmark.slug}: "
            f"{len(answers)} images (cohort #{cohort.pk})."
        )
