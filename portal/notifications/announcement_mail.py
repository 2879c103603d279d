"""A contest's announcement, mailed once to its participants who have not opted out.

Participants: active entrants with an address who have an environment or a submission on
any phase of the contest. Opting out is the account page's "announcement emails" box
(``NotificationPreference.announcement_emails``; no row: on).

Once only: :func:`announcement_mail_send` first claims the announcement by a conditional
update of ``mailed_at`` (empty to now); a second message, a redelivery or a second
worker finds it claimed and sends nothing. The mails go out after the claim, so a worker
that dies part-way leaves the rest unsent rather than sending anyone two (at most once).
Each participant gets a mail of their own (no address is shown to another), over one SMTP
connection; a failure is logged and never touches the announcement.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage, get_connection
from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from portal.contests.models import Announcement, Contest
from portal.notifications.verdict_mail import site_link

log = logging.getLogger(__name__)


def participants(contest: Contest) -> QuerySet[Any]:
    """Who is mailed ``contest``'s announcements: active entrants with an address and an
    environment or a submission on one of its phases, less those who opted out. One query."""
    on_contest = Q(environments__benchmark__contest=contest) | Q(
        submissions__benchmark__contest=contest
    )
    return (
        get_user_model()
        .objects.filter(on_contest, is_active=True)
        .exclude(email="")
        .exclude(notification_preference__announcement_emails=False)
        .distinct()
        .order_by("pk")
    )


def announcement_message(announcement: Announcement, to: str, username: str) -> EmailMessage:
    """The mail of ``announcement`` to one participant: its title, date and Markdown text."""
    contest = announcement.contest
    page = site_link(reverse("contests:contest_detail", args=[contest.slug]))
    account = site_link(reverse("contests:account"))
    lines = [
        f"Hello {username},",
        "",
        f"{contest.title} has a new announcement, posted "
        f"{announcement.posted_at:%Y-%m-%d %H:%M} UTC:",
        "",
        announcement.title,
        "=" * min(len(announcement.title), 72),
        "",
        announcement.body,
        "",
        f"The contest's page: {page}",
        "",
        "-- ",
        "Podium mails the announcements of the contests you take part in; turn them off on "
        f"your account page: {account}",
    ]
    return EmailMessage(
        f"[Podium] {contest.slug}: {announcement.title}",
        "\n".join(lines) + "\n",
        None,
        [to],
        headers={"Auto-Submitted": "auto-generated"},
    )


def announcement_mail_send(*, announcement_id: int, now: dt.datetime | None = None) -> int:
    """Mail the announcement to its contest's participants, once; how many mails went out.

    Claims the announcement first (``mailed_at``); an announcement already claimed, or
    gone, sends nothing and answers 0. Errors are logged, never raised."""
    claimed = Announcement.objects.filter(pk=announcement_id, mailed_at=None).update(
        mailed_at=now or timezone.now()
    )
    if not claimed:
        log.info("announcement %s is gone or already mailed", announcement_id)
        return 0
    try:
        announcement = Announcement.objects.select_related("contest").get(pk=announcement_id)
        messages = [
            announcement_message(announcement, user.email, user.get_username())
            for user in participants(announcement.contest)
        ]
        if not messages:
            return 0
        with get_connection() as connection:
            return int(connection.send_messages(messages) or 0)
    except Exception:
        log.exception("could not mail announcement %s", announcement_id)
        return 0
