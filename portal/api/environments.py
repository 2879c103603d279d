"""Environments (``/api/v1/environments/<id>/``, ``/api/v1/benchmarks/<slug>/environments/``):
create, list, read, remove, rebuild, build log (the caller's own only).

Views and their serializers.
"""

from __future__ import annotations

import contextlib
from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.common import (
    NOT_FOUND,
    TAIL_PARAMETER,
    TEXT_RESPONSE,
    OffsetDateTimeField,
    RawAPIView,
    TimelineEventSerializer,
    UploadField,
    caller_id,
    dockerfile_text,
    error_responses,
    get_benchmark,
    own_environment,
    tail_lines,
    text_response,
    upload_path,
)
from portal.contests.kinds import timed_path_check
from portal.contests.models import Benchmark
from portal.contests.uploads import upload_check, upload_route
from portal.core import storage
from portal.core.throttles import PostRateThrottle
from portal.environments.models import Environment
from portal.environments.services import environment_create, environment_rebuild, environment_remove
from portal.teams.selectors import teammate_ids


class EnvironmentSerializer(serializers.ModelSerializer[Environment]):
    benchmark: serializers.SlugRelatedField[Benchmark] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    owner = serializers.CharField(
        source="owner.username", read_only=True, help_text="Whose it is (you, or a teammate)."
    )
    image_digest = serializers.SerializerMethodField()
    timeline = TimelineEventSerializer(many=True, source="events")
    created_at = OffsetDateTimeField()
    build_started_at = OffsetDateTimeField(allow_null=True)
    build_finished_at = OffsetDateTimeField(allow_null=True)

    class Meta:
        model = Environment
        fields = [
            "id",
            "name",
            "owner",
            "benchmark",
            "status",
            "image_digest",
            "image_bytes",
            "timeline",
            "created_at",
            "failure_reason",
            "build_started_at",
            "build_finished_at",
        ]

    def get_image_digest(self, environment: Environment) -> str | None:
        return environment.image_digest or None


class EnvironmentCreateSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField(min_length=1, max_length=100)
    dockerfile = UploadField(help_text="The Dockerfile, UTF-8 text.")
    context = UploadField(  # type: ignore[assignment]
        required=False, help_text="Optional build context archive (.tar.gz, .tar or .zip)."
    )


@upload_route(archive="context", dockerfile="dockerfile")
class BenchmarkEnvironmentsView(APIView):
    """Your environments on a benchmark, with your teammates' (which you may submit
    with); POST a Dockerfile to create one (attempt-free)."""

    parser_classes = [MultiPartParser, FormParser]
    throttle_scope = "uploads"
    throttle_classes = [PostRateThrottle]

    @extend_schema(
        operation_id="environments_list",
        tags=["environments"],
        responses={200: EnvironmentSerializer(many=True), **NOT_FOUND},
    )
    def get(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        environments = (
            Environment.objects.filter(
                owner_id__in=teammate_ids(benchmark.pk, caller_id(request)), benchmark=benchmark
            )
            .exclude(status=Environment.REMOVED)
            .select_related("benchmark", "owner")
            .prefetch_related("events")
            .order_by("-created_at", "-id")
        )
        return Response(EnvironmentSerializer(environments, many=True).data)

    @extend_schema(
        operation_id="environments_create",
        tags=["environments"],
        request={"multipart/form-data": EnvironmentCreateSerializer},
        responses={
            201: EnvironmentSerializer,
            **error_responses(400, 401, 404, 409, 413, 415, 429),
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        timed_path_check(benchmark, "environment")  # before the body is read
        upload_check(request)
        serializer = EnvironmentCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        text = dockerfile_text(data["dockerfile"])
        with contextlib.ExitStack() as stack:
            context = data.get("context")
            context_path = stack.enter_context(upload_path(context)) if context else None
            environment = environment_create(
                owner=request.user,
                benchmark=benchmark,
                name=data["name"],
                dockerfile_text=text,
                context_path=context_path,
            )
        environment = own_environment(request, environment.pk)
        return Response(EnvironmentSerializer(environment).data, status=status.HTTP_201_CREATED)


class EnvironmentDetailView(APIView):
    """One of your environments with its timeline; DELETE removes an unused one.

    Staff may read any entrant's (review); DELETE stays the owner's own.
    """

    @extend_schema(
        operation_id="environments_retrieve",
        tags=["environments"],
        responses={200: EnvironmentSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, environment_id: int) -> Response:
        environment = own_environment(
            request, environment_id, staff_may_read=True, team_may_read=True
        )
        return Response(EnvironmentSerializer(environment).data)

    @extend_schema(
        operation_id="environments_destroy",
        tags=["environments"],
        responses={204: None, **error_responses(401, 404, 409)},
    )
    def delete(self, request: Request, environment_id: int) -> Response:
        environment_remove(environment=own_environment(request, environment_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class EnvironmentRebuildView(APIView):
    """Queue a new build of a failed, timed-out or too-large environment."""

    @extend_schema(
        operation_id="environments_rebuild",
        tags=["environments"],
        request=None,
        responses={202: EnvironmentSerializer, **error_responses(400, 401, 404)},
    )
    def post(self, request: Request, environment_id: int) -> Response:
        environment_rebuild(environment=own_environment(request, environment_id))
        environment = own_environment(request, environment_id)
        return Response(EnvironmentSerializer(environment).data, status=status.HTTP_202_ACCEPTED)


class EnvironmentBuildLogView(RawAPIView):
    """The last ``tail`` lines of the environment's build log (text/plain)."""

    @extend_schema(
        operation_id="environments_build_log",
        tags=["environments"],
        parameters=[TAIL_PARAMETER],
        responses={**TEXT_RESPONSE, **error_responses(400, 401, 404)},
    )
    def get(self, request: Request, environment_id: int) -> HttpResponse:
        environment = own_environment(request, environment_id, staff_may_read=True, details=False)
        lines = tail_lines(request)
        log = storage.environment_build_log(environment.pk)
        return text_response(storage.read_tail(log, lines))
