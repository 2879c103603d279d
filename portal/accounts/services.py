"""Personal API tokens: issue and revoke."""

from __future__ import annotations

from typing import Any

from portal.accounts.models import ApiToken
from portal.core import errors


def token_create(*, user: Any, label: str = "") -> ApiToken:
    """Issue a new token for ``user`` (already authenticated by the caller)."""
    return ApiToken.objects.create(user=user, label=label.strip()[:100])


def token_revoke(*, user: Any, token_id: int) -> None:
    """Revoke one of ``user``'s tokens; another user's token is ``not_found``."""
    deleted, _ = ApiToken.objects.filter(pk=token_id, user=user).delete()
    if not deleted:
        raise errors.NotFound("No such token.")
