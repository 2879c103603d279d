"""Reads of entrants' mail preferences."""

from __future__ import annotations

from portal.notifications.models import NotificationPreference


def verdict_emails_wanted(user_id: int) -> bool:
    """Whether the user wants a mail per verdict: yes unless they turned it off."""
    wanted = (
        NotificationPreference.objects.filter(user_id=user_id)
        .values_list("verdict_emails", flat=True)
        .first()
    )
    return True if wanted is None else bool(wanted)


def announcement_emails_wanted(user_id: int) -> bool:
    """Whether the user wants the announcements of their contests: yes unless turned off."""
    wanted = (
        NotificationPreference.objects.filter(user_id=user_id)
        .values_list("announcement_emails", flat=True)
        .first()
    )
    return True if wanted is None else bool(wanted)
