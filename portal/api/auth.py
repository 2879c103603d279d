"""Token authentication: ``Authorization: Token <key>`` against ApiToken rows."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions

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
