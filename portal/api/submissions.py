"""Submissions (``/api/v1/submissions/<id>/``, ``/api/v1/benchmarks/<slug>/submissions/``):
upload, list, read, log tails, source download (owner, or audited staff).

Views and their serializers. Output never reaches reference classes, per-image results,
staged names or a cohort manifest: a submission shows only aggregates of its latest run.
``SubmissionSerializer`` is also what the staff actions (``staff``) answer.
"""

from __future__ import annotations

from typing import Any

from django.core.files.uploadedfile import UploadedFile
from django.db.models import QuerySet
from django.http import FileResponse, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
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
    error_responses,
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
from portal.contests.models import Benchmark
from portal.contests.uploads import upload_check, upload_route
from portal.core import errors, storage
from portal.core.throttles import PostRateThrottle
from portal.environments.models import Environment
from portal.environments.selectors import usable_environment
from portal.submissions import staff
from portal.submissions.intake import submission_accept
from portal.submissions.models import AttemptLedger, Run, Submission
from portal.submissions.selectors import (
    QueueStanding,
    queue_standing,
    resources_of,
    run_host,
    run_log_tail,
    verification_progress,
    verification_summary,
)
from portal.teams.selectors import teammate_ids


def sha256_digest(hex_digest: str) -> str | None:
    return f"sha256:{hex_digest}" if hex_digest else None


class SubmissionCreateSerializer(serializers.Serializer[dict[str, Any]]):
    environment = serializers.IntegerField(help_text="Id of one of your ready environments.")
    source = UploadField(  # type: ignore[assignment]
        help_text="The source archive: .tar.gz, .tar or .zip."
    )
    kind = serializers.ChoiceField(
        choices=[Submission.OFFICIAL, Submission.PRACTICE], default=Submission.OFFICIAL
    )
    confirm_boundary = serializers.BooleanField(
        default=False,
        help_text="Confirms the benchmark's validation-data boundary (its validation_boundary); "
        "required for an official upload to a benchmark that states one.",
    )


class DigestsSerializer(serializers.Serializer[dict[str, str | None]]):
    source = serializers.CharField()  # type: ignore[assignment]
    environment_image = serializers.CharField(allow_null=True)
    submission_image = serializers.CharField(allow_null=True)
    output = serializers.CharField(allow_null=True)


class AttemptSerializer(serializers.Serializer[dict[str, bool]]):
    charged = serializers.BooleanField()
    refunded = serializers.BooleanField()


# [start_ns, end_ns] of one clock, null before the run has them.
INTERVAL_FIELD = serializers.ListField(
    child=serializers.IntegerField(allow_null=True), min_length=2, max_length=2, allow_null=True
)


def latest_run(submission: Submission, purpose: str = Run.SCORE) -> Run | None:
    """The scored (or verification) run with the highest try number (works on prefetched
    ``runs`` too). A submission's numbers are its scored run's; a verification run only
    confirms them."""
    runs = [run for run in submission.runs.all() if run.purpose == purpose]
    return max(runs, key=lambda run: run.try_number) if runs else None


class ResourcesSerializer(serializers.Serializer[dict[str, Any]]):
    """The meter: the scored container's cgroup, read after its process tree was reaped,
    and on a GPU class the GPU meter's figures."""

    cpu_user_s = serializers.FloatField(allow_null=True)
    cpu_system_s = serializers.FloatField(allow_null=True)
    cpu_per_wall = serializers.FloatField(
        allow_null=True, help_text="CPU seconds (user + system) per wall-clock second."
    )
    memory_peak_bytes = serializers.IntegerField(allow_null=True)
    pids_peak = serializers.IntegerField(allow_null=True)
    io_read_bytes = serializers.IntegerField(allow_null=True)
    io_write_bytes = serializers.IntegerField(allow_null=True)
    oom_events = serializers.IntegerField(allow_null=True)
    energy_per_image_j = serializers.FloatField(
        allow_null=True,
        help_text=(
            "The GPUs' energy over the run (NVML's energy counter, else power integrated "
            "over time), joules, per image of the run; null on a class without GPUs or when "
            "NVML gave no reading."
        ),
    )
    gpu_util_mean_pct = serializers.FloatField(
        allow_null=True,
        help_text=(
            "The GPUs' mean utilization over the run, percent (NVML, sampled from just before "
            "the start until the exit); null on a class without GPUs or when NVML gave no "
            "reading."
        ),
    )


class VerificationSerializer(serializers.Serializer[dict[str, Any]]):
    status = serializers.ChoiceField(choices=[s for s, _ in Run.STATUSES])
    passed = serializers.BooleanField(allow_null=True)
    wall_time_ns = serializers.IntegerField(allow_null=True)
    matches = serializers.IntegerField(allow_null=True)
    total = serializers.IntegerField(allow_null=True)
    run = serializers.IntegerField(
        help_text="Which verification run this is: a timing miss is measured again, on a "
        "fresh shuffle, and judged on the fastest run (2 while re-measuring a first miss)."
    )
    of = serializers.IntegerField(help_text="At most this many verification runs are judged.")


class SubmissionSerializer(serializers.ModelSerializer[Submission]):
    """One submission as its entrant sees it: aggregates only, never per-image data.

    Expects ``events``, ``ledger`` and ``runs`` prefetched when rendering many.
    """

    environment: serializers.PrimaryKeyRelatedField[Environment] = (
        serializers.PrimaryKeyRelatedField(read_only=True)
    )
    entrant = serializers.CharField(
        source="entrant.username", read_only=True, help_text="Who uploaded it (you, or a teammate)."
    )
    benchmark: serializers.SlugRelatedField[Benchmark] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    submitted_at = OffsetDateTimeField()
    timeline = TimelineEventSerializer(many=True, source="events")
    wall_time_ns = serializers.SerializerMethodField()
    matches = serializers.SerializerMethodField()
    total = serializers.SerializerMethodField()
    passed = serializers.SerializerMethodField()
    host_interval_ns = serializers.SerializerMethodField()
    trusted_interval_ns = serializers.SerializerMethodField()
    supervisor_sha256 = serializers.SerializerMethodField()
    digests = serializers.SerializerMethodField()
    attempt = serializers.SerializerMethodField()
    runs = serializers.SerializerMethodField()
    disqualified = serializers.SerializerMethodField()
    verification = serializers.SerializerMethodField()
    resources = serializers.SerializerMethodField()
    queue_position = serializers.SerializerMethodField()
    eta_seconds = serializers.SerializerMethodField()
    host = serializers.SerializerMethodField()

    class Meta:
        model = Submission
        fields = [
            "id",
            "entrant",
            "kind",
            "status",
            "environment",
            "benchmark",
            "submitted_at",
            "source_name",
            "source_bytes",
            "timeline",
            "wall_time_ns",
            "matches",
            "total",
            "passed",
            "failure_reason",
            "host_interval_ns",
            "trusted_interval_ns",
            "supervisor_sha256",
            "digests",
            "attempt",
            "runs",
            "disqualified",
            "verification",
            "resources",
            "queue_position",
            "eta_seconds",
            "host",
        ]

    def _run(self, submission: Submission) -> Run | None:
        cache: dict[int, Run | None] = self.context.setdefault("_latest_runs", {})
        if submission.pk not in cache:
            cache[submission.pk] = latest_run(submission)
        return cache[submission.pk]

    def get_wall_time_ns(self, submission: Submission) -> int | None:
        run = self._run(submission)
        return None if run is None else run.wall_time_ns

    def get_matches(self, submission: Submission) -> int | None:
        run = self._run(submission)
        return None if run is None else run.matches

    def get_total(self, submission: Submission) -> int | None:
        run = self._run(submission)
        return None if run is None else run.total

    def get_passed(self, submission: Submission) -> bool | None:
        run = self._run(submission)
        return None if run is None else run.passed

    @extend_schema_field(INTERVAL_FIELD)
    def get_host_interval_ns(self, submission: Submission) -> list[int | None] | None:
        run = self._run(submission)
        return None if run is None else [run.host_start_ns, run.host_end_ns]

    @extend_schema_field(INTERVAL_FIELD)
    def get_trusted_interval_ns(self, submission: Submission) -> list[int | None] | None:
        run = self._run(submission)
        return None if run is None else [run.trusted_start_ns, run.trusted_end_ns]

    def get_supervisor_sha256(self, submission: Submission) -> str | None:
        run = self._run(submission)
        return None if run is None else sha256_digest(run.supervisor_sha256)

    @extend_schema_field(DigestsSerializer)
    def get_digests(self, submission: Submission) -> dict[str, str | None]:
        run = self._run(submission)
        data = {
            "source": sha256_digest(submission.source_sha256),
            "environment_image": submission.environment_image_digest or None,
            "submission_image": submission.image_digest or None,
            "output": None if run is None else sha256_digest(run.output_sha256),
        }
        return DigestsSerializer(data).data

    @extend_schema_field(AttemptSerializer)
    def get_attempt(self, submission: Submission) -> dict[str, bool]:
        deltas = {entry.delta for entry in submission.ledger.all()}
        return {
            "charged": AttemptLedger.CHARGE in deltas,
            "refunded": AttemptLedger.REFUND in deltas,
        }

    def get_runs(self, submission: Submission) -> int:
        return len(submission.runs.all())

    def get_disqualified(self, submission: Submission) -> bool:
        return submission.disqualified_at is not None

    def _standing(self, submission: Submission) -> QueueStanding | None:
        cache: dict[int, QueueStanding | None] = self.context.setdefault("_standings", {})
        if submission.pk not in cache:
            cache[submission.pk] = queue_standing(submission)
        return cache[submission.pk]

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_queue_position(self, submission: Submission) -> int | None:
        """Its place in the fair order of its hardware class while it waits (1: next)."""
        standing = self._standing(submission)
        return standing.position if standing else None

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_eta_seconds(self, submission: Submission) -> int | None:
        """About when its run starts, while it waits; null when no host of its class is
        online (or none has finished a run to time)."""
        standing = self._standing(submission)
        return standing.eta_seconds if standing else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_host(self, submission: Submission) -> str | None:
        """The scoring host of its latest run, once staging started."""
        return run_host(self._run(submission), latest_run(submission, Run.VERIFY), submission)

    @extend_schema_field(VerificationSerializer(allow_null=True))
    def get_verification(self, submission: Submission) -> dict[str, Any] | None:
        """The latest verification run of its scored run (null when none was needed):
        aggregates only, and which measurement it is (``run`` of ``of``)."""
        return verification_summary(verification_progress(submission.runs.all()))

    @extend_schema_field(ResourcesSerializer(allow_null=True))
    def get_resources(self, submission: Submission) -> dict[str, Any] | None:
        """The meter's readings of the scored run (null before it ran)."""
        run = self._run(submission)
        return resources_of(run.resources) if run is not None else None


@upload_route(archive="source")
class BenchmarkSubmissionsView(GenericAPIView[Submission]):
    """Your submissions and your teammates', newest first; POST an archive to upload one
    (charges an attempt of your team's allowance)."""

    serializer_class = SubmissionSerializer
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
        responses={200: SubmissionSerializer(many=True), **error_responses(400, 401, 404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(SubmissionSerializer(page, many=True).data)

    @extend_schema(
        operation_id="submissions_create",
        tags=["submissions"],
        request={"multipart/form-data": SubmissionCreateSerializer},
        responses={
            201: SubmissionSerializer,
            **error_responses(400, 401, 404, 409, 413, 415, 429),
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        # Before the body is read or an environment looked up (an estimation benchmark has none).
        timed_path_check(benchmark, "submission")
        upload_check(request)
        serializer = SubmissionCreateSerializer(data=request.data)
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
        return Response(SubmissionSerializer(submission).data, status=status.HTTP_201_CREATED)


class SubmissionDetailView(APIView):
    """One of your or your teammates' submissions: status, timeline, result, digests,
    attempt (staff: anyone's)."""

    @extend_schema(
        operation_id="submissions_retrieve",
        tags=["submissions"],
        responses={200: SubmissionSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, submission_id: int) -> Response:
        submission = own_submission(request, submission_id, staff_may_read=True, team_may_read=True)
        return Response(SubmissionSerializer(submission).data)


class SubmissionBuildLogView(RawAPIView):
    """The last ``tail`` lines of the submission build (``build.sh``) log (text/plain)."""

    @extend_schema(
        operation_id="submissions_build_log",
        tags=["submissions"],
        parameters=[TAIL_PARAMETER],
        responses={**TEXT_RESPONSE, **error_responses(400, 401, 404)},
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
        responses={**TEXT_RESPONSE, **error_responses(400, 401, 404)},
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
            **error_responses(400, 401, 403, 404),
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
