"""The API's error format: ``{"code": "<machine_code>", "detail": "<sentence>"}``."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal.api.auth import CsrfFailed
from portal.core.errors import PodiumError


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, PodiumError):
        return Response({"code": exc.code, "detail": exc.detail}, status=exc.http_status)
    if isinstance(exc, RequestDataTooBig):
        # Form fields past DATA_UPLOAD_MAX_MEMORY_SIZE (file parts stream to disk and do not
        # count): the same refusal as an upload declared over the limit.
        message = "The request's form fields are too large; send archives as file parts."
        return Response(
            {"code": "archive_too_large", "detail": message},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, SuspiciousOperation):  # too many fields or files in one form
        return Response(
            {"code": "invalid_parameter", "detail": "The request could not be read."},
            status=status.HTTP_400_BAD_REQUEST,
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        code, response.status_code = "not_authenticated", status.HTTP_401_UNAUTHORIZED
    elif isinstance(exc, CsrfFailed):
        code, response.status_code = "csrf_failed", status.HTTP_403_FORBIDDEN
    elif isinstance(exc, exceptions.NotFound | exceptions.PermissionDenied):
        code, response.status_code = "not_found", status.HTTP_404_NOT_FOUND
    elif isinstance(exc, exceptions.ValidationError | exceptions.ParseError):
        code = "invalid_parameter"
    else:
        code = getattr(exc, "default_code", "error")
    detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
    response.data = {"code": code, "detail": _sentence(detail)}
    return response


def _sentence(detail: Any) -> str:
    """Flatten DRF's nested detail into one readable sentence."""
    if isinstance(detail, dict):
        return " ".join(f"{field}: {_sentence(value)}" for field, value in detail.items())
    if isinstance(detail, list):
        return " ".join(_sentence(item) for item in detail)
    return str(detail)
