"""What several API resources share: the shapes (``iso``, ``OffsetDateTimeField``,
``UploadField``, the error body ``ErrorSerializer`` with ``error_responses``, timeline
events, a hardware class and its noise band), and the view helpers (lookups that answer
``not_found``, pagination, log tails, uploads). A shape one resource alone renders lives
in that resource's module."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from django.core.files.uploadedfile import UploadedFile
from django.core.paginator import Paginator as DjangoPaginator
from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema_field
from rest_framework import serializers
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from portal.campaigns.api_selectors import TimelineEvent
from portal.contests.models import Benchmark
from portal.contests.uploads import MAX_DOCKERFILE_BYTES
from portal.core import errors, storage
from portal.environments.models import Environment, EnvironmentEvent
from portal.hosts.selectors import NoiseBand
from portal.submissions.models import Submission, SubmissionEvent
from portal.teams.selectors import teammate_ids

# Shapes shared by several resources -------------------------------------------------


def iso(value: dt.datetime | None) -> str | None:
    """ISO 8601 with an explicit offset (UTC), or None."""
    return None if value is None else value.astimezone(dt.UTC).isoformat()


class OffsetDateTimeField(serializers.DateTimeField):
    """A datetime as ISO 8601 with ``+00:00`` (DRF would write ``Z``)."""

    def to_representation(self, value: dt.datetime) -> str | None:  # type: ignore[override]
        return iso(value)


@extend_schema_field(OpenApiTypes.BINARY)
class UploadField(serializers.FileField):
    """A multipart file part (the schema says ``format: binary``, so clients send a file)."""


class ErrorSerializer(serializers.Serializer[dict[str, str]]):
    code = serializers.CharField()
    detail = serializers.CharField()


def error_responses(*statuses: int) -> dict[int, Any]:
    """The error body for the given statuses, for the schema."""
    return dict.fromkeys(statuses, ErrorSerializer)


class TimelineEventSerializer(
    serializers.Serializer[EnvironmentEvent | SubmissionEvent | TimelineEvent]
):
    status = serializers.CharField()
    at = OffsetDateTimeField()
    note = serializers.CharField()


class CpuGateSerializer(serializers.Serializer[dict[str, Any]]):
    """A hardware class's CPU-idleness gate (``portal.contests.hardware.class_cpu_gate``)."""

    busy_cpus_max = serializers.FloatField(
        help_text="The most CPUs' worth of other work a host may show before a run."
    )
    default = serializers.BooleanField(help_text="Whether that is the platform's default.")
    noise_band = serializers.BooleanField(
        help_text="Strict: also no more than would slow a run on every CPU by the class's "
        "published noise band."
    )


class HardwareSerializer(serializers.Serializer[dict[str, Any]]):
    """The benchmark's hardware class, as its hosts give it to a scored run."""

    name = serializers.CharField()
    platform = serializers.CharField(allow_null=True, help_text="linux/amd64 or linux/arm64.")
    gpus = serializers.IntegerField(help_text="GPUs a scored container gets (0: none).")
    gpu_model = serializers.CharField(allow_null=True)
    gpu_driver = serializers.CharField(allow_null=True, help_text="The pinned driver version.")
    cuda = serializers.CharField(allow_null=True, help_text="The pinned CUDA version.")
    kernel = serializers.CharField(allow_null=True, help_text="The pinned kernel release.")
    engine = serializers.CharField(allow_null=True, help_text="The pinned Docker Engine version.")
    supervisor_sha256 = serializers.CharField(
        allow_null=True, help_text="SHA-256 of the pinned supervisor binary."
    )
    unpinned = serializers.ListField(
        child=serializers.CharField(),
        help_text="The pins a GPU class still lacks; its benchmark accepts no upload until "
        "this is empty.",
    )
    cpu_gate = CpuGateSerializer()


class NoiseBandSerializer(serializers.Serializer[NoiseBand]):
    """A hardware class's timing noise (``portal.hosts.selectors.noise_band``)."""

    hardware_class = serializers.CharField()
    percent = serializers.FloatField(
        help_text="Every repetition of the class's recent good calibrations fell within "
        "± this percentage of their common median."
    )
    runs = serializers.IntegerField(help_text="How many calibrations it is drawn from.")


# View helpers: lookups, pagination, log tails, uploads ------------------------------

TAIL_DEFAULT = 200
TAIL_MAX = 2000

TAIL_PARAMETER = OpenApiParameter(
    "tail",
    {"type": "integer", "minimum": 1, "maximum": TAIL_MAX, "default": TAIL_DEFAULT},
    OpenApiParameter.QUERY,
    description=f"How many last lines (1 to {TAIL_MAX}, default {TAIL_DEFAULT}).",
)
TEXT_RESPONSE = {(200, "text/plain"): OpenApiTypes.STR}
NOT_FOUND = error_responses(401, 404)


class IsStaff(BasePermission):
    """Staff only; to anyone else the endpoint does not exist (404 ``not_found``)."""

    message = "Not found."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return bool(request.user and request.user.is_staff)


class PagePagination(PageNumberPagination):
    """``?page=N`` (from 1): a page that is not a whole number is 400 ``invalid_parameter``,
    one past the end 404 ``not_found`` (DRF's default reads ``?page=`` as page 1 and
    ``?page=last`` as the last page; the schema promises an integer)."""

    last_page_strings = ()

    def get_page_number(self, request: Request, paginator: DjangoPaginator[Any]) -> int:
        raw = request.query_params.get(self.page_query_param)
        if raw is None:
            return 1
        if not PAGE_PATTERN.fullmatch(raw):
            raise errors.InvalidParameter("page must be a whole number from 1.")
        return int(raw)

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1}
        return parameters


class JsonErrorsNegotiation(BaseContentNegotiation):
    """For views that answer with plain text or bytes themselves: errors are always JSON.

    It also leaves ``?format=`` alone (DRF would read it as a renderer override).
    """

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        return next(iter(parsers), None)

    def select_renderer(
        self,
        request: Request,
        renderers: Iterable[BaseRenderer],
        format_suffix: str | None = None,
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, str(renderer.media_type)


class RawAPIView(APIView):
    """A view whose success is a plain Django response (text, file, stream)."""

    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonErrorsNegotiation


def caller_id(request: Request) -> int:
    """The signed-in caller's user id (views that call this require authentication)."""
    return int(request.user.pk or 0)


def get_benchmark(slug: str) -> Benchmark:
    benchmark = Benchmark.objects.filter(slug=slug).first()
    if benchmark is None:
        raise errors.NotFound("No such benchmark.")
    return benchmark


def staff_reads(request: Request) -> bool:
    """Whether the caller is staff, who may READ any entrant's environments and submissions
    (detail and log tails) for review; changing them goes through the staff actions only."""
    return bool(request.user and request.user.is_staff)


def own_environment(
    request: Request,
    environment_id: int,
    *,
    staff_may_read: bool = False,
    details: bool = True,
    team_may_read: bool = False,
) -> Environment:
    """The caller's environment; with ``staff_may_read``, any entrant's for a staff caller;
    with ``team_may_read``, a teammate's on the benchmark of their team. Anything else is
    ``not_found``. ``details=False`` skips what only the serializer reads (a log tail needs
    the row alone)."""
    environments = Environment.objects.filter(pk=environment_id)
    if details:
        environments = environments.select_related("benchmark", "owner").prefetch_related("events")
    environment = environments.first()
    if environment is None or not (
        environment.owner_id == caller_id(request)
        or (staff_may_read and staff_reads(request))
        or (
            team_may_read
            and environment.owner_id in teammate_ids(environment.benchmark_id, caller_id(request))
        )
    ):
        raise errors.NotFound("No such environment.")
    return environment


def submissions_with_details() -> QuerySet[Submission]:
    return Submission.objects.select_related("benchmark", "entrant").prefetch_related(
        "events", "ledger", "runs"
    )


def get_submission(submission_id: int) -> Submission:
    submission = submissions_with_details().filter(pk=submission_id).first()
    if submission is None:
        raise errors.NotFound("No such submission.")
    return submission


def own_submission(
    request: Request,
    submission_id: int,
    *,
    staff_may_read: bool = False,
    details: bool = True,
    team_may_read: bool = False,
) -> Submission:
    """The caller's submission; with ``staff_may_read``, any entrant's for a staff caller;
    with ``team_may_read``, a teammate's on the benchmark of their team (its feedback is
    the team's). Anything else is ``not_found``. ``details=False`` skips the prefetches
    only the serializer reads (a log tail needs the row alone)."""
    if details:
        submission = get_submission(submission_id)
    else:
        found = (
            Submission.objects.only("entrant_id", "benchmark_id").filter(pk=submission_id).first()
        )
        if found is None:
            raise errors.NotFound("No such submission.")
        submission = found
    caller = caller_id(request)
    if not (
        submission.entrant_id == caller
        or (staff_may_read and staff_reads(request))
        or (
            team_may_read and submission.entrant_id in teammate_ids(submission.benchmark_id, caller)
        )
    ):
        raise errors.NotFound("No such submission.")
    return submission


TAIL_PATTERN = re.compile(r"[0-9]{1,4}")
PAGE_PATTERN = re.compile(r"[0-9]{1,9}")


def tail_lines(request: Request) -> int:
    """``?tail=``: ASCII digits only (no sign, blank, space or other script's digits), 1 to 2000."""
    raw = request.query_params.get("tail", str(TAIL_DEFAULT))
    if not TAIL_PATTERN.fullmatch(raw) or not 1 <= int(raw) <= TAIL_MAX:
        raise errors.InvalidParameter(f"tail must be a whole number from 1 to {TAIL_MAX}.")
    return int(raw)


def text_response(text: str) -> HttpResponse:
    return HttpResponse(text, content_type="text/plain; charset=utf-8")


@contextlib.contextmanager
def upload_path(upload: UploadedFile) -> Iterator[Path]:
    """The upload's file on disk (settings stream every upload to disk; copy otherwise)."""
    temporary_path = getattr(upload, "temporary_file_path", None)
    if temporary_path is not None:
        yield Path(temporary_path())
        return
    with tempfile.NamedTemporaryFile(dir=storage.upload_tmp_dir()) as copy:
        upload.seek(0)
        shutil.copyfileobj(upload, copy)
        copy.flush()
        yield Path(copy.name)


def dockerfile_text(upload: UploadedFile) -> str:
    """The Dockerfile as text; an oversized one stays oversized for the service to refuse."""
    raw: bytes = upload.read(MAX_DOCKERFILE_BYTES + 1)
    if len(raw) > MAX_DOCKERFILE_BYTES:
        # Replacement never shortens the text, so the size check still sees it too big.
        return raw.decode("utf-8", errors="replace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise errors.InvalidParameter("The Dockerfile must be UTF-8 text.") from exc
