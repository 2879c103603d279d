"""Submissions, runs, the attempt ledger and timelines in the admin (read-only records)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from portal.environments.admin import ReadOnlyMixin
from portal.errors import PodiumError
from portal.submissions import staff
from portal.submissions.models import AttemptLedger, Run, Submission, SubmissionEvent

StaffService = Callable[..., Submission]


class SubmissionEventInline(ReadOnlyMixin, admin.TabularInline):
    model = SubmissionEvent
    fields = ["status", "at", "note"]
    extra = 0


class AttemptLedgerInline(ReadOnlyMixin, admin.TabularInline):
    model = AttemptLedger
    fields = ["kind", "attempt_day", "delta", "reason", "at"]
    extra = 0


class RunInline(ReadOnlyMixin, admin.TabularInline):
    model = Run
    fields = ["try_number", "status", "verdict", "wall_time_ns", "matches", "total", "finished_at"]
    extra = 0
    show_change_link = True


@admin.register(Submission)
class SubmissionAdmin(ReadOnlyMixin, admin.ModelAdmin):
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
    actions = ["cancel_and_refund", "disqualify", "rescore"]

    @admin.action(description="Cancel the selected submissions (refunds the attempt)")
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

    @admin.action(description="Disqualify the selected submissions (after review)")
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

    @admin.action(description="Rescore the selected submissions (charges nothing)")
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
            explanation="Queue a new scored run of these finished submissions.",
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
        reason = request.POST.get("reason", "").strip()
        if request.POST.get("apply") and (reason or not reason_required):
            done = 0
            for submission in queryset.select_related("benchmark"):
                try:
                    service(submission=submission, actor=request.user, reason=reason)
                except PodiumError as exc:
                    self.message_user(request, f"#{submission.pk}: {exc.detail}", messages.ERROR)
                else:
                    done += 1
            if done:
                self.message_user(request, f"{title}: {done} submission(s).", messages.SUCCESS)
            return None
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "explanation": explanation,
            "queryset": queryset,
            "action": action,
            "reason_required": reason_required,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/submissions/staff_action.html", context)


@admin.register(Run)
class RunAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "id",
        "submission",
        "try_number",
        "status",
        "verdict",
        "wall_time_ns",
        "matches",
        "total",
        "passed",
        "finished_at",
    ]
    list_filter = ["status", "verdict", "passed", "submission__benchmark"]
    search_fields = ["submission__id", "submission__entrant__username", "container_id"]
    list_select_related = ["submission__entrant"]


@admin.register(AttemptLedger)
class AttemptLedgerAdmin(ReadOnlyMixin, admin.ModelAdmin):
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
class SubmissionEventAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["submission", "status", "at", "note"]
    list_filter = ["status"]
    search_fields = ["submission__id", "submission__entrant__username", "note"]
