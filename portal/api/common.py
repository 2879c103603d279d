"""Shared pieces of the API views: lookups that answer ``not_found``, log tails, uploads."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from django.core.files.uploadedfile import UploadedFile
from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from portal import errors, storage
from portal.api import serializers as s
from portal.contests.models import Benchmark
from portal.environments.models import Environment
from portal.environments.services import MAX_DOCKERFILE_BYTES
from portal.submissions.models import Submission

TAIL_DEFAULT = 200
TAIL_MAX = 2000

TAIL_PARAMETER = OpenApiParameter(
    "tail",
    int,
    OpenApiParameter.QUERY,
    description=f"How many last lines (1 to {TAIL_MAX}, default {TAIL_DEFAULT}).",
)
TEXT_RESPONSE = {(200, "text/plain"): OpenApiTypes.STR}
NOT_FOUND = s.error_responses(401, 404)


class IsStaff(BasePermission):
    """Staff only; to anyone else the endpoint does not exist (404 ``not_found``)."""

    message = "Not found."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return bool(request.user and request.user.is_staff)


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


def own_environment(request: Request, environment_id: int) -> Environment:
    environment = (
        Environment.objects.select_related("benchmark")
        .prefetch_related("events")
        .filter(pk=environment_id, owner_id=caller_id(request))
        .first()
    )
    if environment is None:
        raise errors.NotFound("No such environment.")
    return environment


def submissions_with_details() -> QuerySet[Submission]:
    return Submission.objects.select_related("benchmark").prefetch_related(
        "events", "ledger", "runs"
    )


def get_submission(submission_id: int) -> Submission:
    submission = submissions_with_details().filter(pk=submission_id).first()
    if submission is None:
        raise errors.NotFound("No such submission.")
    return submission


def own_submission(request: Request, submission_id: int) -> Submission:
    submission = get_submission(submission_id)
    if submission.entrant_id != caller_id(request):
        raise errors.NotFound("No such submission.")
    return submission


def tail_lines(request: Request) -> int:
    raw = request.query_params.get("tail", str(TAIL_DEFAULT)).strip()
    if not raw.isdigit() or not 1 <= int(raw) <= TAIL_MAX:
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
    raw = upload.read(MAX_DOCKERFILE_BYTES + 1)
    if len(raw) > MAX_DOCKERFILE_BYTES:
        # Replacement never shortens the text, so the size check still sees it too big.
        return raw.decode("utf-8", errors="replace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise errors.InvalidParameter("The Dockerfile must be UTF-8 text.") from exc


def remote_addr(request: Request) -> str:
    return str(request.META.get("REMOTE_ADDR", ""))
