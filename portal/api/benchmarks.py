"""Benchmarks (``/api/v1/benchmarks/`` and ``/api/v1/benchmarks/<slug>/``): the list and
one benchmark with its rules, hardware and build network; its leaderboard, every graded
attempt, the caller's quota, and the practice cohort with its download. Views and their
serializers. (The other routes under a benchmark live with their resource: ``sandbox``,
``environments``, ``submissions``, ``teams``, ``standings``, ``estimation``.)
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict
from typing import Any

from django.core.cache import cache
from django.http import FileResponse, HttpResponse
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import downloads
from portal.api.common import (
    NOT_FOUND,
    HardwareSerializer,
    NoiseBandSerializer,
    OffsetDateTimeField,
    RawAPIView,
    error_responses,
    get_benchmark,
    iso,
)
from portal.contests.hardware import class_hardware
from portal.contests.models import Benchmark, Cohort, CohortItem
from portal.contests.selectors import LeaderboardRow, leaderboard_rows, leaderboard_version
from portal.core import errors
from portal.environments.selectors import BuildNetworkState, build_network_state
from portal.hosts.selectors import noise_band
from portal.standings.selectors import board_state
from portal.submissions.attempts import Quota, quotas_for
from portal.submissions.every_attempt import attempts_version, graded_attempts
from portal.submissions.leaderboard import VerifyingRow, verifying_rows

RULE_FIELDS = [
    "pass_min_matches",
    "cohort_size",
    "attempts_per_day",
    "attempt_timezone",
    "practice_per_day",
    "max_environments",
    "build_timeout_s",
    "score_timeout_s",
    "max_image_bytes",
    "max_concurrent_builds",
    "max_upload_bytes",
    "team_size_max",
    "team_freeze_at",
]


class BenchmarkSerializer(serializers.ModelSerializer[Benchmark]):
    status = serializers.SerializerMethodField()
    opens_at = OffsetDateTimeField()
    closes_at = OffsetDateTimeField()

    class Meta:
        model = Benchmark
        fields = ["slug", "title", "status", "opens_at", "closes_at"]

    def get_status(self, benchmark: Benchmark) -> str:
        now: dt.datetime = self.context["now"]
        return benchmark.status_at(now)


class BuildNetworkSerializer(serializers.Serializer[BuildNetworkState]):
    """The build network as the latest live check of every build host found it.

    Never checked: not enforced, ``checked_at`` null, empty lists. ``allowed`` (the
    operator's allow-list entries) is present only for staff callers.
    """

    # The serializer's context says whether the caller is staff: ``{"staff": bool}``.

    enforced = serializers.BooleanField(
        help_text="Every rule of every build host was in place at its latest check, "
        "and no check is stale; builds wait while this is false."
    )
    checked_at = OffsetDateTimeField(allow_null=True, help_text="The most recent check.")
    subnet = serializers.CharField()
    blocked = serializers.ListField(
        child=serializers.CharField(),
        help_text="Ranges builds cannot reach (CIDRs, IPv4 and IPv6).",
    )
    dns = serializers.ListField(
        child=serializers.CharField(), help_text="The only resolvers builds may send DNS to."
    )
    allowed_count = serializers.IntegerField(
        help_text="How many allow-list entries (mirrors, proxies) the operator admits."
    )
    allowed = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Staff only: the allow-list entries (CIDRs or host:port).",
    )

    def to_representation(self, instance: BuildNetworkState | None) -> dict[str, Any]:
        if instance is None:
            return {
                "enforced": False,
                "checked_at": None,
                "subnet": "",
                "blocked": [],
                "dns": [],
                "allowed_count": 0,
                **({"allowed": []} if self.context.get("staff") else {}),
            }
        data = dict(super().to_representation(instance))
        if not self.context.get("staff"):
            del data["allowed"]
        return data


class BenchmarkPhaseSerializer(serializers.Serializer[Benchmark]):
    """The contest a benchmark is a phase of, and its place there."""

    slug = serializers.CharField(source="contest.slug", help_text="The contest's slug.")
    phase = serializers.IntegerField(source="phase_order", help_text="Its place (1 first).")
    name = serializers.CharField(source="phase_label", help_text='Its name, else "Phase N".')


class BenchmarkDetailSerializer(BenchmarkSerializer):
    """Context: ``now``, and ``build_network`` (the selector's state) with ``staff``."""

    build_network = serializers.SerializerMethodField()
    noise_band = serializers.SerializerMethodField()
    hardware = serializers.SerializerMethodField()
    contest = serializers.SerializerMethodField()
    team_freeze_at = OffsetDateTimeField(
        allow_null=True,
        help_text="From this moment teams are fixed; null: from the close (closes_at).",
    )
    kind = serializers.CharField(
        help_text="The format: leaderboard, campaign or estimation (a metered-estimation "
        "phase, whose entries go to .../estimation/entries/)."
    )

    class Meta(BenchmarkSerializer.Meta):
        fields = [
            *BenchmarkSerializer.Meta.fields,
            "kind",
            "description",
            *RULE_FIELDS,
            "build_network",
            "hardware",
            "noise_band",
            "contest",
        ]

    @extend_schema_field(BenchmarkPhaseSerializer(allow_null=True))
    def get_contest(self, benchmark: Benchmark) -> dict[str, Any] | None:
        if benchmark.contest_id is None:
            return None
        return dict(BenchmarkPhaseSerializer(benchmark).data)

    @extend_schema_field(HardwareSerializer)
    def get_hardware(self, benchmark: Benchmark) -> dict[str, Any]:
        return class_hardware(benchmark.hardware_class_id)

    @extend_schema_field(NoiseBandSerializer(allow_null=True))
    def get_noise_band(self, benchmark: Benchmark) -> dict[str, Any] | None:
        band = noise_band(benchmark.hardware_class_id)
        return None if band is None else dict(NoiseBandSerializer(band).data)

    @extend_schema_field(BuildNetworkSerializer)
    def get_build_network(self, benchmark: Benchmark) -> dict[str, Any]:
        state = self.context.get("build_network")
        staff = bool(self.context.get("staff"))
        # to_representation, not .data: ``.data`` of a None instance is the initial value.
        return BuildNetworkSerializer(context={"staff": staff}).to_representation(state)


class LeaderboardRowSerializer(serializers.Serializer[LeaderboardRow]):
    rank = serializers.IntegerField()
    entrant = serializers.CharField()
    wall_time_ns = serializers.IntegerField()
    matches = serializers.IntegerField()
    total = serializers.IntegerField()
    submission_id = serializers.IntegerField()
    submitted_at = OffsetDateTimeField()
    cpu_per_wall = serializers.FloatField(
        allow_null=True, help_text="The run's CPU seconds (user + system) per wall second."
    )
    energy_per_image_j = serializers.FloatField(
        allow_null=True,
        help_text="The run's GPU energy per image, joules (null on a class without GPUs).",
    )
    gpu_util_mean_pct = serializers.FloatField(
        allow_null=True,
        help_text="The run's mean GPU utilization, percent (null on a class without GPUs).",
    )
    review = serializers.ChoiceField(
        choices=["under_review", "cleared"],
        allow_null=True,
        help_text="The submission's provenance review: under review, cleared, or null (none).",
    )
    team = serializers.BooleanField(
        help_text="Whether the row is a team's: ``entrant`` is then the team's name."
    )


class VerifyingRowSerializer(serializers.Serializer[VerifyingRow]):
    entrant = serializers.CharField()
    wall_time_ns = serializers.IntegerField(help_text="The official run's wall time.")
    submission_id = serializers.IntegerField()
    submitted_at = OffsetDateTimeField()


class LeaderboardSerializer(serializers.Serializer[dict[str, Any]]):
    state = serializers.CharField(
        help_text=(
            "``live`` before the close, ``provisional`` from the close until final "
            "standings are published, ``final`` afterwards (see .../standings/)."
        )
    )
    rows = LeaderboardRowSerializer(many=True)
    verifying = VerifyingRowSerializer(
        many=True,
        help_text=(
            "Passing official runs held off the board until one more run off the board "
            "confirms them; each ranks (or is rejected) when it ends."
        ),
    )


class GradedAttemptSerializer(serializers.Serializer[dict[str, Any]]):
    submission_id = serializers.IntegerField()
    entrant = serializers.CharField(
        help_text="Who the board ranks it under: the uploader's team's name when they are in "
        "a team on the benchmark, else their username."
    )
    team = serializers.BooleanField(help_text="True when `entrant` is a team's name.")
    submitted_at = OffsetDateTimeField()
    wall_time_ns = serializers.IntegerField()
    passed = serializers.BooleanField(help_text="False: the run failed on accuracy.")


class AttemptsSerializer(serializers.Serializer[dict[str, Any]]):
    count = serializers.IntegerField()
    attempts = GradedAttemptSerializer(
        many=True, help_text="Every graded official attempt, by upload."
    )


# One kind's Quota; its subclass QuotaSerializer renders a dict (the official Quota's
# fields, both kinds and the timezone).
class QuotaKindSerializer(serializers.Serializer[Quota | dict[str, Any]]):
    attempts_per_day = serializers.IntegerField(source="per_day")
    used_today = serializers.IntegerField()
    remaining_today = serializers.IntegerField()
    resets_at = OffsetDateTimeField()
    next_available_at = OffsetDateTimeField(allow_null=True)  # null once the window closed


class QuotaSerializer(QuotaKindSerializer):
    """The official quota at the top level (as docs/api.md names it), both kinds nested."""

    official = QuotaKindSerializer()
    practice = QuotaKindSerializer()
    timezone = serializers.CharField()


class PracticeAnswerSerializer(serializers.Serializer[CohortItem]):
    path = serializers.CharField(source="canonical_name")
    # "class" is a keyword: declared below through the fields mapping.

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["class"] = serializers.IntegerField(source="reference_class")
        return fields


class PracticeSerializer(serializers.Serializer[dict[str, Any]]):
    download_url = serializers.URLField()
    answers = PracticeAnswerSerializer(many=True)
    count = serializers.IntegerField()
    seed = serializers.CharField(
        allow_null=True,
        help_text="The public seed the cohort was drawn with; null for a prepared cohort.",
    )


class BenchmarkListView(APIView):
    """Every benchmark with its upload window and status (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="benchmarks_list",
        tags=["benchmarks"],
        responses=BenchmarkSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        context = {"now": timezone.now()}
        benchmarks = Benchmark.objects.order_by("-opens_at", "slug")
        return Response(BenchmarkSerializer(benchmarks, many=True, context=context).data)


class BenchmarkDetailView(APIView):
    """One benchmark with every rule setting and the build network's state (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="benchmarks_retrieve",
        tags=["benchmarks"],
        responses={200: BenchmarkDetailSerializer, **error_responses(404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        now = timezone.now()
        context = {
            "now": now,
            "build_network": build_network_state(now=now),
            "staff": bool(request.user and request.user.is_staff),
        }
        return Response(BenchmarkDetailSerializer(benchmark, context=context).data)


class LeaderboardView(APIView):
    """Best passing official run per entrant, fastest first (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="benchmarks_leaderboard",
        tags=["benchmarks"],
        responses={200: LeaderboardSerializer, **error_responses(404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        data = {
            "state": board_state(benchmark),
            "rows": leaderboard_rows(benchmark),
            "verifying": verifying_rows(benchmark),
        }
        return Response(LeaderboardSerializer(data).data)


ATTEMPTS_CACHE_S = 15 * 60


class AttemptsView(APIView):
    """Every graded official attempt: what the every-attempt chart draws (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="benchmarks_attempts",
        tags=["benchmarks"],
        responses={200: AttemptsSerializer, **error_responses(404)},
    )
    def get(self, request: Request, slug: str) -> HttpResponse:
        benchmark = get_benchmark(slug)
        # Tens of thousands of rows: written directly (the serializer documents the shape)
        # and cached per version of the attempts, as the chart is.
        version = attempts_version(benchmark, leaderboard_version(benchmark).key)
        key = f"podium:attempts-json:{benchmark.pk}:{version}"
        body: bytes | None = cache.get(key)
        if body is None:
            attempts = [
                {
                    "submission_id": a.submission_id,
                    "entrant": a.label,
                    "team": bool(a.team),
                    "submitted_at": iso(a.submitted_at),
                    "wall_time_ns": a.wall_time_ns,
                    "passed": a.passed,
                }
                for a in graded_attempts(benchmark)
            ]
            body = json.dumps(
                {"count": len(attempts), "attempts": attempts}, separators=(",", ":")
            ).encode()
            cache.set(key, body, ATTEMPTS_CACHE_S)
        return HttpResponse(body, content_type="application/json")


class QuotaView(APIView):
    """Your official and practice attempts left today, in the attempt timezone's day."""

    @extend_schema(
        operation_id="benchmarks_quota",
        tags=["benchmarks"],
        responses={200: QuotaSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        now = timezone.now()
        official, practice = quotas_for(request.user, benchmark, now)
        data = {
            **asdict(official),
            "official": official,
            "practice": practice,
            "timezone": benchmark.attempt_timezone,
        }
        return Response(QuotaSerializer(data).data)


def practice_cohort(benchmark: Benchmark) -> Cohort:
    cohort = Cohort.objects.filter(benchmark=benchmark, kind=Cohort.PRACTICE).first()
    if cohort is None:
        raise errors.NotFound("This benchmark has no practice cohort yet.")
    return cohort


class PracticeView(APIView):
    """The practice cohort's published answers and its download link."""

    @extend_schema(
        operation_id="benchmarks_practice",
        tags=["benchmarks"],
        responses={200: PracticeSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        cohort = practice_cohort(benchmark)
        items = downloads.practice_items(cohort)
        url = reverse("api:practice-download", kwargs={"slug": benchmark.slug})
        data = {
            "download_url": request.build_absolute_uri(url),
            "answers": items,
            "count": len(items),
            "seed": cohort.public_seed or None,
        }
        return Response(PracticeSerializer(data).data)


class PracticeDownloadView(RawAPIView):
    """The practice images and ``answers.tsv`` as one .tar.gz (signed-in users)."""

    @extend_schema(
        operation_id="benchmarks_practice_download",
        tags=["benchmarks"],
        responses={(200, "application/gzip"): OpenApiTypes.BINARY, **NOT_FOUND},
    )
    def get(self, request: Request, slug: str) -> FileResponse:
        benchmark = get_benchmark(slug)
        archive = downloads.practice_archive_open(practice_cohort(benchmark))
        return FileResponse(
            archive,
            as_attachment=True,
            filename=f"{benchmark.slug}-practice.tar.gz",
            content_type="application/gzip",
        )
