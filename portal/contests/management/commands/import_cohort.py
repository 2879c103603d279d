"""``manage.py import_cohort``: staff import a benchmark's cohorts.

Two ways in:

- **A prepared cohort** (``--kind``, ``--images``, ``--answers``): the images listed in an
  answers file (``relative_path<TAB>class`` per line) become the ``--kind`` cohort.
- **The ImageNet validation set** (``--imagenet-val``, ``--reference``, ``--seed-file``):
  both cohorts are drawn at once from the validation JPEGs, the official one with the
  private seed and the practice one, independently, with the public practice seed (see
  ``portal.contests.cohorts``). The private seed is read from a file, never from the
  command line (which other users and shell histories can see), and is never printed
  or stored; the output names no member.
"""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any, TypeVar

from django.core.management.base import BaseCommand, CommandError

from portal.contests.cohorts import (
    IMAGENET_VAL_COUNT,
    cohort_import,
    imagenet_import,
    read_answers_file,
)
from portal.contests.models import Benchmark, Cohort

PRACTICE_COUNT = 1000
T = TypeVar("T")
PREPARED_OPTIONS = ("kind", "images", "answers")
IMAGENET_OPTIONS = (
    "reference",
    "seed_file",
    "official_count",
    "practice_count",
    "practice_seed",
    "val_count",
)


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def _given(value: T | None, default: T) -> T:
    return default if value is None else value


def read_seed_file(path: Path) -> str:
    """The private seed: the file's text without surrounding whitespace."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise CommandError(f"cannot read the seed file {path}: {error}") from None


class Command(BaseCommand):
    help = (
        "Import (or replace, while no run has used it) a benchmark's cohorts: one prepared "
        "cohort (--kind, --images, --answers), or both drawn from the ImageNet validation "
        "JPEGs (--imagenet-val, --reference, --seed-file)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--benchmark", required=True, metavar="SLUG")
        prepared = parser.add_argument_group("a prepared cohort")
        prepared.add_argument(
            "--kind",
            choices=[value for value, _label in Cohort.KINDS],
            help=(
                "official, practice, final (a second private cohort for the final rerun), "
                "or canary (images no public set holds, with the reference model's answers, "
                "mixed among verification and final runs)"
            ),
        )
        prepared.add_argument("--images", type=Path, metavar="DIR")
        prepared.add_argument(
            "--answers", type=Path, metavar="FILE", help="relative_path<TAB>class per line"
        )
        imagenet = parser.add_argument_group("both cohorts, from the ImageNet validation set")
        imagenet.add_argument(
            "--imagenet-val",
            type=Path,
            metavar="DIR",
            help="the ILSVRC2012_val_*.JPEG files (directly or in subfolders)",
        )
        imagenet.add_argument(
            "--reference",
            type=Path,
            metavar="FILE",
            help="the reference model's class of every file: '<class>' per line in file-name "
            "order, or '<file name> <class>' per line",
        )
        imagenet.add_argument(
            "--seed-file",
            type=Path,
            metavar="FILE",
            help="a file holding the private seed (at least 32 characters)",
        )
        imagenet.add_argument(
            "--official-count",
            type=int,
            metavar="N",
            help="official members (default: the benchmark's cohort size)",
        )
        imagenet.add_argument(
            "--practice-count",
            type=int,
            metavar="N",
            help=f"practice members (default: {PRACTICE_COUNT})",
        )
        imagenet.add_argument(
            "--practice-seed",
            metavar="TEXT",
            help="the public practice seed (default: '<benchmark>-practice')",
        )
        imagenet.add_argument(
            "--val-count",
            type=int,
            metavar="N",
            help=f"validation images expected in the folder (default: {IMAGENET_VAL_COUNT})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slug: str = options["benchmark"]
        try:
            benchmark = Benchmark.objects.get(slug=slug)
        except Benchmark.DoesNotExist:
            raise CommandError(f"no benchmark {slug!r}") from None
        if options["imagenet_val"] is not None:
            self._import_imagenet(benchmark, options)
        else:
            self._import_prepared(benchmark, options)

    def _import_prepared(self, benchmark: Benchmark, options: dict[str, Any]) -> None:
        stray = [_flag(name) for name in IMAGENET_OPTIONS if options[name] is not None]
        if stray:
            raise CommandError(f"{', '.join(stray)} go with --imagenet-val")
        absent = [_flag(name) for name in PREPARED_OPTIONS if options[name] is None]
        if absent:
            raise CommandError(
                f"{', '.join(absent)} required (or --imagenet-val with --reference and --seed-file)"
            )
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

    def _import_imagenet(self, benchmark: Benchmark, options: dict[str, Any]) -> None:
        stray = [_flag(name) for name in PREPARED_OPTIONS if options[name] is not None]
        if stray:
            raise CommandError(
                f"{', '.join(stray)} cannot go with --imagenet-val, which imports both cohorts"
            )
        absent = [_flag(name) for name in ("reference", "seed_file") if options[name] is None]
        if absent:
            raise CommandError(f"--imagenet-val needs {' and '.join(absent)}")
        reference: Path = options["reference"]
        if not reference.is_file():
            raise CommandError(f"the reference file {reference} does not exist")
        seed_file: Path = options["seed_file"]
        seed = read_seed_file(seed_file)
        official_count = _given(options["official_count"], benchmark.cohort_size)
        practice_count = _given(options["practice_count"], PRACTICE_COUNT)
        practice_seed = _given(options["practice_seed"], f"{benchmark.slug}-practice")
        val_count = _given(options["val_count"], IMAGENET_VAL_COUNT)
        try:
            imported = imagenet_import(
                benchmark=benchmark,
                images_dir=options["imagenet_val"],
                reference_file=reference,
                seed=seed,
                official_count=official_count,
                practice_seed=practice_seed,
                practice_count=practice_count,
                universe=val_count,
            )
        except (OSError, ValueError) as error:
            message = " ".join(str(error).split())
            raise CommandError(message) from error
        if official_count != benchmark.cohort_size:
            self.stderr.write(
                f"Note: the official cohort has {official_count:,} images and the benchmark's "
                f"cohort size is {benchmark.cohort_size:,}: the pass gate keeps its ratio."
            )
        self.stdout.write(
            f"Imported both cohorts of {benchmark.slug} from {val_count:,} validation images:\n"
            f"  official: {official_count:,} images, drawn with the private seed "
            f"(cohort #{imported.official.pk}; staff-only; the seed is not stored: keep "
            f"{seed_file.name} safe)\n"
            f"  practice: {practice_count:,} images, drawn with the public seed "
            f"{practice_seed!r} (cohort #{imported.practice.pk}; its answers are published)\n"
            f"  reference file sha256 {imported.reference_sha256}"
        )
