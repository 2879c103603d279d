"""Benchmarks, the hardware classes they run on, and cohorts in the admin.

Every change of a benchmark's rules is audited, as is every change of a contest (its
facts, the order of its phases) and every announcement posted or corrected. A cohort
shows its counts and digests; its member list is audited whenever it is viewed or
exported, and its reference answers are shown only by an explicit export that asks for a
reason and is audited. Each export needs its own permission (``contests.export_cohort_members``,
``contests.export_cohort_answers``). A cohort's benchmark and kind are read-only once a
run has used it; until then a change is audited (``cohort.change``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html

from portal.audit.reasons import reason_given, reason_page
from portal.audit.services import Origin, audit_record
from portal.contests import review
from portal.contests.announcements import announcement_change, announcement_post, contest_save
from portal.contests.cohorts import cohort_change
from portal.contests.models import (
    Announcement,
    Benchmark,
    Cohort,
    CohortItem,
    Contest,
    HardwareClass,
    LeaderboardEntry,
)


@admin.register(HardwareClass)
class HardwareClassAdmin(admin.ModelAdmin[HardwareClass]):
    """Staff describe each class once: platform, GPUs, the pinned software of its hosts (a
    GPU class opens only with all five pins) and its CPU-idleness gate."""

    list_display = [
        "name",
        "platform",
        "gpus",
        "gpu_model",
        "pin_gpu_driver",
        "pin_cuda",
        "pin_kernel",
        "pin_engine_version",
        "cpu_gate_busy_max",
        "cpu_gate_noise_band",
    ]
    search_fields = ["name", "gpu_model"]

    def get_readonly_fields(
        self, request: HttpRequest, obj: HardwareClass | None = None
    ) -> list[str]:
        # Benchmarks, hosts and campaigns hold the name (foreign keys on it): renaming a
        # class would leave them naming none.
        return ["name"] if obj is not None else []


@admin.register(Benchmark)
class BenchmarkAdmin(admin.ModelAdmin[Benchmark]):
    list_display = [
        "slug",
        "title",
        "opens_at",
        "closes_at",
        "attempts_per_day",
        "pass_min_matches",
    ]
    search_fields = ["slug", "title"]
    prepopulated_fields = {"slug": ["title"]}
    readonly_fields = ["created_at", "artifacts_purged_at"]
    fieldsets = [
        (None, {"fields": ["slug", "kind", "title", "description", "created_at"]}),
        ("Contest phase", {"fields": ["contest", "phase_order", "phase_name"]}),
        ("Window", {"fields": ["opens_at", "closes_at"]}),
        ("Pass gate", {"fields": ["cohort_size", "pass_min_matches"]}),
        (
            "Attempts",
            {"fields": ["attempts_per_day", "attempt_timezone", "practice_per_day"]},
        ),
        (
            "Environments and builds",
            {
                "fields": [
                    "max_environments",
                    "allowed_registries",
                    "build_timeout_s",
                    "max_concurrent_builds",
                    "max_image_bytes",
                    "max_upload_bytes",
                ]
            },
        ),
        (
            "Scored run",
            {
                "fields": [
                    "hardware_class",
                    "score_timeout_s",
                    "run_memory_bytes",
                    "run_pids_limit",
                    "run_tmpfs_bytes",
                    "run_shm_bytes",
                    "run_output_tmpfs_bytes",
                    "runtime_tail_bytes",
                ]
            },
        ),
        (
            "GPU energy (the low_energy anomaly)",
            {"fields": ["reference_energy_per_image_j", "energy_floor_pct"]},
        ),
        ("Teams", {"fields": ["team_size_max", "team_freeze_at"]}),
        ("Verification before ranking", {"fields": ["verify_top", "verify_tolerance_pct"]}),
        ("Retention", {"fields": ["retention_days", "artifacts_purged_at"]}),
    ]

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        # The class a new benchmark has always been offered first (chosen from the rows).
        return {
            "hardware_class": Benchmark.DEFAULT_HARDWARE_CLASS,
            **super().get_changeform_initial_data(request),
        }

    def save_model(
        self, request: HttpRequest, obj: Benchmark, form: ModelForm[Any], change: bool
    ) -> None:
        before = None
        if change:
            before = Benchmark.objects.filter(pk=obj.pk).values(*form.changed_data).first() or {}
        review.benchmark_save(
            benchmark=obj, before=before, actor=request.user, origin=Origin.of(request)
        )

    def delete_model(self, request: HttpRequest, obj: Benchmark) -> None:
        audit_record(
            actor=request.user,
            action="benchmark.delete",
            target=f"benchmark:{obj.slug}",
            origin=Origin.of(request),
        )
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Benchmark]) -> None:
        for benchmark in queryset:
            self.delete_model(request, benchmark)


def _tsv(text: str, filename: str) -> HttpResponse:
    response = HttpResponse(text, content_type="text/tab-separated-values; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@admin.register(Cohort)
class CohortAdmin(admin.ModelAdmin[Cohort]):
    """Counts and digests on sight; members and answers only through audited exports."""

    list_display = ["benchmark", "kind", "members", "created_at"]
    list_filter = ["kind", "benchmark"]
    search_fields = ["benchmark__slug"]
    fields = ["benchmark", "kind", "created_at", "members", "digests"]
    readonly_fields = ["created_at", "members", "digests"]
    actions = ["export_members", "export_answers"]

    def get_readonly_fields(self, request: HttpRequest, obj: Cohort | None = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.used():
            fields += ["benchmark", "kind"]  # frozen for good (the model refuses it too)
        return fields

    def save_model(
        self, request: HttpRequest, obj: Cohort, form: ModelForm[Any], change: bool
    ) -> None:
        if not change:
            super().save_model(request, obj, form, change)
            return
        cohort_change(
            cohort=obj,
            benchmark=obj.benchmark,
            kind=obj.kind,
            actor=request.user,
            origin=Origin.of(request),
        )

    def has_export_cohort_members_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("contests.export_cohort_members")

    def has_export_cohort_answers_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("contests.export_cohort_answers")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Cohort]:
        return super().get_queryset(request).annotate(member_count=Count("items"))

    @admin.display(description="Members", ordering="member_count")
    def members(self, cohort: Cohort) -> int:
        return int(cohort.member_count)  # type: ignore[attr-defined]  # get_queryset annotates

    @admin.display(description="Digests")
    def digests(self, cohort: Cohort) -> str:
        summary = review.cohort_summary(cohort)
        return format_html(
            "<pre>members  sha256:{}\nanswers  sha256:{}</pre>",
            summary.members_sha256,
            summary.answers_sha256,
        )

    @admin.action(
        description="Export the member list (audited)", permissions=["export_cohort_members"]
    )
    def export_members(
        self, request: HttpRequest, queryset: QuerySet[Cohort]
    ) -> HttpResponse | None:
        return self._export(
            request,
            queryset,
            action="export_members",
            title="Export the member list",
            explanation="Positions, canonical names and hashes of the cohort's members. "
            "The export is recorded in the audit log.",
            reason_required=False,
            service=review.cohort_members_export,
            suffix="members",
        )

    @admin.action(
        description="Export the reference answers (reason required, audited)",
        permissions=["export_cohort_answers"],
    )
    def export_answers(
        self, request: HttpRequest, queryset: QuerySet[Cohort]
    ) -> HttpResponse | None:
        return self._export(
            request,
            queryset,
            action="export_answers",
            title="Export the reference answers",
            explanation="The reference answers are the contest's secret: the export is "
            "recorded in the audit log with your reason.",
            reason_required=True,
            service=review.cohort_answers_export,
            suffix="answers",
        )

    def _export(
        self,
        request: HttpRequest,
        queryset: QuerySet[Cohort],
        *,
        action: str,
        title: str,
        explanation: str,
        reason_required: bool,
        service: Any,
        suffix: str,
    ) -> HttpResponse | TemplateResponse | None:
        cohorts = list(queryset.select_related("benchmark"))
        if len(cohorts) != 1:
            self.message_user(request, "Choose exactly one cohort to export.", level="error")
            return None
        reason = reason_given(request, required=reason_required)
        if reason is None:
            return reason_page(
                request,
                self,
                title=title,
                explanation=explanation,
                objects=cohorts,
                reason_required=reason_required,
                action=action,
                submit="Download",
            )
        cohort = cohorts[0]
        text = service(cohort=cohort, actor=request.user, reason=reason, origin=Origin.of(request))
        return _tsv(text, f"{cohort.benchmark.slug}-{cohort.kind}-{suffix}.tsv")


@admin.register(CohortItem)
class CohortItemAdmin(admin.ModelAdmin[CohortItem]):
    """Members, canonical names and hashes: staff only, every view audited; no answers here."""

    list_display = ["cohort", "position", "canonical_name", "sha256"]
    list_filter = ["cohort"]
    search_fields = ["canonical_name", "sha256"]
    list_select_related = ["cohort__benchmark"]
    exclude = ["reference_class"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        audit_record(
            actor=request.user,
            action="cohort.members.view",
            target="cohort items",
            origin=Origin.of(request),
            details={"query": request.GET.urlencode()},
        )
        return super().changelist_view(request, extra_context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        audit_record(
            actor=request.user,
            action="cohort.members.view",
            target=f"cohort item {object_id}",
            origin=Origin.of(request),
        )
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(LeaderboardEntry)
class LeaderboardEntryAdmin(admin.ModelAdmin[LeaderboardEntry]):
    """Derived from the runs by services; read-only here."""

    list_display = [
        "benchmark",
        "entrant",
        "wall_time_ns",
        "matches",
        "total",
        "submission",
        "submitted_at",
    ]
    list_filter = ["benchmark"]
    search_fields = ["entrant__username"]
    list_select_related = ["benchmark", "entrant", "submission"]
    ordering = ["benchmark", "wall_time_ns", "submitted_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class PhaseInline(admin.TabularInline[Benchmark, Contest]):
    """A contest's phases: their order and names (each benchmark keeps its own rules)."""

    model = Benchmark
    fk_name = "contest"
    fields = ["phase_order", "phase_name", "slug", "title", "opens_at", "closes_at"]
    readonly_fields = ["slug", "title", "opens_at", "closes_at"]
    ordering = ["phase_order"]
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a benchmark joins a contest from its own page


@admin.register(Contest)
class ContestAdmin(admin.ModelAdmin[Contest]):
    """A contest's facts (Markdown, shown sanitised) and its phases in order; each change
    is audited (``contest.change``; a phase's order or name: ``benchmark.rules.change``)."""

    list_display = ["slug", "title", "created_at"]
    search_fields = ["slug", "title"]
    fields = ["slug", "title", "summary", "prizes", "timeline", "final_ranking"]
    inlines = [PhaseInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Contest | None = None) -> list[str]:
        return ["slug"] if obj is not None else []  # pages and feeds link to it

    def get_prepopulated_fields(
        self, request: HttpRequest, obj: Contest | None = None
    ) -> dict[str, Sequence[str]]:
        return {} if obj is not None else {"slug": ["title"]}

    def save_model(
        self, request: HttpRequest, obj: Contest, form: ModelForm[Any], change: bool
    ) -> None:
        before = None
        if change:
            before = Contest.objects.filter(pk=obj.pk).values(*form.changed_data).first() or {}
        contest_save(contest=obj, before=before, actor=request.user, origin=Origin.of(request))

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        formset.save(commit=False)  # nothing written yet; the changes are listed
        for benchmark, fields in formset.changed_objects:
            stored = Benchmark.objects.filter(pk=benchmark.pk).values(*fields).first()
            review.benchmark_save(
                benchmark=benchmark,
                before=stored or {},
                actor=request.user,
                origin=Origin.of(request),
            )

    def delete_model(self, request: HttpRequest, obj: Contest) -> None:
        audit_record(
            actor=request.user,
            action="contest.delete",
            target=f"contest:{obj.slug}",
            origin=Origin.of(request),
        )
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Contest]) -> None:
        for contest in queryset:
            self.delete_model(request, contest)


@admin.register(Announcement)
class AnnouncementAdmin(admin.ModelAdmin[Announcement]):
    """Posting here is posting through the API: dated now, audited, mailed once to the
    contest's participants. A correction is audited and not mailed again."""

    list_display = ["title", "contest", "posted_at", "posted_by", "mailed_at"]
    list_filter = ["contest"]
    search_fields = ["title", "body"]
    fields = ["contest", "title", "body", "posted_at", "posted_by", "mailed_at"]
    readonly_fields = ["posted_at", "posted_by", "mailed_at"]

    def get_readonly_fields(
        self, request: HttpRequest, obj: Announcement | None = None
    ) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "contest"] if obj is not None else fields

    def save_model(
        self, request: HttpRequest, obj: Announcement, form: ModelForm[Any], change: bool
    ) -> None:
        origin = Origin.of(request)
        if change:
            announcement_change(
                announcement=obj, actor=request.user, title=obj.title, body=obj.body, origin=origin
            )
            return
        posted = announcement_post(
            contest=obj.contest, actor=request.user, title=obj.title, body=obj.body, origin=origin
        )
        obj.pk, obj.posted_at, obj.posted_by = posted.pk, posted.posted_at, posted.posted_by

    def delete_model(self, request: HttpRequest, obj: Announcement) -> None:
        audit_record(
            actor=request.user,
            action="announcement.delete",
            target=f"announcement:{obj.pk}",
            origin=Origin.of(request),
            details={"contest": obj.contest.slug, "title": obj.title},
        )
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Announcement]) -> None:
        for announcement in queryset:
            self.delete_model(request, announcement)
