"""Admin pages that ask staff for a reason before an audited action or download.

Two shapes: a changelist action (the selected rows travel as hidden inputs) and a
single-object view (the form posts back to its own URL). Either way nothing happens
until the form comes back with ``apply`` and, where required, a non-blank reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.http import HttpRequest
from django.template.response import TemplateResponse

from portal.audit.services import Origin
from portal.core.errors import PodiumError

T = TypeVar("T")

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
    fields: Sequence[tuple[str, str]] = (),
) -> TemplateResponse:
    """The page asking for the reason (``action``: the changelist action to post back to;
    ``fields``: more text inputs, as (name, label), that the caller reads from the post)."""
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": title,
        "explanation": explanation,
        "objects": list(objects),
        "action": action,
        "submit": submit,
        "reason_required": reason_required,
        "fields": fields,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, TEMPLATE, context)


def reasoned_action(
    request: HttpRequest,
    model_admin: admin.ModelAdmin[Any],
    objects: Iterable[T],
    *,
    action: str,
    title: str,
    explanation: str,
    reason_required: bool,
    apply: Callable[[T, str, Origin], object],
    done: Callable[[int], str],
    fields: Sequence[tuple[str, str]] = (),
) -> TemplateResponse | None:
    """A changelist action that asks why first: the reason page until the form comes back,
    then ``apply(obj, reason, origin)`` for each object. A :class:`PodiumError` on one is
    shown against it and the others go on; ``done(count)`` says how many it did."""
    reason = reason_given(request, required=reason_required)
    if reason is None:
        return reason_page(
            request,
            model_admin,
            title=title,
            explanation=explanation,
            objects=objects,
            reason_required=reason_required,
            action=action,
            fields=fields,
        )
    origin = Origin.of(request)
    count = 0
    for obj in objects:
        try:
            apply(obj, reason, origin)
        except PodiumError as exc:
            model_admin.message_user(request, f"{obj}: {exc.detail}", messages.ERROR)
        else:
            count += 1
    if count:
        model_admin.message_user(request, done(count), messages.SUCCESS)
    return None
