"""Site-level views of the API: the 404 handler (``handler404`` in ``portal/urls.py``: an
unrouted URL under ``/api/`` is the error format's ``not_found``) and the self-hosted docs
page (``/api/docs/``). Each resource's views live in its own module (``portal/api/__init__.py``
lists them).
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views import defaults
from drf_spectacular.generators import SchemaGenerator
from rest_framework import status

# Unknown URLs -----------------------------------------------------------------------


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler404``: under ``/api/`` a URL no route matches (``/api/v1/submissions/abc/``)
    is the error format's ``not_found`` too, not Django's HTML page."""
    if request.path_info.startswith("/api/"):
        body = {"code": "not_found", "detail": "No such endpoint or object."}
        return JsonResponse(body, status=status.HTTP_404_NOT_FOUND)
    return defaults.page_not_found(request, exception or Http404())


# OpenAPI ----------------------------------------------------------------------------


def docs(request: HttpRequest) -> HttpResponse:
    """A self-hosted page listing every operation of the schema (no external assets)."""
    # drf-spectacular's SchemaGenerator and get_schema carry no annotations.
    schema = SchemaGenerator().get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    operations = [
        {
            "method": method.upper(),
            "path": path,
            "id": operation.get("operationId", ""),
            "summary": operation.get("summary") or operation.get("description", ""),
            "responses": ", ".join(sorted(operation.get("responses", {}))),
        }
        for path, item in schema.get("paths", {}).items()
        for method, operation in item.items()
        if isinstance(operation, dict)
    ]
    context = {"info": schema.get("info", {}), "operations": operations}
    return render(request, "api/docs.html", context)
