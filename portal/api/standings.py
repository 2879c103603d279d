"""Final standings (``/api/v1/benchmarks/<slug>/nominations/``, ``.../standings/``,
``.../final-rerun/``): the end of a contest: nominations (the entrant's own), the final
rerun, publishing and correcting final standings (staff, audited), and the published
standings with their exports (public); a metered-estimation phase's published standings
rank its entries by their final score instead of a time. Staff endpoints are
``not_found`` to others; staff without ``standings.publish_standings`` get 403
``permission_denied``.

Views and their serializers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.common import (
    IsStaff,
    OffsetDateTimeField,
    RawAPIView,
    error_responses,
    get_benchmark,
)
from portal.audit.services import Origin
from portal.contests.models import Benchmark
from portal.core import errors
from portal.estimation.standings import published_scores
from portal.standings import publishing, rerun
from portal.standings.models import Correction, FinalRerun
from portal.standings.nominations import NominationState, nominations_of, nominations_set
from portal.standings.prizes import review_states
from portal.standings.selectors import FINAL, Published, marked_rows, published


class NominationStateSerializer(serializers.Serializer[NominationState]):
    deadline = OffsetDateTimeField(help_text="First instant nominations are refused.")
    open = serializers.BooleanField(help_text="Whether nominations may still change.")
    team = serializers.CharField(help_text="Your team's name; empty when you are on your own.")
    nominated = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="The submission ids your team (or you, on your own) named, if any.",
    )
    set_by = serializers.CharField(
        help_text="The username of the member who named them; empty while the default applies."
    )
    set_at = OffsetDateTimeField(
        allow_null=True, help_text="When they were named; null while the default applies."
    )
    counted = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="The submission ids that count now (the nomination, else the two best).",
    )
    default = serializers.BooleanField(help_text="True while nothing is named: the two best count.")
    eligible = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="Your team's (or your) passing official submissions, best first: what may "
        "be nominated.",
    )


class NominationsUpdateSerializer(serializers.Serializer[dict[str, Any]]):
    submission_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        allow_empty=True,
        help_text="Up to two of your team's (or your) passing official submissions; [] "
        "restores the default.",
    )


class StandingRowSerializer(serializers.Serializer[dict[str, Any]]):
    rank = serializers.IntegerField()
    entrant = serializers.CharField()
    wall_time_ns = serializers.IntegerField(
        help_text="The median of the passing final runs (the best official run without a rerun)."
    )
    runs = serializers.IntegerField(help_text="Passing runs the time is the median of.")
    submission_id = serializers.IntegerField()
    tied = serializers.BooleanField(
        help_text="Within the class's noise band of a neighbour after extra runs: same rank."
    )
    review = serializers.CharField(
        allow_null=True,
        help_text="The submission's provenance review: ``cleared``, ``under_review``, or "
        "null when it was never reviewed (a prize position is published only once cleared).",
    )


class CorrectionSerializer(serializers.Serializer[Correction]):
    at = OffsetDateTimeField()
    reason = serializers.CharField()
    previous_digest = serializers.CharField()
    digest = serializers.CharField()


class StandingsSerializer(serializers.Serializer[dict[str, Any]]):
    benchmark = serializers.CharField()
    state = serializers.CharField(help_text="Always ``final`` here.")
    source = serializers.CharField(help_text="``final_rerun`` or ``board``.")  # type: ignore[assignment]
    published_at = OffsetDateTimeField()
    digest = serializers.CharField(
        help_text="sha256:<hex> of the canonical CSV (``standings.csv``, byte for byte)."
    )
    cohort = serializers.CharField(
        help_text="The cohort that decided them: ``final`` (private, fresh) or ``official`` "
        "(not fresh: the rerun had no final cohort, or the board was published)."
    )
    previous_digests = serializers.ListField(child=serializers.CharField())
    rows = StandingRowSerializer(many=True)
    corrections = CorrectionSerializer(many=True)


class EstimationStandingRowSerializer(serializers.Serializer[dict[str, Any]]):
    rank = serializers.IntegerField()
    team = serializers.CharField(help_text="The team's name; empty for an entrant on their own.")
    entrant = serializers.CharField(help_text="The username of whoever uploaded the entry.")
    entry_id = serializers.IntegerField()
    score = serializers.FloatField(
        help_text="The entry's mean score over the final suite (lower is better)."
    )
    review = serializers.CharField(
        allow_null=True,
        help_text="The entry's review before prizes: ``cleared``, ``under_review``, or null "
        "when it was never reviewed (a prize position is published only once cleared).",
    )


class EstimationStandingsSerializer(serializers.Serializer[dict[str, Any]]):
    benchmark = serializers.CharField()
    state = serializers.CharField(help_text="Always ``final`` here.")
    source = serializers.CharField(help_text="``estimation_final``.")  # type: ignore[assignment]
    published_at = OffsetDateTimeField()
    digest = serializers.CharField(
        help_text="sha256:<hex> of the canonical CSV (``standings.csv``, byte for byte)."
    )
    previous_digests = serializers.ListField(child=serializers.CharField())
    rows = EstimationStandingRowSerializer(many=True)
    corrections = CorrectionSerializer(many=True)


class FinalRerunSerializer(serializers.Serializer[dict[str, Any]]):
    cohort = serializers.CharField(help_text="``final`` or ``official``.")
    final_runs = serializers.IntegerField()
    extra_runs = serializers.IntegerField()
    started_at = OffsetDateTimeField()
    complete = serializers.BooleanField()
    pending_extra = serializers.ListField(child=serializers.IntegerField())
    dropped = serializers.DictField(child=serializers.CharField())
    rows = StandingRowSerializer(many=True)


class ReasonSerializer(serializers.Serializer[dict[str, Any]]):
    reason = serializers.CharField(min_length=1, help_text="Why (recorded in the audit trail).")


class FinalRerunStartSerializer(ReasonSerializer):
    confirm_official_cohort = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="Without a final cohort: the words 'rerun on the official cohort', to "
        "confirm a rerun on images that are not fresh (ignored with a final cohort).",
    )


TAGS = ["standings"]
STAFF_ERRORS = error_responses(400, 401, 403, 404, 409, 415)


class NominationsView(APIView):
    """Your nominated submissions for the final standings on a benchmark."""

    @extend_schema(
        operation_id="benchmarks_nominations_retrieve",
        tags=TAGS,
        responses={200: NominationStateSerializer, **error_responses(400, 401, 404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        state = nominations_of(get_benchmark(slug), request.user)
        return Response(NominationStateSerializer(state).data)

    @extend_schema(
        operation_id="benchmarks_nominations_update",
        tags=TAGS,
        request=NominationsUpdateSerializer,
        responses={200: NominationStateSerializer, **error_responses(400, 401, 404, 409, 415)},
    )
    def put(self, request: Request, slug: str) -> Response:
        serializer = NominationsUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        state = nominations_set(
            entrant=request.user,
            benchmark=get_benchmark(slug),
            submission_ids=serializer.validated_data["submission_ids"],
        )
        return Response(NominationStateSerializer(state).data)


def _published_or_404(benchmark: Benchmark) -> Published:
    found = published(benchmark)
    if found is None:
        raise errors.NotFound("No final standings are published for this benchmark yet.")
    return found


def _estimation_data(benchmark: Benchmark) -> dict[str, object]:
    found = published_scores(benchmark)
    if found is None:
        raise errors.NotFound("No final standings are published for this phase yet.")
    return {
        "benchmark": benchmark.slug,
        "state": FINAL,
        "source": found.standings.source,
        "published_at": found.standings.published_at,
        "digest": found.standings.digest,
        "previous_digests": [c.previous_digest for c in found.corrections],
        "rows": found.marked,
        "corrections": found.corrections,
    }


def _answer(benchmark: Benchmark) -> dict[str, Any]:
    """The published standings, serialized for the benchmark's kind (404 before)."""
    if benchmark.kind == Benchmark.ESTIMATION:
        return dict(EstimationStandingsSerializer(_estimation_data(benchmark)).data)
    return dict(StandingsSerializer(standings_data(benchmark, _published_or_404(benchmark))).data)


def _export(benchmark: Benchmark) -> tuple[str, str, str]:
    """The CSV export, its digest and the words of the cohort that decided (404 before)."""
    if benchmark.kind == Benchmark.ESTIMATION:
        scores = published_scores(benchmark)
        if scores is None:
            raise errors.NotFound("No final standings are published for this phase yet.")
        return scores.csv, scores.standings.digest, "final suite (private, held-out seeds)"
    found = _published_or_404(benchmark)
    return found.csv, found.standings.digest, found.cohort_words


STANDINGS = PolymorphicProxySerializer(
    component_name="PublishedStandings",
    serializers=[StandingsSerializer, EstimationStandingsSerializer],
    resource_type_field_name=None,
)


def standings_data(benchmark: Benchmark, found: Published) -> dict[str, object]:
    """The published standings as the API and the JSON export give them."""
    return {
        "benchmark": benchmark.slug,
        "state": FINAL,
        "source": found.standings.source,
        "published_at": found.standings.published_at,
        "digest": found.standings.digest,
        "cohort": found.cohort,
        "previous_digests": [c.previous_digest for c in found.corrections],
        "rows": found.marked,
        "corrections": found.corrections,
    }


class StandingsView(APIView):
    """The published final standings (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="benchmarks_standings_retrieve",
        tags=TAGS,
        responses={200: STANDINGS, **error_responses(404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        return Response(_answer(get_benchmark(slug)))


class StandingsCsvView(RawAPIView):
    """The canonical CSV of the published standings; its SHA-256 is the digest (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="benchmarks_standings_csv",
        tags=TAGS,
        responses={(200, "text/csv"): OpenApiTypes.STR, **error_responses(404)},
    )
    def get(self, request: Request, slug: str) -> HttpResponse:
        text, digest, cohort_words = _export(get_benchmark(slug))
        response = HttpResponse(text.encode(), content_type="text/csv; charset=utf-8")
        response["X-Podium-Digest"] = digest
        response["X-Podium-Cohort"] = cohort_words  # never in the rows: the digest
        response["Content-Disposition"] = f'attachment; filename="{slug}-standings.csv"'
        return response


class StandingsJsonView(RawAPIView):
    """The published standings as a JSON file with their digest (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="benchmarks_standings_json",
        tags=TAGS,
        responses={(200, "application/json"): STANDINGS, **error_responses(404)},
    )
    def get(self, request: Request, slug: str) -> HttpResponse:
        body = _answer(get_benchmark(slug))
        response = HttpResponse(
            json.dumps(body, indent=2, sort_keys=True) + "\n", content_type="application/json"
        )
        response["X-Podium-Digest"] = body["digest"]
        response["Content-Disposition"] = f'attachment; filename="{slug}-standings.json"'
        return response


class _StandingsAction(APIView):
    """Staff: one audited step on the published standings, with a reason; answers with the
    standings as they now are."""

    permission_classes = [IsStaff]
    step: Callable[..., object]  # publishing.standings_publish or standings_correct
    answer_status = 200

    def post(self, request: Request, slug: str) -> Response:
        serializer = ReasonSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        benchmark = get_benchmark(slug)
        type(self).step(
            benchmark=benchmark,
            actor=request.user,
            reason=serializer.validated_data["reason"],
            origin=Origin.of(request),
        )
        return Response(_answer(benchmark), status=self.answer_status)


@extend_schema_view(
    post=extend_schema(
        operation_id="benchmarks_standings_publish",
        tags=TAGS,
        request=ReasonSerializer,
        responses={201: STANDINGS, **STAFF_ERRORS},
    )
)
class StandingsPublishView(_StandingsAction):
    """Staff: publish the final standings (audited, with a reason)."""

    step = staticmethod(publishing.standings_publish)
    answer_status = 201


@extend_schema_view(
    post=extend_schema(
        operation_id="benchmarks_standings_correct",
        tags=TAGS,
        request=ReasonSerializer,
        responses={200: STANDINGS, **STAFF_ERRORS},
    )
)
class StandingsCorrectView(_StandingsAction):
    """Staff: correct the published standings (audited, with a reason; shown on the page)."""

    step = staticmethod(publishing.standings_correct)


def _rerun_data(benchmark: Benchmark) -> dict[str, object]:
    final = FinalRerun.objects.select_related("cohort").filter(benchmark=benchmark).first()
    decision = rerun.final_rerun_decision(benchmark)
    if final is None or decision is None:
        raise errors.NotFound("The final rerun of this benchmark has not started.")
    return {
        "cohort": final.cohort.kind,
        "final_runs": final.final_runs,
        "extra_runs": final.extra_runs,
        "started_at": final.started_at,
        "complete": decision.complete,
        "pending_extra": decision.extra_runs,
        "dropped": {str(k): v for k, v in decision.dropped.items()},
        "rows": marked_rows(
            decision.rows, review_states([row.submission_id for row in decision.rows])
        ),
    }


class FinalRerunView(APIView):
    """Staff: the final rerun's progress (GET), or start it (POST, audited, with a reason)."""

    permission_classes = [IsStaff]

    @extend_schema(
        operation_id="benchmarks_final_rerun_retrieve",
        tags=TAGS,
        responses={200: FinalRerunSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        return Response(FinalRerunSerializer(_rerun_data(get_benchmark(slug))).data)

    @extend_schema(
        operation_id="benchmarks_final_rerun_start",
        tags=TAGS,
        request=FinalRerunStartSerializer,
        responses={201: FinalRerunSerializer, **STAFF_ERRORS},
    )
    def post(self, request: Request, slug: str) -> Response:
        serializer = FinalRerunStartSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        benchmark = get_benchmark(slug)
        rerun.final_rerun_start(
            benchmark=benchmark,
            actor=request.user,
            reason=serializer.validated_data["reason"],
            confirm_official_cohort=serializer.validated_data["confirm_official_cohort"],
            origin=Origin.of(request),
        )
        return Response(FinalRerunSerializer(_rerun_data(benchmark)).data, status=201)
