"""Environments: create, list, read, remove, rebuild, build log (the caller's own only)."""

from __future__ import annotations

import contextlib

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import serializers as s
from portal.api.common import (
    NOT_FOUND,
    TAIL_PARAMETER,
    TEXT_RESPONSE,
    RawAPIView,
    caller_id,
    dockerfile_text,
    get_benchmark,
    own_environment,
    tail_lines,
    text_response,
    upload_path,
)
from portal.contests.kinds import timed_path_check
from portal.contests.uploads import upload_check, upload_route
from portal.core import storage
from portal.core.throttles import PostRateThrottle
from portal.environments.models import Environment
from portal.environments.services import (
    environment_create,
    environment_rebuild,
    environment_remove,
)
from portal.teams.selectors import teammate_ids


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
        responses={200: s.EnvironmentSerializer(many=True), **NOT_FOUND},
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
        return Response(s.EnvironmentSerializer(environments, many=True).data)

    @extend_schema(
        operation_id="environments_create",
        tags=["environments"],
        request={"multipart/form-data": s.EnvironmentCreateSerializer},
        responses={
            201: s.EnvironmentSerializer,
            **s.error_responses(400, 401, 404, 409, 413, 415, 429),
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        timed_path_check(benchmark, "environment")  # before the body is read
        upload_check(request)
        serializer = s.EnvironmentCreateSerializer(data=request.data)
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
        return Response(s.EnvironmentSerializer(environment).data, status=status.HTTP_201_CREATED)


class EnvironmentDetailView(APIView):
    """One of your environments with its timeline; DELETE removes an unused one.

    Staff may read any entrant's (review); DELETE stays the owner's own.
    """

    @extend_schema(
        operation_id="environments_retrieve",
        tags=["environments"],
        responses={200: s.EnvironmentSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, environment_id: int) -> Response:
        environment = own_environment(
            request, environment_id, staff_may_read=True, team_may_read=True
        )
        return Response(s.EnvironmentSerializer(environment).data)

    @extend_schema(
        operation_id="environments_destroy",
        tags=["environments"],
        responses={204: None, **s.error_responses(401, 404, 409)},
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
        responses={202: s.EnvironmentSerializer, **s.error_responses(400, 401, 404)},
    )
    def post(self, request: Request, environment_id: int) -> Response:
        environment_rebuild(environment=own_environment(request, environment_id))
        environment = own_environment(request, environment_id)
        return Response(s.EnvironmentSerializer(environment).data, status=status.HTTP_202_ACCEPTED)


class EnvironmentBuildLogView(RawAPIView):
    """The last ``tail`` lines of the environment's build log (text/plain)."""

    @extend_schema(
        operation_id="environments_build_log",
        tags=["environments"],
        parameters=[TAIL_PARAMETER],
        responses={**TEXT_RESPONSE, **s.error_responses(400, 401, 404)},
    )
    def get(self, request: Request, environment_id: int) -> HttpResponse:
        environment = own_environment(request, environment_id, staff_may_read=True, details=False)
        lines = tail_lines(request)
        log = storage.environment_build_log(environment.pk)
        return text_response(storage.read_tail(log, lines))
