"""Recording audit events, and where a request came from."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import models
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


def plain(value: Any) -> Any:
    """A stored value as an audit event's JSON holds it (datetimes as ISO 8601)."""
    return value.isoformat() if isinstance(value, dt.datetime) else value


def stored_value(row: models.Model, name: str) -> Any:
    """Field ``name`` of ``row`` as its column holds it: a foreign key's own value (the
    related row's key), as ``QuerySet.values`` gives it, not the related row."""
    return getattr(row, getattr(row._meta.get_field(name), "attname", name))


def field_changes(row: models.Model, before: dict[str, Any]) -> dict[str, list[Any]]:
    """Each field of ``before`` (its stored values, as ``QuerySet.values`` gives them)
    whose value on ``row`` now differs, as ``[old, new]`` in JSON's terms (:func:`plain`);
    empty when nothing changed."""
    changes = {}
    for name, old in before.items():
        new = stored_value(row, name)
        if old != new:
            changes[name] = [plain(old), plain(new)]
    return changes
