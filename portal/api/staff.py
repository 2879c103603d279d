"""Staff actions (``/api/v1/submissions/<id>/cancel/``, ``.../disqualify/``,
``.../rescore/``, ``/api/v1/audit/``): staff only: cancel, disqualify, rescore, audit
export; to others they are ``not_found``.

Each submission action also needs its permission (``staff.CANCEL``, ...): staff without
it get 403 ``permission_denied`` and nothing changes.

Views and their serializers.
"""

from __future__ import annotations

from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.common import IsStaff, RawAPIView, error_responses, get_submission
from portal.api.submissions import SubmissionSerializer
from portal.audit import export
from portal.audit.services import Origin
from portal.core import errors
from portal.submissions import staff


class StaffReasonSerializer(serializers.Serializer[dict[str, Any]]):
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class DisqualifySerializer(serializers.Serializer[dict[str, Any]]):
    reason = serializers.CharField(
        min_length=1, help_text="Why the submission is disqualified (recorded)."
    )


ACTION_ERRORS = error_responses(400, 401, 403, 404, 415)


class HasStaffPermission(BasePermission):
    """The view's ``staff_permission``, checked after :class:`IsStaff`: staff without it
    get 403 ``permission_denied`` (they know the endpoint exists; entrants still do not)."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        permission: str = getattr(view, "staff_permission", "")  # set on each view class
        errors.staff_permission_check(request.user, permission)
        return True


class SubmissionCancelView(APIView):
    """Staff: cancel an unfinished submission and refund its attempt."""

    permission_classes = [IsStaff, HasStaffPermission]
    staff_permission = staff.CANCEL

    @extend_schema(
        operation_id="submissions_cancel",
        tags=["submissions"],
        request=StaffReasonSerializer,
        responses={200: SubmissionSerializer, **ACTION_ERRORS},
    )
    def post(self, request: Request, submission_id: int) -> Response:
        serializer = StaffReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        staff.submission_cancel(
            submission=get_submission(submission_id),
            actor=request.user,
            reason=serializer.validated_data["reason"],
            origin=Origin.of(request),
        )
        return Response(SubmissionSerializer(get_submission(submission_id)).data)


class SubmissionDisqualifyView(APIView):
    """Staff: disqualify a submission (with a reason); its runs leave the leaderboard."""

    permission_classes = [IsStaff, HasStaffPermission]
    staff_permission = staff.DISQUALIFY

    @extend_schema(
        operation_id="submissions_disqualify",
        tags=["submissions"],
        request=DisqualifySerializer,
        responses={200: SubmissionSerializer, **ACTION_ERRORS},
    )
    def post(self, request: Request, submission_id: int) -> Response:
        serializer = DisqualifySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        staff.submission_disqualify(
            submission=get_submission(submission_id),
            actor=request.user,
            reason=serializer.validated_data["reason"],
            origin=Origin.of(request),
        )
        return Response(SubmissionSerializer(get_submission(submission_id)).data)


class SubmissionRescoreView(APIView):
    """Staff: queue a new scored run of a finished submission."""

    permission_classes = [IsStaff, HasStaffPermission]
    staff_permission = staff.RESCORE

    @extend_schema(
        operation_id="submissions_rescore",
        tags=["submissions"],
        request=StaffReasonSerializer,
        responses={202: SubmissionSerializer, **ACTION_ERRORS},
    )
    def post(self, request: Request, submission_id: int) -> Response:
        serializer = StaffReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        staff.submission_rescore(
            submission=get_submission(submission_id),
            actor=request.user,
            reason=serializer.validated_data["reason"],
            origin=Origin.of(request),
        )
        return Response(
            SubmissionSerializer(get_submission(submission_id)).data,
            status=status.HTTP_202_ACCEPTED,
        )


AUDIT_PARAMETERS = [
    OpenApiParameter("format", str, OpenApiParameter.QUERY, enum=list(export.FORMATS)),
    OpenApiParameter(
        "since", str, OpenApiParameter.QUERY, description="ISO 8601 date or date-time (inclusive)."
    ),
    OpenApiParameter(
        "until",
        str,
        OpenApiParameter.QUERY,
        description="ISO 8601 date-time (exclusive), or a date (that whole day included).",
    ),
    OpenApiParameter(
        "actor",
        str,
        OpenApiParameter.QUERY,
        description="Usernames, comma-separated.",
    ),
    OpenApiParameter(
        "action",
        str,
        OpenApiParameter.QUERY,
        description="Actions, comma-separated.",
    ),
]


class AuditExportView(RawAPIView):
    """Staff: the audit trail, oldest first, as CSV or JSON lines (the export is audited).

    Needs ``audit.export_auditevent`` besides a staff account: staff without it get 403
    ``permission_denied`` (see ``portal.audit.export``)."""

    permission_classes = [IsStaff]

    @extend_schema(
        operation_id="audit_export",
        tags=["audit"],
        parameters=AUDIT_PARAMETERS,
        responses={
            (200, "text/csv"): OpenApiTypes.STR,
            (200, "application/x-ndjson"): OpenApiTypes.STR,
            **ACTION_ERRORS,
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        export.audit_export_check(request.user)  # before the filter is even read
        fmt = request.query_params.get("format", "csv")
        lines = export.audit_export(
            fmt=fmt,
            wanted=export.audit_filter_parse(request.query_params),
            actor=request.user,
            origin=Origin.of(request),
        )
        response = StreamingHttpResponse(lines, content_type=export.FORMATS[fmt])
        response["Content-Disposition"] = f'attachment; filename="podium-audit.{fmt}"'
        return response
