"""Provenance review (``/api/v1/submissions/<id>/review/``): its entrant reads a
submission's review and gives the provenance statement; staff read it with the image's
artifacts and decide it (``decide_review``).

Views and their serializers.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.common import (
    IsStaff,
    OffsetDateTimeField,
    error_responses,
    own_submission,
    staff_reads,
)
from portal.api.staff import ACTION_ERRORS, HasStaffPermission
from portal.audit.services import Origin
from portal.core import errors
from portal.submissions import review, staff
from portal.submissions.models import ProvenanceReview, Submission


class ReviewSerializer(serializers.Serializer[Any]):
    """A submission's provenance review as its entrant sees it (staff also see the image's
    artifacts as the worker listed them)."""

    status = serializers.ChoiceField(choices=["under_review", "cleared", "disqualified"])
    opened_at = OffsetDateTimeField()
    opened_because = serializers.CharField()
    statement = serializers.CharField(allow_blank=True)
    statement_at = OffsetDateTimeField(allow_null=True)
    decided_at = OffsetDateTimeField(allow_null=True)
    decision_reason = serializers.CharField(allow_blank=True)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = dict(super().to_representation(instance))
        if self.context.get("staff"):
            data["artifacts"] = instance.artifacts
        return data


class ReviewStatementSerializer(serializers.Serializer[dict[str, Any]]):
    statement = serializers.CharField(
        allow_blank=True,
        help_text="The data, the checkpoints with their sources and SHA-256 hashes, and the "
        "training code behind the submission (at most 20,000 characters).",
    )


class ReviewDecisionSerializer(serializers.Serializer[dict[str, Any]]):
    decision = serializers.ChoiceField(choices=["cleared", "disqualified"])
    reason = serializers.CharField(min_length=1, help_text="Why (recorded, shown to the entrant).")


def _review_of(submission: Submission) -> ProvenanceReview:
    found = ProvenanceReview.objects.filter(submission=submission).first()
    if found is None:
        raise errors.NotFound("This submission is not under review.")
    return found


class SubmissionReviewView(APIView):
    """Your submission's provenance review (404 when it has none); PUT your statement."""

    @extend_schema(
        operation_id="submissions_review_retrieve",
        tags=["submissions"],
        responses={200: ReviewSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, submission_id: int) -> Response:
        submission = own_submission(request, submission_id, staff_may_read=True, details=False)
        context = {"staff": staff_reads(request)}
        return Response(ReviewSerializer(_review_of(submission), context=context).data)

    @extend_schema(
        operation_id="submissions_review_statement",
        tags=["submissions"],
        request=ReviewStatementSerializer,
        responses={200: ReviewSerializer, **error_responses(400, 401, 404, 415)},
    )
    def put(self, request: Request, submission_id: int) -> Response:
        submission = own_submission(request, submission_id, details=False)
        serializer = ReviewStatementSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        found = review.review_statement(
            submission=submission,
            entrant=request.user,
            text=serializer.validated_data["statement"],
        )
        return Response(ReviewSerializer(found).data)


class SubmissionReviewDecideView(APIView):
    """Staff: clear a submission under review, or disqualify it, with a reason."""

    permission_classes = [IsStaff, HasStaffPermission]
    staff_permission = staff.DECIDE_REVIEW

    @extend_schema(
        operation_id="submissions_review_decide",
        tags=["submissions"],
        request=ReviewDecisionSerializer,
        responses={200: ReviewSerializer, **ACTION_ERRORS},
    )
    def post(self, request: Request, submission_id: int) -> Response:
        serializer = ReviewDecisionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        submission = Submission.objects.filter(pk=submission_id).first()
        if submission is None:
            raise errors.NotFound("No such submission.")
        decided = review.review_decide(
            review=_review_of(submission),
            actor=request.user,
            decision=serializer.validated_data["decision"],
            reason=serializer.validated_data["reason"],
            origin=Origin.of(request),
        )
        return Response(ReviewSerializer(decided, context={"staff": True}).data)
