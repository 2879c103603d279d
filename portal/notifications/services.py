"""Mail to entrants about their own submissions, and the preference that turns it off.

One mail per verdict: :func:`verdict_mail_on_commit` is called by
``portal.submissions.services.submission_transition`` right after the conditional update
that moved a submission into a final status. That update succeeds once per verdict (a
redelivered task, the reaper or a retry finds the status already changed and changes
nothing, so never calls it), and the mail is queued only after the deciding transaction
commits (nothing is sent for a verdict that rolled back).

The mail is a task of its own (``portal.notifications.send_verdict_mail``, on the
``builds`` queue beside the reaper): a scoring host records verdicts while it holds its
machine (builds frozen, the next run waiting), so it never waits on an SMTP server. A
broker that refuses the message loses that one mail; a worker that dies while sending it
may send it again (tasks are acknowledged late).

Mail problems never touch the verdict: the mail is queued after the commit, a broker that
refuses it is logged, and any error of the send is logged and swallowed.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.mail import EmailMessage

from portal.core import jobs
from portal.notifications.models import NotificationPreference
from portal.notifications.selectors import verdict_emails_wanted
from portal.notifications.verdict_mail import verdict_mail
from portal.submissions.models import Submission

log = logging.getLogger(__name__)


def notification_preference_set(
    *, user: Any, verdict_emails: bool, announcement_emails: bool | None = None
) -> NotificationPreference:
    """Store the user's choice of verdict mail and, when given, of announcement mail
    (creating their preferences on first use)."""
    choices = {"verdict_emails": verdict_emails}
    if announcement_emails is not None:
        choices["announcement_emails"] = announcement_emails
    preference, _ = NotificationPreference.objects.update_or_create(
        user_id=user.pk, defaults=choices
    )
    return preference


def verdict_mail_on_commit(*, submission_id: int, status: str) -> None:
    """Queue the entrant's mail about ``status`` once the current transaction commits.

    Call it once per verdict, inside the transaction that wrote it (see the module doc);
    a status that is not final is ignored.
    """
    if status not in Submission.FINAL:
        return
    jobs.enqueue(jobs.SEND_VERDICT_MAIL, submission_id, status, robust=True)


def verdict_mail_on_status(submission_id: int, status: str) -> None:
    """:func:`verdict_mail_on_commit` as a listener of every status a submission enters
    (``portal.submissions.hooks.status_listen``, registered in ``apps.py``)."""
    verdict_mail_on_commit(submission_id=submission_id, status=status)


def verdict_mail_send(*, submission_id: int, status: str) -> bool:
    """Send the verdict mail now, unless the submission's status is no longer ``status``
    (staff requeued it since: its next verdict mails; or a stray message), or the entrant
    opted out, is inactive or has no address. True when a mail went out; any failure is
    logged and returns False."""
    try:
        submission = (
            Submission.objects.select_related("entrant", "benchmark")
            .filter(pk=submission_id)
            .first()
        )
        if submission is None or submission.status != status:
            log.info("submission %s is no longer %s: its mail is not sent", submission_id, status)
            return False
        entrant = submission.entrant
        if not entrant.is_active or not entrant.email:
            log.info("verdict of submission %s: entrant has no address to mail", submission_id)
            return False
        if not verdict_emails_wanted(int(entrant.pk)):
            return False
        mail = verdict_mail(submission, status)
        EmailMessage(
            mail.subject, mail.body, None, [mail.to], headers={"Auto-Submitted": "auto-generated"}
        ).send()
    except Exception:
        log.exception("could not mail the verdict %s of submission %s", status, submission_id)
        return False
    return True
