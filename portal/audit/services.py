"""Recording audit events, and where a request came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest

from portal.audit.models import AuditEvent

USER_AGENT_MAX = AuditEvent._meta.get_field("user_agent").max_length or 512


@dataclass(frozen=True)
class Origin:
    """Where an audited action came from: the client's address and user agent."""

    remote_addr: str = ""
    user_agent: str = ""

    @classmethod
    def of(cls, request: HttpRequest) -> Origin:
        """The origin of a Django or DRF request (REMOTE_ADDR as the server saw it)."""
        meta = request.META
        return cls(
            remote_addr=str(meta.get("REMOTE_ADDR", "")),
            user_agent=str(meta.get("HTTP_USER_AGENT", ""))[:USER_AGENT_MAX],
        )


NOWHERE = Origin()


def audit_record(
    *,
    actor: Any,
    action: str,
    target: str,
    origin: Origin = NOWHERE,
    reason: str = "",
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one audit event; callers record it in the same transaction as the access.

    ``actor`` is None for the system's own actions (a management command run by an
    operator on the host). Events are never changed or deleted afterwards.
    """
    return AuditEvent.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        action=action,
        target=target,
        remote_addr=origin.remote_addr,
        user_agent=origin.user_agent,
        reason=reason,
        details=details or {},
    )
