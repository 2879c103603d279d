"""Metered estimation (``/api/v1/benchmarks/<slug>/estimation/``,
``/api/v1/estimation/entries/<id>/``; docs/api.md, "Metered estimation"): a phase's rules
and the caller's allowance, entries (upload, list, read, nominate), the board, the final
rerun's standings and the public suite's download. Views and their serializers.

An estimation phase is a benchmark of kind ``estimation``; under any other benchmark these
routes answer ``not_found``. The withheld half of the phase suite (its score and its
per-MLP rows) is shown to nobody before the close.
"""

from __future__ import annotations

import datetime as dt
import math
from importlib import metadata
from typing import Any

from django.core.files.uploadedfile import UploadedFile
from django.http import FileResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework import serializers, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import downloads
from portal.api.common import (
    NOT_FOUND,
    OffsetDateTimeField,
    RawAPIView,
    UploadField,
    caller_id,
    error_responses,
    get_benchmark,
    staff_reads,
    upload_path,
)
from portal.contests.models import Benchmark
from portal.contests.uploads import upload_check, upload_route
from portal.core import errors
from portal.core.throttles import PostRateThrottle
from portal.estimation import selectors, services
from portal.estimation.models import Entry, FinalScore, PhaseRules, Suite
from portal.estimation.selectors import DISQUALIFIED
from portal.teams.selectors import identity_of

TAGS = ["estimation"]
# The grader's own packages, whose versions every entry is graded with.
PINNED = ("whestbench", "flopscope")


def whestbench_cap() -> int:
    """whestbench's cap on a packaged estimator (``whestbench.limits``), read lazily: the
    package takes seconds to import."""
    from whestbench import limits

    return int(limits.MAX_SUBMISSION_BYTES)


def finite(value: float | None) -> float | None:
    """A figure as JSON can carry it: ``None`` for a missing or non-finite one."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def pinned_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PINNED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def estimation_phase(slug: str) -> tuple[Benchmark, PhaseRules]:
    """The benchmark and its phase rules; ``not_found`` for an unknown benchmark or one of
    another kind."""
    benchmark = get_benchmark(slug)
    return benchmark, services.phase_rules(benchmark)


def is_closed(benchmark: Benchmark, now: dt.datetime) -> bool:
    return now >= benchmark.closes_at


# The phase: rules, allowance, suites ------------------------------------------------------


class EstimationPhaseRulesSerializer(serializers.Serializer[dict[str, Any]]):
    width = serializers.IntegerField(help_text="MLP width n (neurons per layer).")
    depth = serializers.IntegerField(help_text="Hidden layers L (weight matrices).")
    flop_budget = serializers.IntegerField(help_text="The FLOP budget B per MLP.")
    residual_rule = serializers.ChoiceField(
        choices=[PhaseRules.CAPPED, PhaseRules.PRICED],
        help_text="capped: residual time over the cap fails the MLP; priced: residual time "
        "is charged at lambda FLOPs per second.",
    )
    residual_rule_words = serializers.CharField(help_text="The rule in words.")
    residual_cap_ms = serializers.IntegerField(
        allow_null=True,
        help_text="Under the capped rule: the residual time per MLP above "
        "which it fails (null under the priced rule).",
    )
    lambda_flops_per_second = serializers.FloatField(
        help_text="FLOPs charged per second of residual time: the price under the priced "
        "rule; under the capped rule, only what the compute ratio values residual time at."
    )
    wall_cap_s = serializers.IntegerField(help_text="The hard wall-clock cap per MLP.")
    entrant_cores = serializers.IntegerField(help_text="Physical cores the estimator runs on.")
    memory_bytes = serializers.IntegerField(help_text="The estimator's memory limit.")
    pids_limit = serializers.IntegerField(
        help_text="The most processes and threads the estimator's container may have."
    )
    attempts_per_day = serializers.IntegerField(help_text="Entries per team per attempt day.")
    attempt_timezone = serializers.CharField(help_text="The attempt day's time zone.")
    public_mlps = serializers.IntegerField(help_text="Phase-suite MLPs on the live board.")
    withheld_mlps = serializers.IntegerField(help_text="Phase-suite MLPs shown after the close.")
    final_mlps = serializers.IntegerField(help_text="MLPs of the final suite (the rerun).")
    local_mlps = serializers.IntegerField(help_text="MLPs of the downloadable public suite.")
    reference_samples = serializers.IntegerField(
        help_text="Monte Carlo samples per MLP of the reference."
    )
    nominations_max = serializers.IntegerField(
        help_text="Entries per team the final rerun scores (nominated, else the best)."
    )
    max_archive_bytes = serializers.IntegerField(
        help_text="The largest estimator archive accepted."
    )
    versions = serializers.DictField(
        child=serializers.CharField(allow_null=True),
        help_text="The grader's pinned packages: {whestbench, flopscope} versions.",
    )
    summary = serializers.ListField(
        child=serializers.CharField(), help_text="Every rule above, one sentence each."
    )


class EstimationQuotaSerializer(serializers.Serializer[dict[str, Any]]):
    attempts_per_day = serializers.IntegerField(source="per_day")
    used_today = serializers.IntegerField()
    remaining_today = serializers.IntegerField()
    resets_at = OffsetDateTimeField()
    timezone = serializers.CharField()


class EstimationSuiteStatusSerializer(serializers.Serializer[Suite]):
    role = serializers.ChoiceField(choices=Suite.ROLES)
    status = serializers.ChoiceField(choices=Suite.STATUSES)
    n_mlps = serializers.IntegerField()
    progress_done = serializers.IntegerField()
    progress_total = serializers.IntegerField()
    finished_at = OffsetDateTimeField(allow_null=True)


class EstimationPhaseSerializer(serializers.Serializer[dict[str, Any]]):
    benchmark = serializers.CharField(help_text="The phase's slug.")
    status = serializers.ChoiceField(choices=["upcoming", "open", "closed"])
    opens_at = OffsetDateTimeField()
    closes_at = OffsetDateTimeField()
    rules = EstimationPhaseRulesSerializer()
    quota = EstimationQuotaSerializer()
    suites = EstimationSuiteStatusSerializer(many=True)


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def rules_data(benchmark: Benchmark, phase: PhaseRules) -> dict[str, Any]:
    capped = phase.residual_rule == PhaseRules.CAPPED
    cap = min(benchmark.max_upload_bytes, whestbench_cap())
    versions = pinned_versions()
    lam = f"{phase.lambda_flops_per_second:.3g}"
    residual = (
        f"Residual time (wall time outside flopscope's metered operations) above "
        f"{phase.residual_cap_ms} ms on an MLP fails that MLP; compute is the FLOPs alone."
        if capped
        else f"Residual time (wall time outside flopscope's metered operations) is charged "
        f"at {lam} FLOPs per second: compute is FLOPs plus {lam} times the residual seconds."
    )
    summary = [
        f"Each MLP is {phase.width} wide with {phase.depth} hidden layers.",
        f"Each MLP's budget is {phase.flop_budget:,} FLOPs.",
        residual,
        f"The compute ratio values residual time at {lam} FLOPs per second.",
        f"An MLP that takes longer than {phase.wall_cap_s} s of wall time falls back to the "
        "zero prediction.",
        f"The estimator runs on {_count(phase.entrant_cores, 'physical core')} with "
        f"{benchmark.run_memory_bytes:,} bytes of memory.",
        f"Each team may submit {_count(benchmark.attempts_per_day, 'entry')} a day; days "
        f"start at midnight in {benchmark.attempt_timezone}.",
        f"The phase suite has {_count(phase.public_mlps, 'public MLP')} (the live board) "
        f"and {_count(phase.withheld_mlps, 'withheld MLP')} (shown after the close).",
        f"The final rerun scores {_count(phase.nominations_max, 'entry')} per team (its "
        f"nominated ones, else its best) on {_count(phase.final_mlps, 'fresh MLP')}.",
        f"The public suite for local runs has {_count(phase.local_mlps, 'MLP')}; each "
        f"reference is a mean of {phase.reference_samples:,} Monte Carlo samples.",
        f"An estimator archive may be at most {cap:,} bytes.",
        "Entries are graded with "
        + ", ".join(f"{name} {version or 'unknown'}" for name, version in versions.items())
        + ".",
    ]
    return {
        "width": phase.width,
        "depth": phase.depth,
        "flop_budget": phase.flop_budget,
        "residual_rule": phase.residual_rule,
        "residual_rule_words": phase.get_residual_rule_display(),
        "residual_cap_ms": phase.residual_cap_ms if capped else None,
        "lambda_flops_per_second": phase.lambda_flops_per_second,
        "wall_cap_s": phase.wall_cap_s,
        "entrant_cores": phase.entrant_cores,
        "memory_bytes": benchmark.run_memory_bytes,
        "pids_limit": benchmark.run_pids_limit,
        "attempts_per_day": benchmark.attempts_per_day,
        "attempt_timezone": benchmark.attempt_timezone,
        "public_mlps": phase.public_mlps,
        "withheld_mlps": phase.withheld_mlps,
        "final_mlps": phase.final_mlps,
        "local_mlps": phase.local_mlps,
        "reference_samples": phase.reference_samples,
        "nominations_max": phase.nominations_max,
        "max_archive_bytes": cap,
        "versions": versions,
        "summary": summary,
    }


class PhaseView(APIView):
    """The phase's rules, your team's allowance today and each suite's status."""

    @extend_schema(
        operation_id="estimation_phase",
        tags=TAGS,
        responses={200: EstimationPhaseSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, slug: str) -> Response:
        benchmark, phase = estimation_phase(slug)
        now = timezone.now()
        data = {
            "benchmark": benchmark.slug,
            "status": benchmark.status_at(now),
            "opens_at": benchmark.opens_at,
            "closes_at": benchmark.closes_at,
            "rules": rules_data(benchmark, phase),
            "quota": services.quota(benchmark, caller_id(request), now),
            "suites": list(Suite.objects.filter(benchmark=benchmark).order_by("role")),
        }
        return Response(EstimationPhaseSerializer(data).data)


# Entries --------------------------------------------------------------------------------


class EstimationMlpRowSerializer(serializers.Serializer[dict[str, Any]]):
    index = serializers.IntegerField()
    name = serializers.CharField()
    final_layer_mse = serializers.FloatField(allow_null=True)
    score = serializers.FloatField(allow_null=True, help_text="whestbench's per-MLP score.")
    flops_used = serializers.IntegerField()
    residual_wall_time_s = serializers.FloatField()
    wall_time_s = serializers.FloatField()
    effective_compute = serializers.FloatField()
    fallback = serializers.BooleanField(help_text="The MLP got the zero-prediction fallback.")
    reason = serializers.CharField(help_text="Why it fell back ('' when it did not).")


class EstimationEntrySerializer(serializers.Serializer[dict[str, Any]]):
    """An entry as its team sees it in a list."""

    id = serializers.IntegerField()
    benchmark = serializers.CharField(help_text="The phase's slug.")
    entrant = serializers.CharField(help_text="Who uploaded it.")
    team = serializers.CharField(
        allow_null=True, help_text="The team it was charged to (null: on their own)."
    )
    status = serializers.ChoiceField(choices=Entry.STATUSES)
    submitted_at = OffsetDateTimeField()
    started_at = OffsetDateTimeField(allow_null=True, help_text="When grading began.")
    graded_at = OffsetDateTimeField(allow_null=True)
    archive_name = serializers.CharField()
    archive_bytes = serializers.IntegerField()
    archive_sha256 = serializers.CharField(help_text="sha256:<hex> of the archive.")
    estimator_class = serializers.CharField(help_text="The manifest's module.Class.")
    failure_reason = serializers.CharField(help_text="Why it could not be graded ('' if none).")
    public_score = serializers.FloatField(
        allow_null=True, help_text="The mean score of the public MLPs (lower is better)."
    )
    withheld_score = serializers.FloatField(
        allow_null=True, help_text="The mean score of the withheld MLPs: null before the close."
    )
    fallbacks = serializers.IntegerField(
        allow_null=True,
        help_text="MLPs that got the zero-prediction fallback: the public ones before the "
        "close, every one after; null until graded.",
    )
    nominated = serializers.BooleanField(help_text="Nominated for the final rerun.")
    refunded = serializers.BooleanField(help_text="Not counted against the day's allowance.")


class EstimationEntryDetailSerializer(EstimationEntrySerializer):
    """An entry in full, to its team (and staff)."""

    public_mse = serializers.FloatField(
        allow_null=True, help_text="The mean final-layer MSE of the public MLPs."
    )
    mean_flops = serializers.FloatField(allow_null=True, help_text="Mean FLOPs per public MLP.")
    mean_effective_compute = serializers.FloatField(
        allow_null=True, help_text="Mean effective compute per public MLP."
    )
    ratio = serializers.FloatField(
        allow_null=True,
        help_text="Metered FLOPs over effective compute of the public MLPs, residual time "
        "valued at lambda (1.0: everything went through flopscope); null when nothing "
        "was spent.",
    )
    withheld_shown = serializers.BooleanField(
        help_text="Whether the withheld MLPs' score and rows are shown (from the close on)."
    )
    mlps = EstimationMlpRowSerializer(
        many=True,
        help_text="Per MLP, in suite order: the public MLPs before the close, every one after.",
    )


class EstimationEntryCreateSerializer(serializers.Serializer[dict[str, Any]]):
    archive = UploadField(help_text="The .tar.gz that `whest package` makes.")


class EstimationNominationSerializer(serializers.Serializer[dict[str, Any]]):
    nominated = serializers.BooleanField(
        help_text="true: nominate it for the final rerun; false: withdraw the nomination."
    )


def entry_data(
    entry: Entry, phase: PhaseRules, now: dt.datetime, *, detail: bool
) -> dict[str, Any]:
    closed = is_closed(entry.benchmark, now)
    graded = entry.status == Entry.GRADED
    data: dict[str, Any] = {
        "id": entry.pk,
        "benchmark": entry.benchmark.slug,
        "entrant": entry.entrant.get_username(),
        "team": entry.team.name if entry.team is not None else None,
        "status": entry.status,
        "submitted_at": entry.submitted_at,
        "started_at": entry.started_at,
        "graded_at": entry.graded_at,
        "archive_name": entry.archive_name,
        "archive_bytes": entry.archive_bytes,
        "archive_sha256": f"sha256:{entry.archive_sha256}",
        "estimator_class": entry.estimator_class,
        "failure_reason": entry.failure_reason,
        "public_score": finite(entry.public_score),
        "withheld_score": finite(entry.withheld_score) if closed else None,
        "fallbacks": selectors.shown_fallbacks(entry, phase, closed=closed) if graded else None,
        "nominated": entry.nominated,
        "refunded": entry.refunded,
    }
    if not detail:
        return data
    rows = selectors.stored_rows(entry)
    shown = rows if closed else rows[: phase.public_mlps]
    mlps = []
    for row in shown:
        found = row.as_dict()
        for key in ("residual_wall_time_s", "wall_time_s", "effective_compute"):
            found[key] = finite(found[key]) or 0.0
        mlps.append(found)
    return {
        **data,
        "public_mse": finite(entry.public_mse),
        "mean_flops": finite(entry.mean_flops),
        "mean_effective_compute": finite(entry.mean_effective_compute),
        "ratio": finite(selectors.entry_ratio(entry, phase)),
        "withheld_shown": closed,
        "mlps": mlps,
    }


@upload_route(archive="archive", archive_cap=whestbench_cap, archive_label="estimator archive")
class EntriesView(APIView):
    """Your team's entries, newest first; POST a `whest package` tarball to enter one
    (charged to your team's allowance of the day)."""

    parser_classes = [MultiPartParser, FormParser]
    throttle_scope = "uploads"
    throttle_classes = [PostRateThrottle]

    @extend_schema(
        operation_id="estimation_entries_list",
        tags=TAGS,
        responses={200: EstimationEntrySerializer(many=True), **NOT_FOUND},
    )
    def get(self, request: Request, slug: str) -> Response:
        benchmark, phase = estimation_phase(slug)
        now = timezone.now()
        rows = [
            entry_data(entry, phase, now, detail=False)
            for entry in selectors.visible_entries(benchmark, caller_id(request))
        ]
        return Response(EstimationEntrySerializer(rows, many=True).data)  # type: ignore[arg-type]

    @extend_schema(
        operation_id="estimation_entries_create",
        tags=TAGS,
        request={"multipart/form-data": EstimationEntryCreateSerializer},
        responses={
            201: EstimationEntryDetailSerializer,
            **error_responses(400, 401, 403, 404, 409, 413, 415, 429),
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        benchmark, phase = estimation_phase(slug)
        upload_check(request)
        serializer = EstimationEntryCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        upload: UploadedFile = serializer.validated_data["archive"]
        with upload_path(upload) as path:
            entry = services.entry_accept(
                entrant=request.user,
                benchmark=benchmark,
                archive_file=path,
                archive_name=upload.name or services.ARCHIVE_FILE,
            )
        entry = get_entry(entry.pk)
        data = entry_data(entry, phase, timezone.now(), detail=True)
        return Response(EstimationEntryDetailSerializer(data).data, status=status.HTTP_201_CREATED)


def get_entry(entry_id: int) -> Entry:
    entry = Entry.objects.select_related("benchmark", "entrant", "team").filter(pk=entry_id).first()
    if entry is None:
        raise errors.NotFound("No such entry.")
    return entry


def is_teams(request: Request, entry: Entry) -> bool:
    """Whether the entry is the caller's team's (theirs, on their own)."""
    return entry.entrant_id in identity_of(entry.benchmark_id, caller_id(request)).member_ids


# The board ------------------------------------------------------------------------------


class EstimationBoardRowSerializer(serializers.Serializer[dict[str, Any]]):
    """A team's (or a solo entrant's) best entry on the board."""

    rank = serializers.IntegerField()
    entry = serializers.IntegerField(help_text="The entry's id.")
    entrant = serializers.CharField(help_text="Who uploaded it.")
    team = serializers.CharField(allow_null=True, help_text="The team's name (null: on their own).")
    public_score = serializers.FloatField(help_text="The mean score of the public MLPs.")
    withheld_score = serializers.FloatField(
        allow_null=True, help_text="The withheld MLPs' mean score: null before the close."
    )
    mean_flops = serializers.FloatField(allow_null=True)
    mean_effective_compute = serializers.FloatField(allow_null=True)
    ratio = serializers.FloatField(
        allow_null=True, help_text="Metered FLOPs over effective compute (public MLPs)."
    )
    ratio_outlier = serializers.BooleanField(
        help_text="The ratio is under a tenth of the board's median ratio."
    )
    fallbacks = serializers.IntegerField(
        help_text="Fallbacks: of the public MLPs before the close, of every MLP after."
    )
    submitted_at = OffsetDateTimeField()


class EstimationBoardSerializer(serializers.Serializer[dict[str, Any]]):
    state = serializers.ChoiceField(
        choices=["live", "closed"], help_text="closed: from closes_at on, withheld scores shown."
    )
    rows = EstimationBoardRowSerializer(many=True)


def board_row_data(row: selectors.BoardRow) -> dict[str, Any]:
    return {
        "rank": row.rank,
        "entry": row.entry_id,
        "entrant": row.entrant,
        "team": row.team or None,
        "public_score": row.public_score,
        "withheld_score": finite(row.withheld_score),
        "mean_flops": finite(row.mean_flops),
        "mean_effective_compute": finite(row.mean_effective_compute),
        "ratio": finite(row.ratio),
        "ratio_outlier": row.ratio_outlier,
        "fallbacks": row.fallbacks,
        "submitted_at": row.submitted_at,
    }


class BoardView(APIView):
    """Each team's best public score, lower first; withheld scores from the close on."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="estimation_board",
        tags=TAGS,
        auth=[],
        responses={200: EstimationBoardSerializer, **error_responses(404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        benchmark, _phase = estimation_phase(slug)
        now = timezone.now()
        rows = [board_row_data(row) for row in selectors.board(benchmark, now)]
        state = "closed" if is_closed(benchmark, now) else "live"
        return Response(EstimationBoardSerializer({"state": state, "rows": rows}).data)


ENTRY_OR_BOARD_ROW = PolymorphicProxySerializer(
    component_name="EstimationEntryOrBoardRow",
    serializers=[EstimationEntryDetailSerializer, EstimationBoardRowSerializer],
    resource_type_field_name=None,
)


class EntryDetailView(APIView):
    """One entry: in full to its team (and staff); another team's only while it is on the
    board, and then only its board row."""

    @extend_schema(
        operation_id="estimation_entries_retrieve",
        tags=TAGS,
        responses={200: ENTRY_OR_BOARD_ROW, **NOT_FOUND},
    )
    def get(self, request: Request, entry_id: int) -> Response:
        entry = get_entry(entry_id)
        phase = services.phase_rules(entry.benchmark)
        now = timezone.now()
        if is_teams(request, entry) or staff_reads(request):
            data = entry_data(entry, phase, now, detail=True)
            return Response(EstimationEntryDetailSerializer(data).data)
        for row in selectors.board(entry.benchmark, now):
            if row.entry_id == entry.pk:
                return Response(EstimationBoardRowSerializer(board_row_data(row)).data)
        raise errors.NotFound("No such entry.")


class EntryNominationView(APIView):
    """Nominate one of your team's graded entries for the final rerun, or withdraw it."""

    @extend_schema(
        operation_id="estimation_entries_nominate",
        tags=TAGS,
        request=EstimationNominationSerializer,
        responses={200: EstimationEntryDetailSerializer, **error_responses(400, 401, 404)},
    )
    def post(self, request: Request, entry_id: int) -> Response:
        entry = get_entry(entry_id)
        if not is_teams(request, entry):
            raise errors.NotFound("No such entry.")
        serializer = EstimationNominationSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.entry_nominate(
            entry=entry, user=request.user, nominated=serializer.validated_data["nominated"]
        )
        entry = get_entry(entry_id)
        phase = services.phase_rules(entry.benchmark)
        data = entry_data(entry, phase, timezone.now(), detail=True)
        return Response(EstimationEntryDetailSerializer(data).data)


# The final rerun ------------------------------------------------------------------------


class EstimationFinalRowSerializer(serializers.Serializer[dict[str, Any]]):
    rank = serializers.IntegerField(
        allow_null=True, help_text="Among graded rows, each team once (its best); null else."
    )
    entry = serializers.IntegerField(help_text="The entry's id.")
    entrant = serializers.CharField()
    team = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(
        choices=[*Entry.STATUSES, (DISQUALIFIED, "disqualified by its review before prizes")],
        help_text="The final grade's status; ``disqualified`` (not ranked) when the entry's "
        "review before prizes disqualified it.",
    )
    score = serializers.FloatField(allow_null=True, help_text="The mean score on the final suite.")
    fallbacks = serializers.IntegerField(allow_null=True)
    public_score = serializers.FloatField(allow_null=True, help_text="Its phase public score.")


class EstimationFinalSerializer(serializers.Serializer[dict[str, Any]]):
    state = serializers.ChoiceField(
        choices=["not_started", "running", "complete"],
        help_text="not_started: no rerun yet; running: some entries are still being graded.",
    )
    rows = EstimationFinalRowSerializer(many=True)


class FinalView(APIView):
    """The final rerun's standings: graded rows ranked by their final score, then the rest."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="estimation_final",
        tags=TAGS,
        auth=[],
        responses={200: EstimationFinalSerializer, **error_responses(404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        benchmark, _phase = estimation_phase(slug)
        rows = selectors.final_standings(benchmark)
        statuses = set(
            FinalScore.objects.filter(entry__benchmark=benchmark).values_list("status", flat=True)
        )
        if not statuses:
            state = "not_started"
        elif statuses & {Entry.ACCEPTED, Entry.GRADING}:
            state = "running"
        else:
            state = "complete"
        data = {
            "state": state,
            "rows": [
                {
                    "rank": row.rank,
                    "entry": row.entry_id,
                    "entrant": row.entrant,
                    "team": row.team or None,
                    "status": row.status,
                    "score": finite(row.score),
                    "fallbacks": row.fallbacks,
                    "public_score": finite(row.public_score),
                }
                for row in rows
            ],
        }
        return Response(EstimationFinalSerializer(data).data)


# The public suite -----------------------------------------------------------------------


class SuiteDownloadView(RawAPIView):
    """The public suite, a whestbench dataset folder, as one .tar.gz (signed-in callers):
    unpacked into DIR, `whest run --dataset DIR` runs on it."""

    @extend_schema(
        operation_id="estimation_suite_download",
        tags=TAGS,
        responses={
            (200, "application/gzip"): OpenApiTypes.BINARY,
            **error_responses(401, 404, 409),
        },
    )
    def get(self, request: Request, slug: str) -> FileResponse:
        benchmark, _phase = estimation_phase(slug)
        suite = Suite.objects.filter(
            benchmark=benchmark, role=Suite.PUBLIC, status=Suite.READY
        ).first()
        if suite is None:
            raise errors.NoCohort(
                "This phase has no ready public suite yet; try again once the organizers "
                "have generated it."
            )
        return FileResponse(
            downloads.suite_archive_open(suite),
            as_attachment=True,
            filename=f"{benchmark.slug}-public-suite.tar.gz",
            content_type="application/gzip",
        )
