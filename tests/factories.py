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
from portal.estimation.models import Entry, PhaseRules, Suite
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


# Metered estimation -----------------------------------------------------------------------


class PhaseRulesFactory(factory.django.DjangoModelFactory[PhaseRules]):
    """An open estimation phase (a benchmark of kind ``estimation``, its days in UTC as the
    seed contest's) with small suites: two public MLPs and two withheld, 8 wide and 2 deep,
    as ``whest dataset bake`` makes them in tests."""

    class Meta:
        model = PhaseRules

    benchmark = factory.SubFactory(
        BenchmarkFactory,
        kind=Benchmark.ESTIMATION,
        attempt_timezone="UTC",
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
    """A ready suite (a row; the test puts a dataset folder under ``storage.suite_dir``)."""

    class Meta:
        model = Suite

    benchmark = factory.SubFactory(
        BenchmarkFactory, kind=Benchmark.ESTIMATION, attempt_timezone="UTC"
    )
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


class EntryFactory(factory.django.DjangoModelFactory[Entry]):
    """An accepted entry (a row, charged to no team unless given one)."""

    class Meta:
        model = Entry

    benchmark = factory.SubFactory(
        BenchmarkFactory, kind=Benchmark.ESTIMATION, attempt_timezone="UTC"
    )
    entrant = factory.SubFactory(UserFactory)
    submitted_at = factory.LazyFunction(timezone.now)
    archive_name = "submission.tar.gz"
    archive_sha256 = "0" * 64
    archive_bytes = 1000
    estimator_class = "estimator.Estimator"


def whest_grade(
    scores: list[float],
    *,
    flops: int = 1000,
    residual_s: float = 0.001,
    fallbacks: tuple[int, ...] = (),
) -> dict[str, Any]:
    """A grade as whestbench's ``evaluate_estimator`` gives it: one ``per_mlp`` entry per
    score, in suite order; the MLPs at ``fallbacks`` went over the FLOP budget."""
    return {
        "per_mlp": [
            {
                "mlp_index": i,
                "mlp_name": f"mlp-{i:03d}",
                "final_layer_mse": score / 2,
                "adjusted_final_layer_score": score,
                "flops_used": flops,
                "residual_wall_time_s": residual_s,
                "wall_time_s": residual_s * 2,
                "effective_compute": float(flops),
                **({"budget_exhausted": True} if i in fallbacks else {}),
            }
            for i, score in enumerate(scores)
        ],
        "grader": {"whestbench": "0.16.2"},
    }


def team(benchmark: Benchmark, name: str, *members: User) -> Team:
    """A team of ``members`` on the benchmark (the first its captain), as rows."""
    now = timezone.now()
    created = Team.objects.create(
        benchmark=benchmark, name=name, captain=members[0], created_at=now
    )
    for member in members:
        TeamMember.objects.create(team=created, benchmark=benchmark, user=member, joined_at=now)
    return created
