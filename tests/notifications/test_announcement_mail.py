"""Announcement mail: each participant of the contest who has not opted out gets one mail
of their own, once, whatever the retries; others get nothing."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from portal.contests.announcements import announcement_post
from portal.contests.models import Announcement
from portal.notifications.announcement_mail import announcement_mail_send, participants
from portal.notifications.models import NotificationPreference
from portal.notifications.services import notification_preference_set
from portal.notifications.tasks import send_announcement_mail
from portal.submissions.models import Submission
from tests import factories, smtp

SITE = "https://podium.example.org"


@pytest.fixture(autouse=True)
def site(settings: Any) -> None:
    settings.PODIUM_SITE_URL = SITE


@pytest.fixture
def contest(db):
    now = timezone.now()
    day = timezone.timedelta(days=1)
    return factories.phased_contest(
        (now - 5 * day, now - day), (now, now + 5 * day), slug="vision", title="Vision"
    )


def _submission(entrant: Any, benchmark: Any, environment: Any) -> Submission:
    return Submission.objects.create(
        entrant=entrant,
        benchmark=benchmark,
        environment=environment,
        submitted_at=timezone.now(),
        source_name="s.tar.gz",
        source_format="tar.gz",
        source_sha256="0" * 64,
        source_bytes=1,
    )


@pytest.fixture
def people(contest, staff):
    """Who took part how: alice (an environment on phase 1), bob (a submission on phase 2
    only), carol (took part, opted out), dave (another contest), erin (inactive), frank
    (no address), gina (an environment, announcement mail on, verdict mail off)."""
    first, second = contest.phases.order_by("phase_order")
    elsewhere = factories.BenchmarkFactory(slug="elsewhere")
    users: dict[str, Any] = {
        name: factories.UserFactory(username=name)
        for name in ("alice", "bob", "carol", "dave", "erin", "frank", "gina")
    }
    factories.EnvironmentFactory(owner=users["alice"], benchmark=first)
    factories.EnvironmentFactory(owner=users["alice"], benchmark=second)
    bob_env = factories.EnvironmentFactory(owner=users["bob"], benchmark=elsewhere)
    _submission(users["bob"], second, bob_env)
    _submission(users["bob"], second, bob_env)
    factories.EnvironmentFactory(owner=users["carol"], benchmark=first)
    notification_preference_set(user=users["carol"], verdict_emails=True, announcement_emails=False)
    factories.EnvironmentFactory(owner=users["dave"], benchmark=elsewhere)
    for name in ("erin", "frank", "gina"):
        factories.EnvironmentFactory(owner=users[name], benchmark=second)
    users["erin"].is_active = False
    users["erin"].save(update_fields=["is_active"])
    users["frank"].email = ""
    users["frank"].save(update_fields=["email"])
    notification_preference_set(user=users["gina"], verdict_emails=False)
    return users


def _post(contest: Any, staff: Any, **fields: Any) -> Announcement:
    fields = {"title": "Phase 2 is open", "body": "Read the **new** limits.", **fields}
    return announcement_post(contest=contest, actor=staff, **fields)


def test_the_participants_are_those_with_work_on_a_phase_who_did_not_opt_out(contest, people):
    assert [user.username for user in participants(contest)] == ["alice", "bob", "gina"]


def test_each_participant_gets_one_mail_of_their_own(contest, people, staff):
    announcement = _post(contest, staff)

    sent = announcement_mail_send(announcement_id=announcement.pk)

    assert sent == 3
    assert sorted(tuple(message.to) for message in mail.outbox) == [
        ("alice@example.com",),
        ("bob@example.com",),
        ("gina@example.com",),
    ]
    message = next(m for m in mail.outbox if m.to == ["bob@example.com"])
    assert message.subject == "[Podium] vision: Phase 2 is open"
    assert "Hello bob," in message.body
    assert "Read the **new** limits." in message.body
    assert f"{SITE}/contests/vision/" in message.body
    assert f"{SITE}/account/" in message.body
    assert message.extra_headers["Auto-Submitted"] == "auto-generated"
    announcement.refresh_from_db()
    assert announcement.mailed_at is not None


def test_a_second_send_mails_nobody_again(contest, people, staff):
    announcement = _post(contest, staff)

    send_announcement_mail(announcement.pk)  # the task, as the builds worker runs it
    send_announcement_mail(announcement.pk)  # a redelivered message
    third = announcement_mail_send(announcement_id=announcement.pk)

    assert third == 0
    assert len(mail.outbox) == 3


def test_an_announcement_gone_before_its_mail_sends_nothing(contest, people, staff):
    announcement = _post(contest, staff)
    Announcement.objects.filter(pk=announcement.pk).delete()

    assert announcement_mail_send(announcement_id=announcement.pk) == 0
    assert mail.outbox == []


def test_a_contest_without_participants_sends_nothing_and_stays_claimed(contest, staff):
    announcement = _post(contest, staff)

    assert announcement_mail_send(announcement_id=announcement.pk) == 0
    assert Announcement.objects.get(pk=announcement.pk).mailed_at is not None


def test_an_smtp_server_that_refuses_is_logged_and_nothing_else_changes(
    contest, people, staff, settings, caplog
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", smtp.closed_port()
    announcement = _post(contest, staff)

    assert announcement_mail_send(announcement_id=announcement.pk) == 0
    assert f"could not mail announcement {announcement.pk}" in caplog.text
    stored = Announcement.objects.get(pk=announcement.pk)
    assert (stored.title, stored.body) == (announcement.title, announcement.body)


def test_through_a_real_smtp_server_no_one_sees_another_address(contest, people, staff, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    announcement = _post(contest, staff)
    with smtp.smtp_server() as server:
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
        sent = announcement_mail_send(announcement_id=announcement.pk)

    assert sent == 3
    assert sorted(rcpt for rcpt, _ in server.messages) == [
        ["alice@example.com"],
        ["bob@example.com"],
        ["gina@example.com"],
    ]
    for rcpt, message in server.messages:
        assert message["To"] == rcpt[0]
        assert "Phase 2 is open" in message["Subject"]


def test_the_account_page_turns_announcement_mail_off_and_on(client, alice):
    client.force_login(alice)
    page = client.get("/account/").content.decode()
    (box,) = re.findall(r"<input [^>]*name=\"announcement_emails\"[^>]*>", page)
    assert " checked" in box  # on unless turned off

    off = client.post("/account/", {"verdict_emails": "on"}, follow=True)

    assert NotificationPreference.objects.get(user=alice).announcement_emails is False
    assert NotificationPreference.objects.get(user=alice).verdict_emails is True
    assert "Announcement emails are off." in off.content.decode()
    client.post("/account/", {"verdict_emails": "on", "announcement_emails": "on"})
    assert NotificationPreference.objects.get(user=alice).announcement_emails is True
