"""factory_boy factories for rows the tests need."""

from __future__ import annotations

import datetime as dt
from typing import Any

import factory
from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.utils import timezone

from portal.contests.hardware import hardware_class_row
from portal.contests.models import Benchmark, Cohort, Contest
from portal.environments.models import Environment
from portal.estimation.models import PhaseRules, Suite
from portal.submissions.models import VerificationSet
from portal.teams.models import Team, TeamMember


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"entrant{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("correct horse battery")

    @factory.post_generation
    def email_verified(self, create: bool, extracted: bool | None, **kwargs: object) -> None:
        """The user's address as allauth's primary ``EmailAddress``, verified unless
        ``email_verified=False`` (as right after signing up, before following the link)."""
        if not create:
            return
        verified = extracted is not False
        EmailAddress.objects.update_or_create(
            user=self, email=self.email, defaults={"verified": verified, "primary": True}
        )


class BenchmarkFactory(factory.django.DjangoModelFactory[Benchmark]):
    class Meta:
        model = Benchmark

    slug = factory.Sequence(lambda n: f"bench-{n}")
    title = factory.LazyAttribute(lambda b: f"Benchmark {b.slug}")
    opens_at = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(days=1))
    closes_at = factory.LazyFunction(lambda: timezone.now() + dt.timedelta(days=10))
    allowed_registries = "localhost/podium/\n"
    # Verification before ranking is off unless a test is about it (tests/submissions/
    # test_verification.py, the end-to-end pipeline): every other passing run ranks at once.
    verify_top = 0
    # The class this machine's scoring worker serves (its queue: scoring.<class>).
    hardware_class = factory.LazyFunction(lambda: settings.PODIUM_HARDWARE_CLASS)

    @classmethod
    def _adjust_kwargs(cls, **kwargs: Any) -> dict[str, Any]:
        # A class named by a string is its row (created as a CPU class when nobody
        # described it), as a benchmark's class is a foreign key on the name.
        if isinstance(kwargs.get("hardware_class"), str):
            kwargs["hardware_class"] = hardware_class_row(kwargs["hardware_class"])
        return kwargs


class EnvironmentFactory(factory.django.DjangoModelFactory[Environment]):
    class Meta:
        model = Environment

    owner = factory.SubFactory(UserFactory)
    benchmark = factory.SubFactory(BenchmarkFactory)
    name = factory.Sequence(lambda n: f"env-{n}")
    status = Environment.READY
    dockerfile = "FROM localhost/podium/busybox:1\n"
    image_tag = "localhost/podium/busybox:1"


def ready_sets(cohort: Cohort, count: int = 1) -> list[VerificationSet]:
    """``count`` prepared verification sets of ``cohort`` marked ready, rows only (no
    files): enough for a verification run to be claimed. A test that stages the run
    prepares a real set instead (``scoring.cohort.verifysets.prepare``)."""
    return [
        VerificationSet.objects.create(
            cohort=cohort, status=VerificationSet.READY, ready_at=timezone.now()
        )
        for _ in range(count)
    ]


def cohorts(benchmark: Benchmark, *kinds: str) -> list[Cohort]:
    """The benchmark's cohorts of ``kinds`` (both by default), empty ones made where
    missing: an upload of a kind is refused (``no_cohort``) while its cohort is missing."""
    return [
        Cohort.objects.get_or_create(benchmark=benchmark, kind=kind)[0]
        for kind in kinds or (Cohort.OFFICIAL, Cohort.PRACTICE)
    ]


class ContestFactory(factory.django.DjangoModelFactory[Contest]):
    class Meta:
        model = Contest

    slug = factory.Sequence(lambda n: f"contest-{n}")
    title = factory.LazyAttribute(lambda c: f"Contest {c.slug}")


def phased_contest(*windows: tuple[dt.datetime, dt.datetime], **fields: Any) -> Contest:
    """A contest whose phases are benchmarks with the given windows, in that order
    (phase_order 1, 2, ...), named "Phase 1", "Phase 2"... unless they say otherwise."""
    contest = ContestFactory(**fields)
    for order, (opens_at, closes_at) in enumerate(windows, start=1):
        BenchmarkFactory(
            contest=contest,
            phase_order=order,
            slug=f"{contest.slug}-p{order}",
            opens_at=opens_at,
            closes_at=closes_at,
        )
    return contest


class PhaseRulesFactory(factory.django.DjangoModelFactory[PhaseRules]):
    """A small metered-estimation phase (its benchmark open, UTC days, 10 entries a day):
    the shape of ``whest dataset bake --n-mlps 4 --width 8 --depth 2``, two public MLPs and
    two withheld."""

    class Meta:
        model = PhaseRules

    benchmark = factory.SubFactory(
        BenchmarkFactory,
        kind=Benchmark.ESTIMATION,
        attempt_timezone="UTC",
        attempts_per_day=10,
        max_upload_bytes=50 * 1024 * 1024,
    )
    width = 8
    depth = 2
    flop_budget = 1_000_000
    public_mlps = 2
    withheld_mlps = 2
    final_mlps = 4
    local_mlps = 4
    reference_samples = 2000


class SuiteFactory(factory.django.DjangoModelFactory[Suite]):
    """A ready phase suite (imported), with each MLP's mean final-layer variance."""

    class Meta:
        model = Suite

    role = Suite.PHASE
    status = Suite.READY
    origin = Suite.IMPORTED
    n_mlps = 4
    width = 8
    depth = 2
    n_samples = 2000
    progress_done = 4
    progress_total = 4
    stats = factory.LazyFunction(lambda: {"avg_variances": [0.4, 0.5, 0.6, 0.7]})


def team(benchmark: Benchmark, name: str, *members: User) -> Team:
    """A team of ``members`` on the benchmark (the first its captain), as rows."""
    now = timezone.now()
    created = Team.objects.create(
        benchmark=benchmark, name=name, captain=members[0], created_at=now
    )
    for member in members:
        TeamMember.objects.create(team=created, benchmark=benchmark, user=member, joined_at=now)
    return created
