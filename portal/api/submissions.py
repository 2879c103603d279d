"""Submissions: upload, list, read, log tails, source download (owner, or audited staff)."""

from __future__ import annotations

from django.core.files.uploadedfile import UploadedFile
from django.db.models import QuerySet
from django.http import FileResponse, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.generics import GenericAPIView
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
    get_benchmark,
    get_submission,
    own_submission,
    submissions_with_details,
    tail_lines,
    text_response,
    upload_path,
)
from portal.audit.services import Origin
from portal.contests.kinds import timed_path_check
from portal.contests.uploads import upload_check, upload_route
from portal.core import errors, storage
from portal.core.throttles import PostRateThrottle
from portal.environments.selectors import usable_environment
from portal.submissions import staff
from portal.submissions.intake import submission_accept
from portal.submissions.models import Run, Submission
from portal.submissions.selectors import run_log_tail
from portal.teams.selectors import teammate_ids


@upload_route(archive="source")
class BenchmarkSubmissionsView(GenericAPIView[Submission]):
    """Your submissions and your teammates', newest first; POST an archive to upload one
    (charges an attempt of your team's allowance)."""

    serializer_class = s.SubmissionSerializer
    parser_classes = [MultiPartParser, FormParser]
    throttle_scope = "uploads"
    throttle_classes = [PostRateThrottle]

    def get_queryset(self) -> QuerySet[Submission]:
        if getattr(self, "swagger_fake_view", False):  # schema generation
            return Submission.objects.none()
        benchmark = get_benchmark(self.kwargs["slug"])
        return (
            submissions_with_details()
            .filter(
                entrant_id__in=teammate_ids(benchmark.pk, caller_id(self.request)),
                benchmark=benchmark,
            )
            .order_by("-submitted_at", "-id")
        )

    @extend_schema(
        operation_id="submissions_list",
        tags=["submissions"],
        # 400: a page that is not a whole number; 404: one past the last page.
        responses={200: s.SubmissionSerializer(many=True), **s.error_responses(400, 401, 404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.SubmissionSerializer(page, many=True).data)

    @extend_schema(
        operation_id="submissions_create",
        tags=["submissions"],
        request={"multipart/form-data": s.SubmissionCreateSerializer},
        responses={
            201: s.SubmissionSerializer,
            **s.error_responses(400, 401, 404, 409, 413, 415, 429),
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        # Before the body is read or an environment looked up (an estimation benchmark has none).
        timed_path_check(benchmark, "submission")
        upload_check(request)
        serializer = s.SubmissionCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        environment = usable_environment(request.user, benchmark, data["environment"])
        upload: UploadedFile = data["source"]
        with upload_path(upload) as path:
            submission = submission_accept(
                entrant=request.user,
                benchmark=benchmark,
                environment=environment,
                source_file=path,
                source_name=upload.name or "source",
                kind=data["kind"],
                boundary_confirmed=data["confirm_boundary"],
            )
        submission = get_submission(submission.pk)
        return Response(s.SubmissionSerializer(submission).data, status=status.HTTP_201_CREATED)


class SubmissionDetailView(APIView):
    """One of your or your teammates' submissions: status, timeline, result, digests,
    attempt (staff: anyone's)."""

    @extend_schema(
        operation_id="submissions_retrieve",
        tags=["submissions"],
        responses={200: s.SubmissionSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, submission_id: int) -> Response:
        submission = own_submission(request, submission_id, staff_may_read=True, team_may_read=True)
        return Response(s.SubmissionSerializer(submission).data)


class SubmissionBuildLogView(RawAPIView):
    """The last ``tail`` lines of the submission build (``build.sh``) log (text/plain)."""

    @extend_schema(
        operation_id="submissions_build_log",
        tags=["submissions"],
        parameters=[TAIL_PARAMETER],
        responses={**TEXT_RESPONSE, **s.error_responses(400, 401, 404)},
    )
    def get(self, request: Request, submission_id: int) -> HttpResponse:
        submission = own_submission(
            request, submission_id, staff_may_read=True, details=False, team_may_read=True
        )
        lines = tail_lines(request)
        log = storage.submission_build_log(submission.pk)
        return text_response(storage.read_tail(log, lines))


class SubmissionRunLogView(RawAPIView):
    """The last ``tail`` lines of your program's stdout and stderr in its latest run.

    Of an official run, at most the benchmark's ``runtime_tail_bytes`` (16 KiB), each line
    cut at 1,000 characters and marked; staff read the plain tail."""

    @extend_schema(
        operation_id="submissions_run_log",
        tags=["submissions"],
        parameters=[TAIL_PARAMETER],
        responses={**TEXT_RESPONSE, **s.error_responses(400, 401, 404)},
    )
    def get(self, request: Request, submission_id: int) -> HttpResponse:
        submission = own_submission(
            request, submission_id, staff_may_read=True, details=False, team_may_read=True
        )
        lines = tail_lines(request)
        run_id = (
            submission.runs.filter(purpose=Run.SCORE)
            .order_by("-try_number")
            .values_list("pk", flat=True)
            .first()
        )
        if run_id is None:
            return text_response("")
        return text_response(
            run_log_tail(
                submission=submission, run_id=run_id, lines=lines, staff=request.user.is_staff
            )
        )


class SubmissionSourceView(RawAPIView):
    """The source archive as uploaded: to its entrant, or to staff giving a reason (audited).

    Staff need the ``submissions.download_source`` permission (403 ``permission_denied``
    without it, before the reason is looked at); to anyone else it is ``not_found``.
    """

    @extend_schema(
        operation_id="submissions_source",
        tags=["submissions"],
        parameters=[
            OpenApiParameter(
                "reason",
                str,
                OpenApiParameter.QUERY,
                description="Staff only, required when reading another entrant's source.",
            )
        ],
        responses={
            (200, "application/octet-stream"): OpenApiTypes.BINARY,
            **s.error_responses(400, 401, 403, 404),
        },
    )
    def get(self, request: Request, submission_id: int) -> FileResponse:
        submission = get_submission(submission_id)
        if submission.entrant_id == caller_id(request):
            handle = staff.source_open(submission)
        elif request.user.is_staff:
            errors.staff_permission_check(request.user, staff.DOWNLOAD_SOURCE)
            handle = staff.submission_source_review(
                submission=submission,
                actor=request.user,
                reason=request.query_params.get("reason", ""),
                origin=Origin.of(request),
            )
        else:
            raise errors.NotFound("No such submission.")
        return FileResponse(
            handle,
            as_attachment=True,
            filename=submission.source_name,
            content_type="application/octet-stream",
        )
