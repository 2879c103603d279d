"""The REST API (docs/api.md): tokens, benchmarks, practice cohort, and the docs page.

Views are thin: parse, call one service or selector, render. Refusals come from the
services as ``PodiumError``s, which ``portal.api.errors`` turns into ``{"code", "detail"}``.
Anything that belongs to another entrant is ``not_found``. The other endpoints live in
``environments``, ``submissions`` and ``staff``.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from django.core.cache import cache
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views import defaults
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.permissions import AllowAny, BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.accounts.models import ApiToken
from portal.accounts.services import token_create, token_revoke
from portal.api import downloads
from portal.api import serializers as s
from portal.api.common import (
    NOT_FOUND,
    RawAPIView,
    caller_id,
    get_benchmark,
)
from portal.contests.models import Benchmark, Cohort
from portal.contests.selectors import leaderboard_rows, leaderboard_version
from portal.core import errors
from portal.core.login_limits import DEVICE_HEADER, LoginLimited, issue_device, login_authenticate
from portal.core.throttles import PostRateThrottle
from portal.environments.selectors import build_network_state
from portal.standings.selectors import board_state
from portal.submissions.attempts import quotas_for
from portal.submissions.every_attempt import attempts_version, graded_attempts
from portal.submissions.leaderboard import verifying_rows

# Tokens -----------------------------------------------------------------------------


class TokenListCreateView(APIView):
    """POST: exchange username and password for a new token. GET: your tokens.

    POSTs are throttled per client address (``tokens`` scope), and failed ones count
    toward the same per-account and per-address limits as the browser sign-in form
    (``portal.core.login_limits``): past either, even the right password is 429 ``throttled``.
    A success also answers a device string (and sets it as the device cookie); a client that
    sends it back in ``X-Podium-Device`` is counted as that known device of the account.
    """

    throttle_scope = "tokens"
    throttle_classes = [PostRateThrottle]

    def get_permissions(self) -> list[BasePermission]:
        if self.request.method == "POST":
            return [AllowAny()]
        return [IsAuthenticated()]

    @extend_schema(
        operation_id="tokens_create",
        tags=["tokens"],
        request=s.TokenCreateSerializer,
        parameters=[
            OpenApiParameter(
                DEVICE_HEADER,
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="The device string an earlier sign-in of this client answered: "
                "failed sign-ins then count at this device only.",
            )
        ],
        responses={201: s.TokenCreatedSerializer, **s.error_responses(400, 401, 415, 429)},
        auth=[],
    )
    def post(self, request: Request) -> Response:
        serializer = s.TokenCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            user = login_authenticate(
                request=request._request, username=data["username"], password=data["password"]
            )
        except LoginLimited as refusal:
            detail = "Too many failed sign-ins at this account or from this address."
            raise exceptions.Throttled(wait=refusal.retry_after_s, detail=detail) from None
        if user is None:
            raise exceptions.AuthenticationFailed("Wrong username or password.")
        token = token_create(user=user, label=data["label"])
        device = issue_device(request._request, user)
        return Response(
            {"token": token.key, "id": token.pk, "label": token.label, "device": device},
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(
        operation_id="tokens_list",
        tags=["tokens"],
        responses={200: s.TokenSerializer(many=True), **s.error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        tokens = ApiToken.objects.filter(user_id=caller_id(request)).order_by("-created_at", "-id")
        return Response(s.TokenSerializer(tokens, many=True).data)


class TokenDetailView(APIView):
    """Revoke one of your tokens."""

    @extend_schema(
        operation_id="tokens_destroy", tags=["tokens"], responses={204: None, **NOT_FOUND}
    )
    def delete(self, request: Request, token_id: int) -> Response:
        token_revoke(user=request.user, token_id=token_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


# Benchmarks -------------------------------------------------------------------------


class BenchmarkListView(APIView):
    """Every benchmark with its upload window and status (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="benchmarks_list",
        tags=["benchmarks"],
        responses=s.BenchmarkSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        context = {"now": timezone.now()}
        benchmarks = Benchmark.objects.order_by("-opens_at", "slug")
        return Response(s.BenchmarkSerializer(benchmarks, many=True, context=context).data)


class BenchmarkDetailView(APIView):
    """One benchmark with every rule setting and the build network's state (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="benchmarks_retrieve",
        tags=["benchmarks"],
        responses={200: s.BenchmarkDetailSerializer, **s.error_responses(404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        now = timezone.now()
        context = {
            "now": now,
            "build_network": build_network_state(now=now),
            "staff": bool(request.user and request.user.is_staff),
        }
        return Response(s.BenchmarkDetailSerializer(benchmark, context=context).data)


class LeaderboardView(APIView):
    """Best passing official run per entrant, fastest first (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="benchmarks_leaderboard",
        tags=["benchmarks"],
        responses={200: s.LeaderboardSerializer, **s.error_responses(404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        data = {
            "state": board_state(benchmark),
            "rows": leaderboard_rows(benchmark),
            "verifying": verifying_rows(benchmark),
        }
        return Response(s.LeaderboardSerializer(data).data)


ATTEMPTS_CACHE_S = 15 * 60


class AttemptsView(APIView):
    """Every graded official attempt: what the every-attempt chart draws (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="benchmarks_attempts",
        tags=["benchmarks"],
        responses={200: s.AttemptsSerializer, **s.error_responses(404)},
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
                    "submitted_at": s.iso(a.submitted_at),
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
        responses={200: s.QuotaSerializer, **NOT_FOUND},
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
        return Response(s.QuotaSerializer(data).data)


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
        responses={200: s.PracticeSerializer, **NOT_FOUND},
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
        return Response(s.PracticeSerializer(data).data)


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


# Unknown URLs -----------------------------------------------------------------------


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler404``: under ``/api/`` a URL no route matches (``/api/v1/submissions/abc/``)
    is the error format's ``not_found`` too, not Django's HTML page."""
    if request.path_info.startswith("/api/"):
        body = {"code": "not_found", "detail": "No such endpoint or object."}
        return JsonResponse(body, status=status.HTTP_404_NOT_FOUND)
    return defaults.page_not_found(request, exception or Http404())


# OpenAPI ----------------------------------------------------------------------------


def docs(request: HttpRequest) -> HttpResponse:
    """A self-hosted page listing every operation of the schema (no external assets)."""
    # drf-spectacular's SchemaGenerator and get_schema carry no annotations.
    schema = SchemaGenerator().get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    operations = [
        {
            "method": method.upper(),
            "path": path,
            "id": operation.get("operationId", ""),
            "summary": operation.get("summary") or operation.get("description", ""),
            "responses": ", ".join(sorted(operation.get("responses", {}))),
        }
        for path, item in schema.get("paths", {}).items()
        for method, operation in item.items()
        if isinstance(operation, dict)
    ]
    context = {"info": schema.get("info", {}), "operations": operations}
    return render(request, "api/docs.html", context)
