"""Final settings (nomination deadline, runs), the published standings and the entrants'
write-ups in the admin.

Publishing and corrections go through the audited services (the API's staff endpoints);
the admin shows the frozen rows read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from portal.admin_helpers import ReadOnlyMixin
from portal.standings.models import Correction, FinalSettings, StandingRow, Standings, WriteUp


@admin.register(FinalSettings)
class FinalSettingsAdmin(admin.ModelAdmin[FinalSettings]):
    list_display = ["benchmark", "nomination_deadline", "final_runs", "extra_runs"]


class StandingRowInline(admin.TabularInline[StandingRow, Standings]):
    model = StandingRow
    extra = 0
    can_delete = False
    readonly_fields = [
        "position",
        "rank",
        "entrant",
        "submission_id",
        "wall_time_ns",
        "runs",
        "tied",
    ]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class CorrectionInline(admin.TabularInline[Correction, Standings]):
    model = Correction
    extra = 0
    can_delete = False
    readonly_fields = ["at", "by", "reason", "previous_digest", "digest"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Standings)
class StandingsAdmin(admin.ModelAdmin[Standings]):
    list_display = ["benchmark", "source", "published_at", "digest"]
    readonly_fields = ["benchmark", "source", "published_at", "published_by", "reason", "digest"]
    inlines = [StandingRowInline, CorrectionInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WriteUp)
class WriteUpAdmin(ReadOnlyMixin, admin.ModelAdmin[WriteUp]):
    """Who wrote up which submission; the PDF itself is read through the API, with a
    reason when it is not public (audited)."""

    list_display = ["submission", "entrant", "benchmark", "public", "size_bytes", "uploaded_at"]
    list_filter = ["benchmark", "public"]
    search_fields = ["entrant__username", "submission__id"]
    readonly_fields = [
        "benchmark",
        "entrant",
        "submission",
        "file_name",
        "size_bytes",
        "sha256",
        "public",
        "uploaded_at",
    ]
