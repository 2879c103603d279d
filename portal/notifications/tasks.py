"""The verdict mail and the announcement mail, sent by a worker of the ``builds`` queue
(``CELERY_TASK_ROUTES``).

Database and SMTP only (no Docker). Acknowledged late, like every task: a worker that
dies while sending a verdict has the message redelivered, and the mail may go twice; an
announcement is claimed before it is sent, so it goes at most once.
"""

from __future__ import annotations

from celery import shared_task

from portal.core import jobs
from portal.notifications.announcement_mail import announcement_mail_send
from portal.notifications.services import verdict_mail_send


@shared_task(name=jobs.SEND_VERDICT_MAIL, ignore_result=True)
def send_verdict_mail(submission_id: int, status: str) -> None:
    verdict_mail_send(submission_id=submission_id, status=status)


@shared_task(name=jobs.SEND_ANNOUNCEMENT_MAIL, ignore_result=True)
def send_announcement_mail(announcement_id: int) -> None:
    announcement_mail_send(announcement_id=announcement_id)
