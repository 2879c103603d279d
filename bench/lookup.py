"""Benchmark: lookup tables against verification with canaries, through the real engine.

A verification run re-encodes the cohort imperceptibly, so a table keyed on what a
picture shows (here an 8 x 8 thumbnail of the 1/8-scale decode, matched to its nearest
neighbour) still finds every cohort image; what it cannot find are the canaries, images
of the benchmark's canary pool mixed among them (``rules.canary_count``: half the rows).
On a copy of the demo (``--images`` generated images, the starter kit's set-up of
``bench/score_overhead.py``, the measuring loop of ``bench/verification.py``) with a
canary pool of as many images as a verification carries, this scores, one entrant each:

- ``--tries`` entries of "table": every image answered by its nearest thumbnail in a
  table of the official cohort (learned elsewhere), no model at all;
- ``--tries`` entries of "table+5ms": the same table for the images it knows (nearest
  thumbnail within ``NEAR`` levels an pixel), and for any other 5 ms of busy CPU then
  the starter kit's own model: a model of 5 ms an image that skips the images it knows;
- ``--honest`` starter-kit entries.

Each is scored as the scoring worker scores it (gates, staging, container, verdict),
then verified until it leaves ``verifying`` (each verification on a freshly prepared
set). Printed: how many of each were rejected and whether any ranked, each lookup's own
count of table hits (official run first), and the host time of an honest entry's first
verification call over its official call's (the median). Timing figures on a machine
shared with other work are noisy.

    .venv/bin/python bench/lookup.py [--tries 5] [--honest 5] [--images 100]
        [--cpu-busy-max 2.5] [--no-freezer]

Exit status: 0 when every lookup entry was rejected and no honest one was, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any
from unittest import mock

import score_overhead as kit
import verification as measuring

# The demo's canary pool seed (seed_demo's DEMO_CANARY_SEED): images apart from the cohort.
CANARY_SEED = 20260812
# The largest mean difference (gray levels a pixel) between two thumbnails of one image:
# a re-encode at 45 dB PSNR moves a demo image's thumbnail by 0.4 at most; another demo
# image, even of the same class, lies more than 1.1 away.
NEAR = 0.75
MODES = ("table", "table+5ms")

# The lookups' entrypoint: the starter kit's ABI and model, with each image answered by
# its nearest thumbnail in the table ("table"), or only when that is NEAR enough and
# otherwise by 5 ms of busy CPU and the kit's model ("table+5ms"). It says on stderr how
# many images its table answered.
THUMBNAIL_RUN = b"""#!/usr/bin/env python3
import json, os, sys, time
HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, HERE)
import numpy as np
from PIL import Image
import predict
with open(os.path.join(HERE, "table.json")) as f:
    TABLE = json.load(f)
KEYS = np.array(TABLE["keys"], dtype=np.float32)
CLASSES = TABLE["classes"]
MODE, NEAR = TABLE["mode"], TABLE["near"]
HITS = [0, 0]
honest = predict.classify
def thumbnail(path):
    with Image.open(path) as image:
        image.draft("L", (max(1, image.size[0] // 8), max(1, image.size[1] // 8)))
        small = image.convert("L").resize((8, 8))
    return np.asarray(small, dtype=np.float32).ravel()
def classify(path):
    distances = np.abs(KEYS - thumbnail(path)).mean(axis=1)
    best = int(distances.argmin())
    HITS[1] += 1
    if distances[best] <= NEAR:
        HITS[0] += 1
        return CLASSES[best]
    if MODE == "table":
        return CLASSES[best]
    end = time.perf_counter() + 0.005
    while time.perf_counter() < end:
        pass
    return honest(path)
predict.classify = classify
predict.POOL_THRESHOLD = 10 ** 9  # one process, so that the count is whole
status = predict.main(sys.argv[1:])
print(f"lookup: {HITS[0]} of {HITS[1]} from the table", file=sys.stderr)
sys.exit(status)
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=5, help="entries of each lookup (5)")
    parser.add_argument("--honest", type=int, default=5, help="starter-kit entries (5)")
    parser.add_argument("--images", type=int, default=100, help="cohort size (default 100)")
    parser.add_argument("--seed", type=int, default=20260810, help="demo cohort seed")
    parser.add_argument(
        "--cpu-busy-max",
        type=float,
        default=None,
        help="the cpu_idle gate's limit of busy CPUs (on a machine shared with other work,"
        " which the gate would rightly wait for)",
    )
    parser.add_argument(
        "--no-freezer",
        action="store_true",
        help="pause no other container while a score runs (an engine shared with other"
        " work, whose containers are not this portal's to pause)",
    )
    return parser.parse_args()


def thumbnail_key(path: Path) -> list[float]:
    """An image's 8 x 8 thumbnail of its 1/8-scale decode, as the entry computes it."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as image:
        image.draft("L", (max(1, image.size[0] // 8), max(1, image.size[1] // 8)))
        small = image.convert("L").resize((8, 8))
    return [float(value) for value in np.asarray(small, dtype=np.float32).ravel()]


def thumbnail_image(sub_image: str, tag_root: str, made: list[str], mode: str) -> str:
    """The starter kit's submission image with a thumbnail table of every official image
    (learned elsewhere: the official cohort is drawn from a public set)."""
    from portal.contests.models import CohortItem
    from portal.core import storage

    items = list(CohortItem.objects.filter(cohort__kind="official").order_by("position"))
    table = {
        "mode": mode,
        "near": NEAR,
        "keys": [
            thumbnail_key(storage.cohort_dir(item.cohort_id) / item.canonical_name)
            for item in items
        ],
        "classes": [item.reference_class for item in items],
    }
    tag = f"{tag_root}-{mode.replace('+', '-')}:1"
    made.append(tag)
    measuring._image_with(
        sub_image,
        tag,
        {
            "submission/run": (THUMBNAIL_RUN, 0o755),
            "submission/table.json": (json.dumps(table).encode(), 0o644),
        },
    )
    return tag


def import_canaries(images: int, work: Path) -> int:
    """The benchmark's canary pool: as many generated demo images as a verification of a
    cohort of ``images`` carries (as ``seed_demo`` makes the demo's). How many."""
    from portal.contests import cohorts, democohort, rules
    from portal.contests.models import Benchmark, Cohort

    count = rules.canaries_wanted(images)
    source = work / "canaries"
    members = democohort.generate(source, count, CANARY_SEED)
    cohorts.cohort_import(
        benchmark=Benchmark.objects.get(slug="bench-overhead"),
        kind=Cohort.CANARY,
        images_dir=source,
        answers=members,
    )
    shutil.rmtree(source)
    return count


def ranked(submission_ids: list[int]) -> int:
    from portal.contests.models import LeaderboardEntry

    return LeaderboardEntry.objects.filter(submission_id__in=submission_ids).count()


def summary(name: str, rows: list[dict[str, Any]], ids: list[int]) -> tuple[int, int]:
    """Print one kind of entry's outcome; ``(rejected, ranked)``."""
    rejected = [row for row in rows if row["status"] != "passed"]
    on_board = ranked(ids)
    print(f"\n{name}: {len(rejected)} of {len(rows)} rejected, {on_board} ranked")
    for row in rows:
        hits = " / ".join(hit for hit in row["hits"] if hit)
        walls = ", ".join(f"{wall / 1e3:.3f}" for wall in row["verify_wall_ms"])
        print(
            f"  {row['entrant']}: official {row['official_wall_ms'] / 1e3:.3f} s, verification"
            f" {walls} s, {row['status']}"
            + (f"; table hits, official first: {hits}" if hits else "")
            + (f"\n    {row['note']}" if row["status"] != "passed" else "")
        )
    return len(rejected), on_board


def main() -> int:
    args = parse_args()
    repo = Path(__file__).resolve().parents[1]
    command = (
        f"cd {shlex.quote(str(repo))} && .venv/bin/python bench/lookup.py --tries {args.tries}"
        f" --honest {args.honest} --images {args.images}"
        + (f" --cpu-busy-max {args.cpu_busy_max:g}" if args.cpu_busy_max is not None else "")
        + (" --no-freezer" if args.no_freezer else "")
    )
    print(f"reproduce: {command}\n")
    work = Path(tempfile.mkdtemp(prefix="podium-bench-lookup-"))
    work.chmod(0o755)
    made: list[str] = []
    try:
        kit.setup_django(work / "data")
        logging.getLogger().setLevel(logging.WARNING)
        from django.conf import settings
        from django.contrib.auth import get_user_model

        from portal.contests.models import Benchmark
        from portal.core.celery import app
        from portal.submissions.models import Submission

        if args.cpu_busy_max is not None:
            settings.PODIUM_GATE_CPU_BUSY_MAX = args.cpu_busy_max
            print(f"cpu_idle gate limit: {args.cpu_busy_max:g} busy CPUs")
        subprocess.run(["make", "-s", "scoring/supervisor/supervise"], cwd=repo, check=True)
        tag_root = f"podium-bench/lookup-{uuid.uuid4().hex[:8]}"
        env_image, sub_image = kit.build_images(settings.PODIUM_STARTER_BASE_IMAGE, tag_root, made)
        honest = kit.make_rows(args.images, sub_image, env_image, args.honest)
        everyone = args.honest + len(MODES) * args.tries
        Benchmark.objects.update(verify_top=everyone + 5)  # every best is verified
        for number, submission_id in enumerate(honest, start=1):
            entrant = get_user_model().objects.create(username=f"honest-{number}")
            Submission.objects.filter(pk=submission_id).update(entrant=entrant)
        kit.import_cohort(args.images, args.seed, work)
        canaries = import_canaries(args.images, work)
        print(f"canary pool: {canaries} images; each verification carries {canaries}")
        cheats: dict[str, list[int]] = {}
        for mode in MODES:
            tag = thumbnail_image(sub_image, tag_root, made, mode)
            cheats[mode] = []
            for number in range(1, args.tries + 1):
                entry = Submission.objects.get(pk=honest[0])
                entry.pk = None
                entry.entrant = get_user_model().objects.create(username=f"{mode}-{number}")
                entry.image_tag = tag
                entry.save()
                cheats[mode].append(int(entry.pk))
        # Nothing may reach a broker from here: each verification is run by hand.
        from scoring.host.freezer import BuildFreezer

        frozen = contextlib.ExitStack()
        if args.no_freezer:
            frozen.enter_context(mock.patch.object(BuildFreezer, "start"))
            frozen.enter_context(mock.patch.object(BuildFreezer, "stop", return_value=0))
        with frozen, mock.patch.object(app, "send_task"):
            # The lookups first: the honest entries' timing is what noise can spoil.
            cheat_rows = {mode: measuring.measure(ids) for mode, ids in cheats.items()}
            honest_rows = measuring.measure(honest)
        good = True
        for mode in MODES:
            rejected, on_board = summary(mode, cheat_rows[mode], cheats[mode])
            good &= rejected == args.tries and on_board == 0
        rejected, on_board = summary("honest starter kit", honest_rows, honest)
        good &= rejected == 0 and on_board == args.honest
        ratios = [row["verify_ms"][0] / row["official_ms"] for row in honest_rows]
        print(
            f"\nhost time of an honest entry's first verification call / its official call: "
            f"median {statistics.median(ratios):.2f} ({min(ratios):.2f} to {max(ratios):.2f},"
            f" {len(ratios)} pairs; a shared machine: noisy)"
        )
        print(f"\n{command}")
        return 0 if good else 1
    finally:
        if made:
            from scoring import engine

            for tag in reversed(made):
                engine.remove_image(tag)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
