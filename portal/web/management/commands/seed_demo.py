"""``manage.py seed_demo``: the demo benchmark with generated cohorts, and the flagship.

Idempotent, and fast when there is nothing to do (``make run`` calls it every time):

- ``demo`` is created, or updated to the settings below; its window is moved to "open
  from a minute ago for 30 days" only when it is not open now. Each cohort (official,
  practice, and a canary pool of as many images as a verification carries) is
  generated (fixed seeds) and imported only when it is missing or has another size;
  an existing cohort that a run has used is never replaced (a warning says so).
- ``demo-campaign`` is the same game scored in rounds (a campaign benchmark with its own
  generated cohorts: an official pool of ``--campaign-count`` images, 20,000 by default,
  and a copy of the demo's practice cohort; rounds of :data:`CAMPAIGN_ROUND_SIZE` images
  in :data:`CAMPAIGN_SLICES` slices). An existing campaign is brought to these sizes
  (rounds already created keep theirs). Its baseline image is pinned by ``manage.py
  campaign_baseline demo-campaign``, which builds the starter kit (Docker), so ``make
  run`` calls it after this command.
- ``demo-whest`` is a small metered-estimation phase (seed contest WhestBench's rules on
  narrow, shallow MLPs and a small budget): its phase and public suites are generated
  from a fixed, public demo seed by this machine's scoring worker in seconds, once (a
  suite that exists, or is being generated, is left alone).
- ``eva02-imagenet1k-v3`` is created with the rules' defaults when missing and
  otherwise left alone (staff edit it in the admin, and import its real cohort with
  ``import_cohort``).
"""

from __future__ import annotations

import datetime as dt
import math
import tempfile
from argparse import ArgumentParser
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings as django_settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from portal.campaigns.creation import campaign_create
from portal.campaigns.models import Campaign, Round
from portal.contests import democohort, rules
from portal.contests.cohorts import cohort_import
from portal.contests.hardware import hardware_class_row
from portal.contests.models import Benchmark, Cohort
from portal.core import storage
from portal.estimation.models import PhaseRules, Suite
from portal.estimation.services import suite_generate
from portal.submissions.models import Run

DEMO_SLUG = "demo"
DEMO_OFFICIAL_SEED = 20260810
DEMO_PRACTICE_SEED = 20260811
# The demo's canaries (mixed among a verification's and a final run's images): as many as
# a verification of the official cohort carries (rules.canary_count), generated apart.
DEMO_CANARY_SEED = 20260812
DEMO_PASS_RATIO = 0.99
DEMO_DESCRIPTION = """\
A practice ground for the whole path: environment, build, timed run, verdict.

Every image is 64x64 pixels and spells its class (0-999) as three gray bands, one per
decimal digit, with gray level 16 + 24 x digit. The example starter kit reads them back
in a few lines; a run passes at 99% agreement. Uploads are attempt-limited exactly as in
a real benchmark, so this is also the place to learn the rules before they count.
"""

CAMPAIGN_SLUG = "demo-campaign"
# The demo campaign's size, chosen so that a slice times the images more than the image's
# start (bench/round.py measures the void rate; its defaults are these; on a quiet 2-CPU
# VM about half the rounds still void for drift, docs/rules.md). A slice's trusted
# time is the image's start (interpreter and imports, about 0.13 s in the sandbox, and
# the part that varies most from one container to the next) plus its images (about
# 0.15 ms of CPU each for the starter kit). At 5 images a slice the start was nearly all
# of it, and its variation put the baseline over the seeds' reproducibility (0.335) and
# drift (5%) ceilings in most rounds; at 5,000 the images are most of a slice. The
# ceilings themselves stay the seeds' (Campaign's defaults).
CAMPAIGN_POOL_SIZE = 20_000  # the campaign's official cohort: every round draws from it
CAMPAIGN_ROUND_SIZE = 20_000  # requests per round: the whole pool, in each round's order
CAMPAIGN_SLICES = 4
CAMPAIGN_DESCRIPTION = f"""\
The demo's images, scored in rounds instead of a leaderboard.

Each built submission waits in a queue; a round starts when 5 are queued or the oldest
has waited 6 hours. A round runs the starter kit (the baseline), the current leader and
up to 5 challengers on the same {CAMPAIGN_ROUND_SIZE:,} images, in {CAMPAIGN_SLICES} slices \
of {CAMPAIGN_ROUND_SIZE // CAMPAIGN_SLICES:,}
images each timed by itself, and scores each by its median speedup over the baseline.
Pass 99% agreement and beat the leader by 1% to take the crown.
"""
# A campaign's sizes that seed_demo keeps at the values above.
CAMPAIGN_SIZES = {"round_size": CAMPAIGN_ROUND_SIZE, "slice_count": CAMPAIGN_SLICES}

FLAGSHIP_SLUG = "eva02-imagenet1k-v3"
SEOUL = ZoneInfo("Asia/Seoul")
FLAGSHIP_OPENS_AT = dt.datetime(2026, 8, 10, 0, 0, tzinfo=SEOUL)
FLAGSHIP_CLOSES_AT = dt.datetime(2026, 8, 31, 18, 0, tzinfo=SEOUL)
FLAGSHIP_DESCRIPTION = """\
Classify 10,000 ImageNet-1k validation images, top-1, as fast as you can.

Passing: at least 9,900 of your 10,000 predictions must equal the reference (99%).
Passing runs are ranked by one measured wall-clock time, fastest first; an exact tie goes
to the earlier upload. The leaderboard shows your best passing run and keeps it when a
later run is slower or fails.

The clock starts just before your /submission/run starts and stops when it and every
process it started have exited: process start, model loading, JPEG reading and
decoding, preprocessing, inference and writing the output all count. Queueing, staging
the images and our own checks do not.

Your code runs as: /submission/run MANIFEST IMAGE_ROOT OUTPUT (also in CONTEST_MANIFEST,
CONTEST_IMAGE_ROOT and CONTEST_OUTPUT). The manifest has one line per image, a request id,
a tab and the image's path; write one little-endian int32 class (0-999) per line, in
manifest order. File names and ids change on every run. The run has no network, a
read-only root filesystem, a non-root user, capped memory and processes, and a writable
/tmp; it must finish within 16 minutes.

Environments (your Dockerfile) are free to build and rebuild; keep at most 2, each image
at most 16 GiB, and build each within 30 minutes. Every FROM must name an allowed
registry. Bake model weights and compiled artifacts into your images: at run time
anything compiled or downloaded is on the clock, or impossible.

Official uploads are accepted from 10 August 2026 00:00 to 31 August 2026 18:00 Korea
time. You have 2 official attempts per day (days run midnight to midnight Korea time,
15:00 to 15:00 UTC). An attempt is charged when your upload is accepted; your own build
failure, crash, timeout, invalid output or low agreement still counts. It is refunded
only when the platform fails or cancels the run. Your build.sh runs inside the attempt.

Practice: a public 1,000-image cohort with published answers, and 10 practice runs a day
through the same build and timed path; practice never touches the leaderboard.

You see your run's status, time, agreement (matches / total), digests and log tails;
never the reference answers or which images mismatched. Staff review the apparent
winners before results are final.
"""


ESTIMATION_SLUG = "demo-whest"
# Public on purpose: the demo's suites are for learning the path, not for a prize.
ESTIMATION_DEMO_SEED = "podium-demo-whest-2026"
ESTIMATION_RULES = {
    "width": 32,
    "depth": 4,
    "flop_budget": 2_000_000,
    "residual_rule": PhaseRules.CAPPED,
    "residual_cap_ms": 400,
    "wall_cap_s": 30,
    "public_mlps": 10,
    "withheld_mlps": 10,
    "final_mlps": 20,
    "local_mlps": 10,
    "reference_samples": 20_000,
}
ESTIMATION_DESCRIPTION = """\
Metered estimation in miniature: predict each neuron's expected post-ReLU activation of
small random ReLU MLPs (32 wide, 4 deep) from their weights, within 2,000,000 FLOPs per
MLP metered by flopscope. Package whestbench's MeanPropagationEstimator with `whest
package` and upload the tarball to see it ranked.
"""


class Command(BaseCommand):
    help = "Create (or refresh) the demo benchmark with generated cohorts, and the flagship."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--official-count", type=int, default=1000, metavar="N")
        parser.add_argument("--practice-count", type=int, default=100, metavar="N")
        parser.add_argument(
            "--campaign-count",
            type=int,
            default=CAMPAIGN_POOL_SIZE,
            metavar="N",
            help=f"the demo campaign's official pool (default {CAMPAIGN_POOL_SIZE:,})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        official_count: int = options["official_count"]
        practice_count: int = options["practice_count"]
        campaign_count: int = options["campaign_count"]
        if min(official_count, practice_count, campaign_count) < 1:
            raise CommandError("cohort counts must be at least 1")

        demo = self._seed_demo_benchmark(official_count)
        try:
            self._seed_demo_cohort(demo, Cohort.OFFICIAL, official_count, DEMO_OFFICIAL_SEED)
            self._seed_demo_cohort(demo, Cohort.PRACTICE, practice_count, DEMO_PRACTICE_SEED)
            canaries = rules.canaries_wanted(official_count)
            self._seed_demo_cohort(demo, Cohort.CANARY, canaries, DEMO_CANARY_SEED)
        except ValueError as error:
            raise CommandError(str(error)) from error
        self._seed_demo_campaign(demo, campaign_count, practice_count)
        self._seed_demo_estimation()
        self._seed_flagship()

    def _seed_demo_benchmark(self, official_count: int) -> Benchmark:
        now = timezone.now()
        settings = {
            "title": "Demo: read the digits",
            "description": DEMO_DESCRIPTION,
            # The pass gate scales with the cohort (1,000 images: 990), so small
            # test cohorts keep the same 99% rule.
            "cohort_size": official_count,
            "pass_min_matches": math.ceil(official_count * DEMO_PASS_RATIO),
            "allowed_registries": "localhost/podium/\n",
            # Scored by this machine's own scoring worker (`make run`).
            "hardware_class": hardware_class_row(django_settings.PODIUM_HARDWARE_CLASS),
        }
        demo = Benchmark.objects.filter(slug=DEMO_SLUG).first()
        if demo is None:
            demo = Benchmark.objects.create(
                slug=DEMO_SLUG,
                opens_at=now - dt.timedelta(minutes=1),
                closes_at=now + dt.timedelta(days=30),
                **settings,
            )
            self.stdout.write(f"Created benchmark {DEMO_SLUG}.")
            return demo
        changed = [name for name, value in settings.items() if getattr(demo, name) != value]
        for name in changed:
            setattr(demo, name, settings[name])
        if demo.status_at(now) != "open":
            demo.opens_at = now - dt.timedelta(minutes=1)
            demo.closes_at = now + dt.timedelta(days=30)
            changed += ["opens_at", "closes_at"]
        if changed:
            demo.save(update_fields=changed)
            self.stdout.write(f"Updated benchmark {DEMO_SLUG}: {', '.join(changed)}.")
        return demo

    def _seed_demo_cohort(self, demo: Benchmark, kind: str, count: int, seed: int) -> None:
        existing = Cohort.objects.filter(benchmark=demo, kind=kind).first()
        if (
            existing is not None
            and existing.items.count() == count
            and storage.cohort_dir(existing.pk).is_dir()
        ):
            self.stdout.write(f"The {demo.slug} {kind} cohort of {count} images is in place.")
            return
        if existing is not None and (
            Run.objects.filter(cohort=existing).exists()
            or Round.objects.filter(cohort=existing).exists()
        ):
            self.stderr.write(
                f"The {demo.slug} {kind} cohort has been used by a run or a round; it stays "
                f"as it is ({existing.items.count()} images, not {count})."
            )
            return
        with tempfile.TemporaryDirectory(prefix="podium-demo-") as folder:
            images_dir = Path(folder)
            answers = democohort.generate(images_dir, count, seed)
            cohort_import(benchmark=demo, kind=kind, images_dir=images_dir, answers=answers)
        self.stdout.write(f"Imported the {demo.slug} {kind} cohort: {count} generated images.")

    def _seed_demo_campaign(
        self, demo: Benchmark, campaign_count: int, practice_count: int
    ) -> None:
        """The campaign benchmark (the demo's rules and window, its own official pool of
        ``campaign_count`` images, the demo's practice cohort) and its campaign, at the
        sizes of :data:`CAMPAIGN_SIZES`."""
        settings = {
            "kind": Benchmark.CAMPAIGN,
            "title": "Demo campaign: read the digits, in rounds",
            "description": CAMPAIGN_DESCRIPTION,
            "opens_at": demo.opens_at,
            "closes_at": demo.closes_at,
            "cohort_size": campaign_count,
            "pass_min_matches": math.ceil(campaign_count * DEMO_PASS_RATIO),
            **{name: getattr(demo, name) for name in ("allowed_registries", "hardware_class")},
        }
        benchmark, created = Benchmark.objects.get_or_create(slug=CAMPAIGN_SLUG, defaults=settings)
        changed = [name for name, value in settings.items() if getattr(benchmark, name) != value]
        if changed and not created:
            for name in changed:
                setattr(benchmark, name, settings[name])
            benchmark.save(update_fields=changed)
        try:
            self._seed_demo_cohort(benchmark, Cohort.OFFICIAL, campaign_count, DEMO_OFFICIAL_SEED)
            self._seed_demo_cohort(benchmark, Cohort.PRACTICE, practice_count, DEMO_PRACTICE_SEED)
        except ValueError as error:
            raise CommandError(str(error)) from error
        campaign = Campaign.objects.filter(benchmark=benchmark).first()
        if campaign is None:
            campaign_create(benchmark=benchmark, **CAMPAIGN_SIZES)
            self.stdout.write(
                f"Created campaign {CAMPAIGN_SLUG} (pin its baseline: manage.py "
                f"campaign_baseline {CAMPAIGN_SLUG})."
            )
            return
        # Each round keeps the request set and slices it was created with; a new size
        # applies from the next round on.
        resized = [
            name for name, value in CAMPAIGN_SIZES.items() if getattr(campaign, name) != value
        ]
        if resized:
            for name in resized:
                setattr(campaign, name, CAMPAIGN_SIZES[name])
            campaign.save(update_fields=resized)
            self.stdout.write(f"Updated campaign {CAMPAIGN_SLUG}: {', '.join(resized)}.")

    def _seed_demo_estimation(self) -> None:
        now = timezone.now()
        benchmark = Benchmark.objects.filter(slug=ESTIMATION_SLUG).first()
        if benchmark is None:
            benchmark = Benchmark.objects.create(
                slug=ESTIMATION_SLUG,
                kind=Benchmark.ESTIMATION,
                title="Demo: estimate the mean activations",
                description=ESTIMATION_DESCRIPTION,
                opens_at=now - dt.timedelta(minutes=1),
                closes_at=now + dt.timedelta(days=30),
                attempts_per_day=10,
                attempt_timezone="UTC",
                hardware_class=hardware_class_row(django_settings.PODIUM_HARDWARE_CLASS),
            )
            self.stdout.write(f"Created benchmark {ESTIMATION_SLUG}.")
        elif benchmark.status_at(now) != "open":
            benchmark.opens_at = now - dt.timedelta(minutes=1)
            benchmark.closes_at = now + dt.timedelta(days=30)
            benchmark.save(update_fields=["opens_at", "closes_at"])
        PhaseRules.objects.update_or_create(benchmark=benchmark, defaults=ESTIMATION_RULES)
        for role in (Suite.PHASE, Suite.PUBLIC):
            suite = Suite.objects.filter(benchmark=benchmark, role=role).first()
            if suite is not None and suite.status != Suite.FAILED:
                continue
            suite_generate(
                benchmark=benchmark, role=role, private_seed=ESTIMATION_DEMO_SEED, user=None
            )
            self.stdout.write(
                f"Asked the scoring worker to generate {ESTIMATION_SLUG}'s {role} suite."
            )

    def _seed_flagship(self) -> None:
        _, created = Benchmark.objects.get_or_create(
            slug=FLAGSHIP_SLUG,
            defaults={
                "title": "EVA-02 ImageNet-1k inference",
                "description": FLAGSHIP_DESCRIPTION,
                "opens_at": FLAGSHIP_OPENS_AT,
                "closes_at": FLAGSHIP_CLOSES_AT,
                "hardware_class": hardware_class_row(Benchmark.DEFAULT_HARDWARE_CLASS),
            },
        )
        if created:
            self.stdout.write(
                f"Created benchmark {FLAGSHIP_SLUG} (no cohort yet: staff import it with "
                "manage.py import_cohort)."
            )
        else:
            self.stdout.write(f"Benchmark {FLAGSHIP_SLUG} exists; left as it is.")
