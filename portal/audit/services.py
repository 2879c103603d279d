"""Recording audit events."""

from __future__ import annotations

from typing import Any

from portal.audit.models import AuditEvent


def audit_record(
    *,
    actor: Any,
    action: str,
    target: str,
    remote_addr: str = "",
    reason: str = "",
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one audit event; callers record it in the same transaction as the access."""
    return AuditEvent.objects.create(
        actor=actor,
        action=action,
        target=target,
        remote_addr=remote_addr,
        reason=reason,
        details=details or {},
    )
