"""Audit events in the admin: read-only (no add, change or delete), and the auditors' export."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from portal.audit import export
from portal.audit.models import AuditEvent
from portal.audit.services import Origin
from portal.core.admin_helpers import ReadOnlyMixin
from portal.core.errors import PodiumError


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyMixin, admin.ModelAdmin[AuditEvent]):
    list_display = ["at", "actor", "action", "target", "remote_addr", "reason"]
    list_filter = ["action"]
    search_fields = ["actor__username", "action", "target", "reason", "remote_addr"]
    list_select_related = ["actor"]
    date_hierarchy = "at"
    change_list_template = "admin/audit/auditevent/change_list.html"

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        return {}  # not even the bulk delete

    def get_urls(self) -> list[URLPattern]:
        download = path(
            "export/",
            self.admin_site.admin_view(self.export_view),
            name="audit_auditevent_export",
        )
        return [download, *super().get_urls()]

    def export_view(self, request: HttpRequest) -> HttpResponseBase:
        """A form for the filters; with ``format`` set, the filtered trail as a download.

        Staff without ``audit.export_auditevent`` get 403, form and download alike."""
        if not request.user.has_perm(export.EXPORT_PERMISSION):
            raise PermissionDenied("Exporting the audit trail needs its own permission.")
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Export the audit trail",
            "values": request.GET,
            "actions": sorted(
                set(AuditEvent.objects.order_by().values_list("action", flat=True).distinct())
            ),
        }
        fmt = request.GET.get("format", "")
        if fmt:
            try:
                lines = export.audit_export(
                    fmt=fmt,
                    wanted=export.audit_filter_parse(request.GET),
                    actor=request.user,
                    origin=Origin.of(request),
                )
            except PodiumError as exc:
                context["error"] = exc.detail
            else:
                response = StreamingHttpResponse(lines, content_type=export.FORMATS[fmt])
                response["Content-Disposition"] = f'attachment; filename="podium-audit.{fmt}"'
                return response
        status = 400 if "error" in context else 200
        return TemplateResponse(
            request, "admin/audit/auditevent/export.html", context, status=status
        )
