"""Environments and build network checks in the admin: read-only, since every transition
goes through services (the checks are written only by the build worker)."""

from __future__ import annotations

from django.contrib import admin

from portal.core import storage
from portal.core.admin_helpers import ReadOnlyMixin, log_tail_html
from portal.environments.models import BuildNetworkCheck, Environment, EnvironmentEvent


class EnvironmentEventInline(ReadOnlyMixin, admin.TabularInline[EnvironmentEvent, Environment]):
    model = EnvironmentEvent
    fields = ["status", "at", "note"]
    extra = 0


@admin.register(Environment)
class EnvironmentAdmin(ReadOnlyMixin, admin.ModelAdmin[Environment]):
    list_display = ["id", "name", "owner", "benchmark", "status", "image_bytes", "created_at"]
    list_filter = ["status", "benchmark"]
    search_fields = ["name", "owner__username", "image_digest"]
    list_select_related = ["owner", "benchmark"]
    date_hierarchy = "created_at"
    inlines = [EnvironmentEventInline]
    readonly_fields = ["build_log_tail"]

    @admin.display(description=f"Build log (last {storage.LOG_TAIL_LINES} lines)")
    def build_log_tail(self, environment: Environment) -> str:
        return log_tail_html(storage.environment_build_log(environment.pk))


@admin.register(EnvironmentEvent)
class EnvironmentEventAdmin(ReadOnlyMixin, admin.ModelAdmin[EnvironmentEvent]):
    list_display = ["environment", "status", "at", "note"]
    list_filter = ["status"]
    search_fields = ["environment__name", "environment__owner__username", "note"]
    list_select_related = ["environment__owner"]


@admin.register(BuildNetworkCheck)
class BuildNetworkCheckAdmin(ReadOnlyMixin, admin.ModelAdmin[BuildNetworkCheck]):
    list_display = ["host", "enforced", "checked_at", "problems"]
    list_filter = ["enforced"]
    search_fields = ["host", "problems"]
    fields = ["host", "enforced", "checked_at", "problems", "policy"]
