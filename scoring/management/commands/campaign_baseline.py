"""``manage.py campaign_baseline SLUG``: build the starter kit once and pin it as the
campaign's baseline image (no round runs without one).

The kit goes the ordinary way, owned by the system account ``podium-baseline``: its
Dockerfile becomes an environment, its files a *practice* submission of the campaign's
benchmark, both built here, in this process (so it needs the Docker Engine and the build
network, as any build). The built submission image is the baseline: tag, image ID and,
with a registry, the pushed reference. Being practice, the submission then also takes a
timed run on the practice cohort: a check that the baseline passes.

Idempotent: a pinned campaign is left alone; a kit submission that was built meanwhile
(say by the build worker, after this command found the build network missing) is
pinned without building again. ``--image-tag/--image-digest`` pin an image built
elsewhere instead. Audited (``campaign.baseline``).
"""

from __future__ import annotations

import io
import tarfile
import tempfile
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from portal.campaigns import creation, selectors
from portal.campaigns.models import Campaign
from portal.core.errors import PodiumError
from portal.environments.models import Environment
from portal.environments.services import environment_create
from portal.submissions.intake import submission_accept
from portal.submissions.models import Submission
from scoring.build import builds

BASELINE_USER = "podium-baseline"
STARTER_KIT = Path(settings.BASE_DIR) / "examples" / "starter-kit"


def kit_archive(kit: Path, dest: Path) -> Path:
    """The kit's top-level files as a .tar.gz (as an entrant would upload them)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(kit.iterdir()):
            if path.is_file():
                tar.add(path, arcname=path.name)
    dest.write_bytes(buffer.getvalue())
    return dest


class Command(BaseCommand):
    help = "Build the starter kit once and pin it as a campaign's baseline image."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("slug", metavar="SLUG", help="The campaign's (benchmark's) slug.")
        parser.add_argument("--kit", type=Path, default=STARTER_KIT, help="The kit's folder.")
        parser.add_argument("--image-tag", default="", help="Pin this image instead of building.")
        parser.add_argument("--image-digest", default="", help="Its image ID (sha256:...).")
        parser.add_argument("--image-ref", default="", help="Its registry reference, if any.")

    def handle(self, *args: Any, **options: Any) -> None:
        campaign = selectors.campaign_by_slug(options["slug"])
        if campaign is None:
            raise CommandError(f"No campaign {options['slug']!r}.")
        if campaign.has_baseline:
            self.stdout.write(f"{campaign.slug}: baseline {campaign.baseline_image_digest}.")
            return
        try:
            if options["image_digest"]:
                self._pin(
                    campaign, options["image_tag"], options["image_digest"], options["image_ref"]
                )
                return
            submission = self._built_kit(campaign) or self._build_kit(campaign, options["kit"])
        except PodiumError as exc:
            raise CommandError(exc.detail) from None
        self._pin(campaign, submission.image_tag, submission.image_digest, submission.image_ref)

    def _pin(self, campaign: Campaign, tag: str, digest: str, ref: str) -> None:
        creation.campaign_baseline_record(
            campaign=campaign, image_tag=tag, image_digest=digest, image_ref=ref
        )
        self.stdout.write(f"{campaign.slug}: baseline pinned: {tag} ({digest}).")

    def _owner(self) -> Any:
        user, created = get_user_model().objects.get_or_create(
            username=BASELINE_USER, defaults={"email": f"{BASELINE_USER}@localhost"}
        )
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        EmailAddress.objects.update_or_create(
            user=user, email=user.email, defaults={"verified": True, "primary": True}
        )
        return user

    def _built_kit(self, campaign: Campaign) -> Submission | None:
        return (
            Submission.objects.filter(
                benchmark_id=campaign.benchmark_id, entrant__username=BASELINE_USER
            )
            .exclude(image_digest="")
            .order_by("-submitted_at", "-id")
            .first()
        )

    def _build_kit(self, campaign: Campaign, kit: Path) -> Submission:
        owner = self._owner()
        benchmark = campaign.benchmark
        environment = (
            Environment.objects.filter(owner=owner, benchmark=benchmark)
            .exclude(status=Environment.REMOVED)
            .order_by("-created_at")
            .first()
        )
        if environment is None or environment.status in (
            Environment.FAILED,
            Environment.TIMED_OUT,
            Environment.TOO_LARGE,
        ):
            environment = environment_create(
                owner=owner,
                benchmark=benchmark,
                name="baseline",
                dockerfile_text=(kit / "Dockerfile").read_text(),
            )
        if environment.status == Environment.QUEUED:
            self.stdout.write(f"Building the kit's environment for {campaign.slug}...")
            builds.build_environment(environment.pk)
            environment.refresh_from_db()
        if environment.status != Environment.READY:
            why = environment.failure_reason or "see its build log (no build network yet?)"
            raise CommandError(f"The kit's environment is {environment.status}: {why}")
        with tempfile.TemporaryDirectory(prefix="podium-kit-") as folder:
            submission = submission_accept(
                entrant=owner,
                benchmark=benchmark,
                environment=environment,
                source_file=kit_archive(kit, Path(folder) / "starter-kit.tar.gz"),
                source_name="starter-kit.tar.gz",
                kind=Submission.PRACTICE,
            )
        self.stdout.write(f"Building the kit (submission #{submission.pk})...")
        builds.build_submission(submission.pk)
        submission.refresh_from_db()
        if not submission.image_digest:
            raise CommandError(
                f"The kit's build ended {submission.status}: "
                f"{submission.failure_reason or 'see its build log'}"
            )
        return submission
