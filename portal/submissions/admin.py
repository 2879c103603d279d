"""Submissions, runs, the attempt ledger, timelines and the verification pool in the admin
(read-only records).

Staff act through actions that ask for a reason and write an audit event: cancel
(refunds), requeue, rescore, disqualify; a submission's source and a run's evidence
bundle are downloaded through a page that asks why, and every download is audited.
Each action and download needs its own permission (``staff.STAFF_PERMISSIONS``): an
action is offered only to those who hold it, and a download page refuses the others
(403) before asking anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import FileResponse, HttpRequest
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from portal.audit.reasons import reason_given, reason_page, reasoned_action
from portal.audit.services import Origin
from portal.core import errors, storage
from portal.core.admin_helpers import (
    ReadOnlyMixin,
    log_tail_html,
    preformatted,
)
from portal.submissions import anomalies, evidence, review, staff
from portal.submissions.models import (
    Anomaly,
    AttemptLedger,
    ProvenanceReview,
    Run,
    Submission,
    SubmissionEvent,
    VerificationSet,
)
from portal.submissions.selectors import resources_text

StaffService = Callable[..., Submission]


def _download(handle: Any, filename: str) -> FileResponse:
    return FileResponse(handle, as_attachment=True, filename=filename)


def _require(request: HttpRequest, permission: str) -> None:
    """The admin's refusal (403) for staff without ``permission``."""
    if not request.user.has_perm(permission):
        raise PermissionDenied


class SubmissionEventInline(ReadOnlyMixin, admin.TabularInline[SubmissionEvent, Submission]):
    model = SubmissionEvent
    fields = ["status", "at", "note"]
    extra = 0


class AttemptLedgerInline(ReadOnlyMixin, admin.TabularInline[AttemptLedger, Submission]):
    model = AttemptLedger
    fields = ["kind", "attempt_day", "delta", "reason", "at"]
    extra = 0


class RunInline(ReadOnlyMixin, admin.TabularInline[Run, Submission]):
    """Every run of the submission, each verification run with its wall time, gate
    verdict and what it decided (confirmed, re-measure, rejected)."""

    model = Run
    fields = [
        "try_number",
        "purpose",
        "status",
        "verdict",
        "wall_time_ns",
        "matches",
        "total",
        "verification_note",
        "host_speed_changed",
        "finished_at",
    ]
    ordering = ["try_number"]
    extra = 0
    show_change_link = True


@admin.register(Submission)
class SubmissionAdmin(ReadOnlyMixin, admin.ModelAdmin[Submission]):
    list_display = [
        "id",
        "entrant",
        "benchmark",
        "kind",
        "status",
        "submitted_at",
        "disqualified_at",
    ]
    list_filter = ["status", "kind", "benchmark", ("disqualified_at", admin.EmptyFieldListFilter)]
    search_fields = ["id", "entrant__username", "source_sha256", "image_digest"]
    list_select_related = ["entrant", "benchmark"]
    date_hierarchy = "submitted_at"
    inlines = [SubmissionEventInline, AttemptLedgerInline, RunInline]
    readonly_fields = ["source_download", "digests", "build_log_tail", "run_log_tail"]
    actions = ["cancel_and_refund", "requeue", "rescore", "disqualify"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if not request.user.has_perm(staff.DOWNLOAD_SOURCE):
            fields.remove("source_download")
        return fields

    def has_cancel_submission_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(staff.CANCEL)

    def has_requeue_submission_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(staff.REQUEUE)

    def has_rescore_submission_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(staff.RESCORE)

    def has_disqualify_submission_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(staff.DISQUALIFY)

    @admin.display(description="Source archive")
    def source_download(self, submission: Submission) -> str:
        url = reverse("admin:submissions_submission_source", args=[submission.pk])
        return format_html(
            '<a href="{}">Download {}</a> ({} bytes; asks a reason, audited)',
            url,
            submission.source_name,
            submission.source_bytes,
        )

    @admin.display(description="Digests")
    def digests(self, submission: Submission) -> str:
        return preformatted(
            f"source             sha256:{submission.source_sha256}\n"
            f"environment image  {submission.environment_image_digest or '-'}\n"
            f"submission image   {submission.image_digest or '-'}"
        )

    @admin.display(description=f"Build log (last {storage.LOG_TAIL_LINES} lines)")
    def build_log_tail(self, submission: Submission) -> str:
        return log_tail_html(storage.submission_build_log(submission.pk))

    @admin.display(description=f"Latest run log (last {storage.LOG_TAIL_LINES} lines)")
    def run_log_tail(self, submission: Submission) -> str:
        run = submission.runs.order_by("-try_number").first()
        return log_tail_html(storage.run_log(run.pk)) if run else preformatted("")

    def get_urls(self) -> list[URLPattern]:
        source = path(
            "<int:submission_id>/source/",
            self.admin_site.admin_view(self.source_view),
            name="submissions_submission_source",
        )
        return [source, *super().get_urls()]

    def source_view(self, request: HttpRequest, submission_id: int) -> HttpResponseBase:
        """Ask why, then serve the source archive; the download is audited first."""
        _require(request, staff.DOWNLOAD_SOURCE)
        submission = get_object_or_404(Submission, pk=submission_id)
        reason = reason_given(request, required=True)
        if reason is None:
            return reason_page(
                request,
                self,
                title="Download a source archive",
                explanation="Downloading an entrant's source is recorded in the audit log "
                "with your reason.",
                objects=[submission],
                reason_required=True,
                submit="Download",
            )
        handle = staff.submission_source_review(
            submission=submission, actor=request.user, reason=reason, origin=Origin.of(request)
        )
        return _download(handle, f"submission-{submission.pk}-{submission.source_name}")

    @admin.action(
        description="Cancel the selected submissions (refunds the attempt)",
        permissions=["cancel_submission"],
    )
    def cancel_and_refund(
        self, request: HttpRequest, queryset: QuerySet[Submission]
    ) -> TemplateResponse | None:
        return self._staff_action(
            request,
            queryset,
            action="cancel_and_refund",
            service=staff.submission_cancel,
            title="Cancel and refund",
            reason_required=False,
            explanation="Cancel these unfinished submissions and refund their attempts.",
        )

    @admin.action(
        description="Requeue the selected submissions (waiting or infra-failed)",
        permissions=["requeue_submission"],
    )
    def requeue(
        self, request: HttpRequest, queryset: QuerySet[Submission]
    ) -> TemplateResponse | None:
        return self._staff_action(
            request,
            queryset,
            action="requeue",
            service=staff.submission_requeue,
            title="Requeue",
            reason_required=False,
            explanation="Send these accepted or queued submissions to their queue again, and "
            "put infra-failed ones back in line (nothing is charged).",
        )

    @admin.action(
        description="Rescore the selected submissions (charges nothing)",
        permissions=["rescore_submission"],
    )
    def rescore(
        self, request: HttpRequest, queryset: QuerySet[Submission]
    ) -> TemplateResponse | None:
        return self._staff_action(
            request,
            queryset,
            action="rescore",
            service=staff.submission_rescore,
            title="Rescore",
            reason_required=False,
            explanation="Queue a new scored run of these finished submissions, labelled as a "
            "staff rescore in their timelines.",
        )

    @admin.action(
        description="Disqualify the selected submissions (after review)",
        permissions=["disqualify_submission"],
    )
    def disqualify(
        self, request: HttpRequest, queryset: QuerySet[Submission]
    ) -> TemplateResponse | None:
        return self._staff_action(
            request,
            queryset,
            action="disqualify",
            service=staff.submission_disqualify,
            title="Disqualify",
            reason_required=True,
            explanation="Take these submissions' runs off the leaderboard; the entrant's next "
            "best passing run takes the place.",
        )

    def _staff_action(
        self,
        request: HttpRequest,
        queryset: QuerySet[Submission],
        *,
        action: str,
        service: StaffService,
        title: str,
        reason_required: bool,
        explanation: str,
    ) -> TemplateResponse | None:
        """Ask for a reason on an intermediate page, then call the staff service per row."""
        return reasoned_action(
            request,
            self,
            queryset.select_related("benchmark"),
            action=action,
            title=title,
            explanation=explanation,
            reason_required=reason_required,
            apply=lambda submission, reason, origin: service(
                submission=submission, actor=request.user, reason=reason, origin=origin
            ),
            done=lambda count: f"{title}: {count} submission(s).",
        )


@admin.register(Run)
class RunAdmin(ReadOnlyMixin, admin.ModelAdmin[Run]):
    list_display = [
        "id",
        "submission",
        "try_number",
        "purpose",
        "status",
        "verdict",
        "wall_time_ns",
        "matches",
        "total",
        "passed",
        "verification_note",
        "host_speed_changed",
        "finished_at",
    ]
    list_filter = [
        "purpose",
        "status",
        "verdict",
        "passed",
        "host_speed_changed",
        "submission__benchmark",
    ]
    search_fields = ["submission__id", "submission__entrant__username", "container_id"]
    list_select_related = ["submission__entrant"]
    readonly_fields = [
        "evidence_download",
        "meter_readings",
        "health_readings",
        "host_speed_readings",
        "run_log_tail",
    ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if not request.user.has_perm(staff.DOWNLOAD_EVIDENCE):
            fields.remove("evidence_download")
        return fields

    @admin.display(description="Evidence bundle")
    def evidence_download(self, run: Run) -> str:
        url = reverse("admin:submissions_run_evidence", args=[run.pk])
        return format_html(
            '<a href="{}">Download the evidence bundle</a> (manifest, mapping to canonical '
            "members, output, digests, supervisor result, health readings, logs; asks a "
            "reason, audited)",
            url,
        )

    @admin.display(description="Health readings")
    def health_readings(self, run: Run) -> str:
        return preformatted(json.dumps(run.readings, indent=2, sort_keys=True))

    @admin.display(description="The host's own speed (before and after the run)")
    def host_speed_readings(self, run: Run) -> str:
        speed = run.host_speed
        if not speed:
            return "not probed"
        verdict = (
            "CHANGED beyond the band: the run's time is not the entry's alone (a free rescore "
            "was queued unless its submission already had one, or could not be rescored then)"
            if speed.get("changed")
            else "steady"
        )
        return preformatted(
            f"{verdict}\nchange {speed.get('change_pct')} %, probe noise "
            f"{speed.get('noise_pct')} %, band {speed.get('band_pct')} %\n"
            + json.dumps(
                {"before_ns": speed.get("before_ns"), "after_ns": speed.get("after_ns")},
                indent=2,
                sort_keys=True,
            )
        )

    @admin.display(description="Meter (the container's cgroup after the run)")
    def meter_readings(self, run: Run) -> str:
        return resources_text(run.resources)

    @admin.display(description=f"Run log (last {storage.LOG_TAIL_LINES} lines)")
    def run_log_tail(self, run: Run) -> str:
        return log_tail_html(storage.run_log(run.pk))

    def get_urls(self) -> list[URLPattern]:
        bundle = path(
            "<int:run_id>/evidence/",
            self.admin_site.admin_view(self.evidence_view),
            name="submissions_run_evidence",
        )
        return [bundle, *super().get_urls()]

    def evidence_view(self, request: HttpRequest, run_id: int) -> HttpResponseBase:
        """Ask why, then serve the run's evidence bundle; the download is audited first."""
        _require(request, staff.DOWNLOAD_EVIDENCE)
        run = get_object_or_404(
            Run.objects.select_related("cohort", "submission__benchmark", "submission__entrant"),
            pk=run_id,
        )
        reason = reason_given(request, required=True)
        if reason is None:
            return reason_page(
                request,
                self,
                title="Download a run's evidence bundle",
                explanation="The bundle names the cohort's members and holds the entrant's "
                "output; downloading it is recorded in the audit log with your reason.",
                objects=[run],
                reason_required=True,
                submit="Download",
            )
        handle = evidence.run_evidence_review(
            run=run, actor=request.user, reason=reason, origin=Origin.of(request)
        )
        return _download(handle, f"run-{run.pk}-evidence.tar.gz")


@admin.register(AttemptLedger)
class AttemptLedgerAdmin(ReadOnlyMixin, admin.ModelAdmin[AttemptLedger]):
    list_display = [
        "entrant",
        "benchmark",
        "submission",
        "kind",
        "attempt_day",
        "delta",
        "reason",
        "at",
    ]
    list_filter = ["kind", "delta", "benchmark", "attempt_day"]
    search_fields = ["entrant__username", "reason"]
    list_select_related = ["entrant", "benchmark"]


@admin.register(SubmissionEvent)
class SubmissionEventAdmin(ReadOnlyMixin, admin.ModelAdmin[SubmissionEvent]):
    list_display = ["submission", "status", "at", "note"]
    list_filter = ["status"]
    search_fields = ["submission__id", "submission__entrant__username", "note"]


@admin.register(VerificationSet)
class VerificationSetAdmin(ReadOnlyMixin, admin.ModelAdmin[VerificationSet]):
    """The verification pool (``portal.submissions.pool``): each set the builds side
    prepared ahead of need, how long it took, and the run that took it. Read-only: sets
    come and go with the pool's fill and sweep, never by hand. A pool that stays empty
    while verifications wait points at the build worker (``jpegtran`` missing, say)."""

    list_display = [
        "id",
        "cohort",
        "status",
        "members",
        "perturbed",
        "prepare_ms",
        "created_at",
        "ready_at",
        "taken_at",
        "run_link",
    ]
    list_filter = ["status"]
    list_select_related = ["cohort__benchmark"]

    @admin.display(description="Run", ordering="run_id")
    def run_link(self, verification_set: VerificationSet) -> str:
        if verification_set.run_id is None:
            return "-"
        url = reverse("admin:submissions_run_change", args=[verification_set.run_id])
        return format_html('<a href="{}">run {}</a>', url, verification_set.run_id)


# Anomalies (anomalies.py): what looked wrong about a finished official run -------------


class ReviewedFilter(admin.SimpleListFilter):
    title = "reviewed"
    parameter_name = "reviewed"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "Not yet"), ("yes", "Reviewed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "no":
            return queryset.filter(reviewed_at__isnull=True)
        if self.value() == "yes":
            return queryset.filter(reviewed_at__isnull=False)
        return queryset


@admin.register(Anomaly)
class AnomalyAdmin(ReadOnlyMixin, admin.ModelAdmin[Anomaly]):
    """The anomalies list: read-only; "Mark reviewed" (``submissions.review_anomaly``)
    asks for a note, then records it on each anomaly with one audit event each."""

    list_display = [
        "kind",
        "run_link",
        "entrant",
        "benchmark",
        "reason",
        "detected_at",
        "reviewed",
    ]
    list_filter = ["kind", ReviewedFilter, "run__submission__benchmark"]
    search_fields = ["run__id", "run__submission__id", "run__submission__entrant__username"]
    list_select_related = ["run__submission__entrant", "run__submission__benchmark"]
    date_hierarchy = "detected_at"
    fields = [
        "kind",
        "run_link",
        "entrant",
        "benchmark",
        "reason",
        "details_json",
        "detected_at",
        "reviewed_at",
        "reviewed_by",
        "review_note",
    ]
    readonly_fields = ["run_link", "entrant", "benchmark", "details_json"]
    actions = ["mark_reviewed"]

    def has_review_anomaly_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(anomalies.REVIEW_ANOMALY)

    @admin.display(description="Run", ordering="run_id")
    def run_link(self, anomaly: Anomaly) -> str:
        url = reverse("admin:submissions_run_change", args=[anomaly.run_id])
        return format_html('<a href="{}">run {}</a>', url, anomaly.run_id)

    @admin.display(description="Entrant", ordering="run__submission__entrant__username")
    def entrant(self, anomaly: Anomaly) -> str:
        return str(anomaly.run.submission.entrant)

    @admin.display(description="Benchmark", ordering="run__submission__benchmark")
    def benchmark(self, anomaly: Anomaly) -> str:
        return str(anomaly.run.submission.benchmark)

    @admin.display(description="Reviewed", boolean=True, ordering="reviewed_at")
    def reviewed(self, anomaly: Anomaly) -> bool:
        return anomaly.reviewed_at is not None

    @admin.display(description="Details")
    def details_json(self, anomaly: Anomaly) -> str:
        return preformatted(json.dumps(anomaly.details, indent=2, sort_keys=True))

    @admin.action(
        description="Mark the selected anomalies reviewed (asks for a note)",
        permissions=["review_anomaly"],
    )
    def mark_reviewed(
        self, request: HttpRequest, queryset: QuerySet[Anomaly]
    ) -> TemplateResponse | None:
        """Ask for the note on an intermediate page, then review each anomaly (audited)."""
        try:
            errors.staff_permission_check(request.user, anomalies.REVIEW_ANOMALY)
        except errors.PermissionDenied as exc:
            raise PermissionDenied(exc.detail) from exc
        return reasoned_action(
            request,
            self,
            queryset.select_related("run"),
            action="mark_reviewed",
            title="Mark reviewed",
            explanation="Say what the review found (the entrant's explanation, the "
            "sources compared, the decision). The note is kept with each anomaly and "
            "recorded in the audit log.",
            reason_required=True,
            apply=lambda anomaly, note, origin: anomalies.anomaly_review(
                anomaly=anomaly, actor=request.user, note=note, origin=origin
            ),
            done=lambda count: f"Marked reviewed: {count} anomal{'y' if count == 1 else 'ies'}.",
        )
        return None


@admin.register(ProvenanceReview)
class ProvenanceReviewAdmin(ReadOnlyMixin, admin.ModelAdmin[ProvenanceReview]):
    """Apparent winners under provenance review: the entrant's statement and the image's
    artifacts as the worker listed them; "Clear" and "Disqualify" ask for a reason and
    need ``submissions.decide_review`` (each decision audited)."""

    list_display = ["submission", "status", "opened_because", "opened_at", "statement_given"]
    list_filter = ["status", "submission__benchmark"]
    search_fields = ["submission__id", "submission__entrant__username"]
    list_select_related = ["submission__entrant", "submission__benchmark"]
    fields = [
        "submission",
        "status",
        "opened_at",
        "opened_because",
        "statement",
        "statement_at",
        "artifacts_listing",
        "artifacts_at",
        "decided_at",
        "decided_by",
        "decision_reason",
    ]
    readonly_fields = ["artifacts_listing"]
    actions = ["clear", "disqualify"]

    def has_decide_review_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(staff.DECIDE_REVIEW)

    @admin.display(description="Statement given", boolean=True, ordering="statement_at")
    def statement_given(self, found: ProvenanceReview) -> bool:
        return found.statement_at is not None

    @admin.display(description="The image's artifacts")
    def artifacts_listing(self, found: ProvenanceReview) -> str:
        if found.artifacts is None:
            return preformatted("not listed yet")
        return preformatted(json.dumps(found.artifacts, indent=2, sort_keys=True))

    def _decide(
        self, request: HttpRequest, queryset: QuerySet[ProvenanceReview], decision: str
    ) -> TemplateResponse | None:
        return reasoned_action(
            request,
            self,
            list(queryset.select_related("submission")),
            action=decision if decision == "disqualify" else "clear",
            title="Disqualify after review" if decision == "disqualify" else "Clear after review",
            explanation="The decision and your reason are recorded in the audit log and shown "
            "to the entrant.",
            reason_required=True,
            apply=lambda found, reason, origin: review.review_decide(
                review=found,
                actor=request.user,
                decision=(
                    ProvenanceReview.DISQUALIFIED
                    if decision == "disqualify"
                    else ProvenanceReview.CLEARED
                ),
                reason=reason,
                origin=origin,
            ),
            done=lambda count: f"Decided {count} review(s).",
        )

    @admin.action(description="Clear the selected submissions", permissions=["decide_review"])
    def clear(
        self, request: HttpRequest, queryset: QuerySet[ProvenanceReview]
    ) -> TemplateResponse | None:
        return self._decide(request, queryset, "clear")

    @admin.action(
        description="Disqualify the selected submissions (off the board)",
        permissions=["decide_review"],
    )
    def disqualify(
        self, request: HttpRequest, queryset: QuerySet[ProvenanceReview]
    ) -> TemplateResponse | None:
        return self._decide(request, queryset, "disqualify")
