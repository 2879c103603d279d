"""Audit events: who did what to which object, when, from where, and why.

The trail is append-only. Django refuses to change or delete an event (``save`` of a
stored row, ``delete``, and the queryset's ``update`` and ``delete`` all raise
:class:`AuditEventImmutable`), the admin offers no change or delete, the API none at
all, and on PostgreSQL a trigger refuses ``UPDATE`` and ``DELETE`` from any client.
An actor who has events cannot be deleted (deactivate the account instead).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class AuditEventImmutable(Exception):
    """An attempt to change or delete an audit event."""


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def update(self, **kwargs: Any) -> int:
        raise AuditEventImmutable("Audit events cannot be changed.")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AuditEventImmutable("Audit events cannot be deleted.")


class AuditEvent(models.Model):
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+"
    )
    action = models.CharField(max_length=64, db_index=True)
    target = models.CharField(max_length=200)
    remote_addr = models.CharField(max_length=64, blank=True)
    user_agent = models.CharField(max_length=512, blank=True)
    reason = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        # Held by superusers only unless granted (portal.audit.export).
        permissions = [("export_auditevent", "Can export the audit trail")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.action} {self.target}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AuditEventImmutable("Audit events cannot be changed.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AuditEventImmutable("Audit events cannot be deleted.")
