"""``manage.py purge_artifacts``: staff remove a closed benchmark's bulky artifacts once its
retention period is over (see ``scoring.upkeep.retention`` for what goes and what stays)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from portal.contests.models import Benchmark
from scoring.upkeep.retention import PurgeNotAllowed, PurgeSummary, artifacts_purge


class Command(BaseCommand):
    help = (
        "Delete a benchmark's source archives, Dockerfile and context uploads, build and "
        "run logs, run folders and Docker images, once closes_at + retention_days has "
        "passed. Results, digests, review records, cohorts and the audit trail are kept."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--benchmark", required=True, metavar="SLUG")
        parser.add_argument(
            "--dry-run", action="store_true", help="List what would be deleted; delete nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slug: str = options["benchmark"]
        try:
            benchmark = Benchmark.objects.get(slug=slug)
        except Benchmark.DoesNotExist:
            raise CommandError(f"no benchmark {slug!r}") from None
        try:
            summary = artifacts_purge(
                benchmark=benchmark, now=timezone.now(), dry_run=options["dry_run"]
            )
        except PurgeNotAllowed as refusal:
            raise CommandError(str(refusal)) from None
        self._report(summary)

    def _report(self, summary: PurgeSummary) -> None:
        if summary.dry_run:
            for folder in summary.folders:
                self.stdout.write(f"would delete {folder}/")
            for image in summary.images_removed:
                self.stdout.write(f"would remove image {image}")
        for entry in summary.skipped:
            self.stderr.write(f"skipped, still in progress: {entry}")
        for entry in summary.folders_left + summary.images_left:
            self.stderr.write(f"left in place: {entry}")
        amount = (
            f"{summary.files_removed:,} files ({summary.bytes_removed:,} bytes) in "
            f"{len(summary.folders):,} folders and {len(summary.images_removed):,} images"
        )
        if summary.dry_run:
            self.stdout.write(f"Dry run for {summary.benchmark}: would delete {amount}.")
        elif summary.removed_anything:
            self.stdout.write(f"Purged {summary.benchmark}: deleted {amount}.")
        else:
            self.stdout.write(f"Nothing left to purge for {summary.benchmark}.")
        if summary.folders_left or summary.images_left or summary.skipped:
            self.stderr.write("Run the command again to retry what was left in place.")
