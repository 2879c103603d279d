"""Metered estimation in the admin: a phase's rules (editable), its suites and the entries
with their grades (read-only: suites are generated or imported by ``manage.py
estimation_suite``, entries come from uploads and the grader), and the reviews before
prizes, which staff with ``estimation.decide_entry_review`` clear or disqualify with a
reason (audited). The final standings are published and corrected from the final
settings' list (``portal.standings``), as a timed benchmark's are."""

from __future__ import annotations

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
from portal.core.admin_helpers import ReadOnlyMixin
from portal.estimation.models import (
    Entry,
    EntryReview,
    EstimationStandingRow,
    FinalScore,
    PhaseRules,
    Suite,
)
from portal.estimation.standings import DECIDE, entry_archive_review, entry_review_decide


@admin.register(PhaseRules)
class PhaseRulesAdmin(admin.ModelAdmin[PhaseRules]):
    list_display = ["benchmark", "width", "depth", "flop_budget", "residual_rule", "wall_cap_s"]


@admin.register(Suite)
class SuiteAdmin(ReadOnlyMixin, admin.ModelAdmin[Suite]):
    list_display = [
        "benchmark",
        "role",
        "status",
        "origin",
        "n_mlps",
        "progress_done",
        "progress_total",
        "generated_on",
        "finished_at",
    ]
    list_filter = ["role", "status", "origin"]
    exclude = ["stats"]


@admin.register(Entry)
class EntryAdmin(ReadOnlyMixin, admin.ModelAdmin[Entry]):
    list_display = [
        "pk",
        "benchmark",
        "entrant",
        "team",
        "status",
        "public_score",
        "withheld_score",
        "fallbacks",
        "submitted_at",
    ]
    list_filter = ["benchmark", "status"]
    exclude = ["results"]


@admin.register(FinalScore)
class FinalScoreAdmin(ReadOnlyMixin, admin.ModelAdmin[FinalScore]):
    list_display = ["entry", "suite", "status", "score", "fallbacks", "graded_at"]
    exclude = ["results"]


@admin.register(EntryReview)
class EntryReviewAdmin(ReadOnlyMixin, admin.ModelAdmin[EntryReview]):
    """The review before prizes: read the entry's estimator (its archive, downloaded from
    the review's page with a reason, audited), then clear or disqualify it here."""

    list_display = ["entry", "status", "opened_at", "opened_because", "decided_at", "decided_by"]
    list_filter = ["status", "entry__benchmark"]
    list_select_related = ["entry__benchmark", "decided_by"]
    search_fields = ["entry__id", "entry__entrant__username", "entry__team__name"]
    readonly_fields = ["archive_download"]
    actions = ["clear", "disqualify"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = [f.name for f in EntryReview._meta.concrete_fields if f.name != "id"]
        if request.user.has_perm(DECIDE):
            fields.append("archive_download")
        return fields

    @admin.display(description="Estimator archive")
    def archive_download(self, review: EntryReview) -> str:
        url = reverse("admin:estimation_entryreview_archive", args=[review.pk])
        return format_html(
            '<a href="{}">Download {}</a> ({} bytes; asks a reason, audited)',
            url,
            review.entry.archive_name,
            review.entry.archive_bytes,
        )

    def get_urls(self) -> list[URLPattern]:
        archive = path(
            "<int:review_id>/archive/",
            self.admin_site.admin_view(self.archive_view),
            name="estimation_entryreview_archive",
        )
        return [archive, *super().get_urls()]

    def archive_view(self, request: HttpRequest, review_id: int) -> HttpResponseBase:
        """Ask why, then serve the entry's archive; the download is audited first."""
        if not request.user.has_perm(DECIDE):
            raise PermissionDenied
        review = get_object_or_404(EntryReview.objects.select_related("entry"), pk=review_id)
        reason = reason_given(request, required=True)
        if reason is None:
            return reason_page(
                request,
                self,
                title="Download an estimator archive",
                explanation="Reading an entrant's estimator is recorded in the audit log "
                "with your reason.",
                objects=[review],
                reason_required=True,
                submit="Download",
            )
        handle = entry_archive_review(
            entry=review.entry, actor=request.user, reason=reason, origin=Origin.of(request)
        )
        return FileResponse(
            handle,
            as_attachment=True,
            filename=f"entry-{review.entry_id}-{review.entry.archive_name}",
        )

    def has_decide_entry_review_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(DECIDE))

    def _decide(
        self, request: HttpRequest, queryset: QuerySet[EntryReview], decision: str
    ) -> TemplateResponse | None:
        disqualify = decision == EntryReview.DISQUALIFIED
        return reasoned_action(
            request,
            self,
            list(queryset),
            action="disqualify" if disqualify else "clear",
            title="Disqualify after review" if disqualify else "Clear after review",
            explanation="The decision and your reason are recorded in the audit log. A "
            "disqualified entry leaves the final standings; the next team moves up.",
            reason_required=True,
            apply=lambda found, reason, origin: entry_review_decide(
                review=found, actor=request.user, decision=decision, reason=reason, origin=origin
            ),
            done=lambda count: f"Decided {count} review(s).",
        )

    @admin.action(description="Clear the selected entries", permissions=["decide_entry_review"])
    def clear(
        self, request: HttpRequest, queryset: QuerySet[EntryReview]
    ) -> TemplateResponse | None:
        return self._decide(request, queryset, EntryReview.CLEARED)

    @admin.action(
        description="Disqualify the selected entries (out of the final standings)",
        permissions=["decide_entry_review"],
    )
    def disqualify(
        self, request: HttpRequest, queryset: QuerySet[EntryReview]
    ) -> TemplateResponse | None:
        return self._decide(request, queryset, EntryReview.DISQUALIFIED)


@admin.register(EstimationStandingRow)
class EstimationStandingRowAdmin(ReadOnlyMixin, admin.ModelAdmin[EstimationStandingRow]):
    """A phase's frozen rows (published and corrected through ``portal.standings``)."""

    list_display = ["standings", "rank", "team", "entrant", "entry_id", "score"]
    list_filter = ["standings__benchmark"]
