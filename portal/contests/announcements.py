"""Staff writes of a contest: posting and editing announcements, editing its facts.

Each is audited in the same transaction as the write. A posted announcement is mailed to
the contest's participants by a task sent after the commit
(``portal.notifications.send_announcement_mail``, by name through ``portal.core.jobs``); the
send itself claims the announcement once (``Announcement.mailed_at``), so a redelivered
message mails nobody twice.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.contests.models import Announcement, Contest
from portal.core import errors, jobs

POST_PERMISSION = "contests.add_announcement"
CHANGE_PERMISSION = "contests.change_announcement"
TITLE_MAX = Announcement._meta.get_field("title").max_length or 200
BODY_MAX = 20_000
FACTS = ("title", "summary", "prizes", "timeline", "final_ranking")


def _checked(title: str, body: str) -> tuple[str, str]:
    title, body = title.strip(), body.strip()
    if not title or len(title) > TITLE_MAX:
        raise errors.InvalidParameter(
            f"An announcement needs a title of 1 to {TITLE_MAX} characters."
        )
    if not body or len(body) > BODY_MAX:
        raise errors.InvalidParameter(
            f"An announcement needs a body of 1 to {BODY_MAX:,} characters."
        )
    return title, body


def _target(announcement: Announcement) -> str:
    return f"announcement:{announcement.pk}"


def announcement_post(
    *,
    contest: Contest,
    actor: Any,
    title: str,
    body: str,
    origin: Origin = NOWHERE,
    now: dt.datetime | None = None,
) -> Announcement:
    """Post an announcement to ``contest``, dated now, and queue its mail after the commit.

    Needs ``contests.add_announcement`` (``permission_denied`` otherwise, checked first);
    a blank or oversized title or body is ``invalid_parameter``. Audited
    (``announcement.post``).
    """
    errors.staff_permission_check(actor, POST_PERMISSION)
    title, body = _checked(title, body)
    with transaction.atomic():
        announcement = Announcement.objects.create(
            contest=contest,
            title=title,
            body=body,
            posted_at=now or timezone.now(),
            posted_by=actor if actor.is_authenticated else None,
        )
        audit_record(
            actor=actor,
            action="announcement.post",
            target=_target(announcement),
            origin=origin,
            details={"contest": contest.slug, "title": title},
        )
        jobs.enqueue(jobs.SEND_ANNOUNCEMENT_MAIL, announcement.pk, robust=True)
    return announcement


def announcement_change(
    *, announcement: Announcement, actor: Any, title: str, body: str, origin: Origin = NOWHERE
) -> Announcement:
    """Correct an announcement's title or body (its date stays; it is not mailed again).

    Needs ``contests.change_announcement``; audited (``announcement.change``) with the old
    and new text when anything changed."""
    errors.staff_permission_check(actor, CHANGE_PERMISSION)
    title, body = _checked(title, body)
    with transaction.atomic():
        stored = Announcement.objects.select_for_update().get(pk=announcement.pk)
        changes = {
            name: [old, new]
            for name, old, new in (("title", stored.title, title), ("body", stored.body, body))
            if old != new
        }
        announcement.title, announcement.body = title, body
        if changes:
            Announcement.objects.filter(pk=announcement.pk).update(title=title, body=body)
            audit_record(
                actor=actor,
                action="announcement.change",
                target=_target(announcement),
                origin=origin,
                details={"contest": stored.contest.slug, "changes": changes},
            )
    return announcement


def contest_save(
    *, contest: Contest, before: dict[str, Any] | None, actor: Any, origin: Origin = NOWHERE
) -> Contest:
    """Save a contest created or edited by staff, recording the change of its facts.

    ``before``: the stored values of the edited fields (None for a new contest); the
    event's details map each changed field to ``[old, new]``; nothing changed, nothing
    recorded."""
    with transaction.atomic():
        contest.save()
        if before is None:
            audit_record(
                actor=actor,
                action="contest.create",
                target=f"contest:{contest.slug}",
                origin=origin,
            )
            return contest
        changes = {
            name: [old, getattr(contest, name)]
            for name, old in before.items()
            if old != getattr(contest, name)
        }
        if changes:
            audit_record(
                actor=actor,
                action="contest.change",
                target=f"contest:{contest.slug}",
                origin=origin,
                details={"changes": changes},
            )
    return contest
