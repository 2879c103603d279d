"""Write-ups (``/api/v1/submissions/<id>/writeup/``): an entrant's PDF about one of
their graded official submissions (one per entrant per benchmark). The entrant uploads,
replaces, publishes and removes it; staff with ``standings.view_writeup`` read it (a
private one only with a reason, audited); everyone reads a public one. Anyone else's
write-up, and a private one, is ``not_found``.

Views and their serializers.
"""

from __future__ import annotations

from typing import Any

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from portal.api.common import OffsetDateTimeField, RawAPIView, UploadField, error_responses
from portal.audit.services import Origin
from portal.contests.uploads import document_route, upload_check
from portal.core.throttles import PostRateThrottle
from portal.standings import writeups
from portal.standings.models import WriteUp


class WriteUpSerializer(serializers.Serializer[Any]):
    submission_id = serializers.IntegerField()
    benchmark = serializers.CharField(source="benchmark.slug")
    entrant = serializers.CharField(source="entrant.username")
    file_name = serializers.CharField()
    size_bytes = serializers.IntegerField()
    sha256 = serializers.CharField()
    public = serializers.BooleanField()
    uploaded_at = OffsetDateTimeField()


class WriteUpUploadSerializer(serializers.Serializer[dict[str, Any]]):
    writeup = UploadField(help_text="The write-up, a PDF of at most PODIUM_WRITEUP_MAX_BYTES.")
    public = serializers.BooleanField(
        default=False, help_text="Whether everyone may read it (default: staff and you only)."
    )


class WriteUpPublicSerializer(serializers.Serializer[dict[str, Any]]):
    public = serializers.BooleanField()


TAGS = ["submissions"]
REASON = OpenApiParameter(
    "reason",
    str,
    OpenApiParameter.QUERY,
    description="Staff only, required to read a write-up that is not public (audited).",
)


class PutRateThrottle(PostRateThrottle):
    """The ``uploads`` allowance on PUT, which uploads here (``PostRateThrottle`` counts
    POST only); the same counter as the other uploads, web and API."""

    def allow_request(self, request: Request, view: APIView) -> bool:
        if request.method != "PUT":
            return True
        return ScopedRateThrottle.allow_request(self, request, view)


def _data(writeup: WriteUp) -> dict[str, object]:
    return dict(WriteUpSerializer(writeup).data)


@document_route(field="writeup", label="write-up", setting="PODIUM_WRITEUP_MAX_BYTES")
class WriteUpView(APIView):
    """Your write-up of this submission: read, upload or replace (PUT), publish (PATCH),
    remove (DELETE). Staff and, once it is public, every signed-in caller may read it."""

    parser_classes = [MultiPartParser, FormParser, JSONParser]
    throttle_scope = "uploads"
    throttle_classes = [PutRateThrottle]

    @extend_schema(
        operation_id="submissions_writeup_retrieve",
        tags=TAGS,
        responses={200: WriteUpSerializer, **error_responses(403, 404)},
    )
    def get(self, request: Request, submission_id: int) -> Response:
        writeup = writeups.writeup_for_reader(submission_id=submission_id, reader=request.user)
        return Response(_data(writeup))

    @extend_schema(
        operation_id="submissions_writeup_update",
        tags=TAGS,
        request={"multipart/form-data": WriteUpUploadSerializer},
        responses={200: WriteUpSerializer, **error_responses(400, 401, 404, 413, 415, 429)},
    )
    def put(self, request: Request, submission_id: int) -> Response:
        writeups.owned_submission(request.user, submission_id)  # else not_found, first
        upload_check(request)
        serializer = WriteUpUploadSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        upload = serializer.validated_data["writeup"]
        writeup = writeups.writeup_put(
            entrant=request.user,
            submission_id=submission_id,
            upload=upload,
            file_name=upload.name or "write-up.pdf",
            public=serializer.validated_data["public"],
        )
        return Response(_data(writeup))

    @extend_schema(
        operation_id="submissions_writeup_partial_update",
        tags=TAGS,
        request=WriteUpPublicSerializer,
        responses={200: WriteUpSerializer, **error_responses(400, 401, 404)},
    )
    def patch(self, request: Request, submission_id: int) -> Response:
        writeups.owned_submission(request.user, submission_id)  # else not_found, first
        serializer = WriteUpPublicSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        writeup = writeups.writeup_publish(
            entrant=request.user,
            submission_id=submission_id,
            public=serializer.validated_data["public"],
        )
        return Response(_data(writeup))

    @extend_schema(
        operation_id="submissions_writeup_destroy",
        tags=TAGS,
        responses={204: None, **error_responses(401, 404)},
    )
    def delete(self, request: Request, submission_id: int) -> Response:
        writeups.writeup_delete(entrant=request.user, submission_id=submission_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WriteUpDownloadView(RawAPIView):
    """The write-up's PDF: to its entrant, to every signed-in caller once public, to staff
    (audited, with a reason, when it is not public). Without a token, a public write-up is
    read from its link on the benchmark page."""

    @extend_schema(
        operation_id="submissions_writeup_download",
        tags=TAGS,
        parameters=[REASON],
        responses={
            (200, "application/pdf"): OpenApiTypes.BINARY,
            **error_responses(400, 403, 404),
        },
    )
    def get(self, request: Request, submission_id: int) -> FileResponse:
        writeup = writeups.writeup_for_reader(
            submission_id=submission_id,
            reader=request.user,
            reason=request.query_params.get("reason", ""),
            origin=Origin.of(request),
            reading=True,
        )
        return writeups.writeup_response(writeup)
