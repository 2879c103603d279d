"""Audit events in the admin: read-only, so the record cannot be edited from the site."""

from __future__ import annotations

from django.contrib import admin

from portal.audit.models import AuditEvent
from portal.environments.admin import ReadOnlyMixin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["at", "actor", "action", "target", "remote_addr", "reason"]
    list_filter = ["action"]
    search_fields = ["actor__username", "action", "target", "reason", "remote_addr"]
    list_select_related = ["actor"]
    date_hierarchy = "at"
