"""The API's authentication: ``Authorization: Token <key>`` against ApiToken rows, and
the browser's session, whose unsafe requests must carry the CSRF token."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone
from drf_spectacular.authentication import SessionScheme as SpectacularSessionScheme
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from portal.accounts.models import ApiToken

# ``last_used_at`` is kept to the minute: no database write on every request.
LAST_USED_PRECISION = dt.timedelta(minutes=1)


class ApiTokenAuthentication(authentication.TokenAuthentication):
    keyword = "Token"

    def authenticate_credentials(self, key: str) -> tuple[Any, ApiToken]:
        token = ApiToken.objects.select_related("user").filter(key=key).first()
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at >= LAST_USED_PRECISION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token


class CsrfFailed(exceptions.PermissionDenied):
    """A session-authenticated unsafe request without a valid CSRF token (403
    ``csrf_failed``): the session is real, so nothing is hidden behind ``not_found``."""

    default_code = "csrf_failed"


class SessionAuthentication(authentication.SessionAuthentication):
    """DRF's session authentication, whose CSRF refusal says what it is."""

    def enforce_csrf(self, request: Request) -> None:
        try:
            super().enforce_csrf(request)
        except exceptions.PermissionDenied as exc:
            raise CsrfFailed(
                "The request has no valid CSRF token: send the csrftoken cookie's value "
                "in the X-CSRFToken header, or sign in with an API token instead."
            ) from exc


# drf-spectacular registers an extension from its untyped __init_subclass__.
class SessionScheme(SpectacularSessionScheme):  # type: ignore[no-untyped-call]
    """The schema's ``cookieAuth`` for :class:`SessionAuthentication` (the extension
    drf-spectacular has matches DRF's own class only)."""

    target_class = "portal.api.auth.SessionAuthentication"
