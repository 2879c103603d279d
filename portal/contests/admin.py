"""Benchmarks and cohorts in the admin. Reading a cohort's members is audited."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from portal.audit.services import audit_record
from portal.contests.models import Benchmark, Cohort, CohortItem, LeaderboardEntry


@admin.register(Benchmark)
class BenchmarkAdmin(admin.ModelAdmin):
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
    readonly_fields = ["created_at"]
    fieldsets = [
        (None, {"fields": ["slug", "title", "description", "created_at"]}),
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
                    "score_timeout_s",
                    "run_memory_bytes",
                    "run_pids_limit",
                    "run_tmpfs_bytes",
                    "run_output_tmpfs_bytes",
                ]
            },
        ),
    ]


@admin.register(Cohort)
class CohortAdmin(admin.ModelAdmin):
    list_display = ["benchmark", "kind", "created_at"]
    list_filter = ["kind", "benchmark"]
    search_fields = ["benchmark__slug"]
    readonly_fields = ["created_at"]


def _remote_addr(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR", ""))


@admin.register(CohortItem)
class CohortItemAdmin(admin.ModelAdmin):
    """Members, canonical names and reference answers: staff only, and every read is audited."""

    list_display = ["cohort", "position", "canonical_name", "reference_class", "sha256"]
    list_filter = ["cohort"]
    search_fields = ["canonical_name", "sha256"]
    list_select_related = ["cohort__benchmark"]

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
            action="cohort.list",
            target="cohort items",
            remote_addr=_remote_addr(request),
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
            action="cohort.read",
            target=f"cohort item {object_id}",
            remote_addr=_remote_addr(request),
        )
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(LeaderboardEntry)
class LeaderboardEntryAdmin(admin.ModelAdmin):
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
