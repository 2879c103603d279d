"""Admin pages that ask staff for a reason before an audited action or download.

Two shapes: a changelist action (the selected rows travel as hidden inputs) and a
single-object view (the form posts back to its own URL). Either way nothing happens
until the form comes back with ``apply`` and, where required, a non-blank reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.contrib.admin import helpers
from django.http import HttpRequest
from django.template.response import TemplateResponse

TEMPLATE = "admin/podium/reason.html"


def reason_given(request: HttpRequest, *, required: bool) -> str | None:
    """The submitted reason, or None while the form still has to be (re)shown."""
    if request.method != "POST" or not request.POST.get("apply"):
        return None
    reason = request.POST.get("reason", "").strip()
    if required and not reason:
        return None
    return reason


def reason_page(
    request: HttpRequest,
    model_admin: admin.ModelAdmin[Any],
    *,
    title: str,
    explanation: str,
    objects: Iterable[Any],
    reason_required: bool,
    action: str = "",
    submit: str = "",
) -> TemplateResponse:
    """The page asking for the reason (``action``: the changelist action to post back to)."""
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": title,
        "explanation": explanation,
        "objects": list(objects),
        "action": action,
        "submit": submit,
        "reason_required": reason_required,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, TEMPLATE, context)
