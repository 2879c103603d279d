"""What mail an entrant wants from Podium. No row means the defaults (everything on)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class NotificationPreference(models.Model):
    """One entrant's mail preferences, created the first time they change one."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    verdict_emails = models.BooleanField(
        default=True,
        help_text="Mail the entrant when one of their submissions reaches a verdict.",
    )
    announcement_emails = models.BooleanField(
        default=True,
        help_text="Mail the entrant the announcements of the contests they take part in.",
    )

    def __str__(self) -> str:
        return f"notification preferences of {self.user}"
