"""Contests and announcements in the admin: contest staff edit the facts and post
announcements (posting there is posting through the API: audited, mailed after the
commit); the phases' order is edited on the contest's page, audited as a rule change."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.contests.models import Announcement, Benchmark, Contest
from portal.core import jobs
from tests import factories

DAY = dt.timedelta(days=1)


@pytest.fixture
def contest(db):
    now = timezone.now()
    return factories.phased_contest(
        (now - 5 * DAY, now - DAY), (now, now + 5 * DAY), slug="vision", title="Vision"
    )


@pytest.fixture
def contest_staff(db):
    user = factories.UserFactory(username="charlie", is_staff=True)
    user.groups.add(Group.objects.get(name="contest staff"))
    return user


FACTS = {
    "title": "Vision",
    "summary": "",
    "prizes": "5,000 USD",
    "timeline": "",
    "final_ranking": "The final rerun decides.",
}


def test_contest_staff_post_an_announcement_from_the_admin(
    client, contest, contest_staff, sent, django_capture_on_commit_callbacks
):
    client.force_login(contest_staff)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("admin:contests_announcement_add"),
            {"contest": contest.pk, "title": "Phase 2 is open", "body": "Go *now*."},
            HTTP_USER_AGENT="staff laptop",
        )

    assert response.status_code == 302, response.content.decode()[:2000]
    announcement = Announcement.objects.get()
    assert (announcement.title, announcement.posted_by) == ("Phase 2 is open", contest_staff)
    event = AuditEvent.objects.get()
    assert (event.action, event.target, event.user_agent) == (
        "announcement.post",
        f"announcement:{announcement.pk}",
        "staff laptop",
    )
    assert sent == [(jobs.SEND_ANNOUNCEMENT_MAIL, (announcement.pk,))]
    page = client.get("/contests/vision/").content.decode()
    assert "<p>Go <em>now</em>.</p>" in page


def test_a_correction_in_the_admin_is_audited_and_keeps_the_date(
    client, contest, contest_staff, sent
):
    client.force_login(contest_staff)
    client.post(
        reverse("admin:contests_announcement_add"),
        {"contest": contest.pk, "title": "T", "body": "old"},
    )
    announcement = Announcement.objects.get()

    client.post(
        reverse("admin:contests_announcement_change", args=[announcement.pk]),
        {"title": "T", "body": "new"},
    )

    stored = Announcement.objects.get()
    assert (stored.body, stored.posted_at) == ("new", announcement.posted_at)
    change = AuditEvent.objects.get(action="announcement.change")
    assert change.details["changes"] == {"body": ["old", "new"]}


def test_contest_staff_edit_the_facts_audited(client, contest, contest_staff):
    client.force_login(contest_staff)

    response = client.post(reverse("admin:contests_contest_change", args=[contest.pk]), FACTS)

    assert response.status_code == 302
    contest.refresh_from_db()
    assert contest.prizes == "5,000 USD"
    event = AuditEvent.objects.get()
    assert (event.action, event.target, event.actor) == (
        "contest.change",
        "contest:vision",
        contest_staff,
    )
    assert event.details == {
        "changes": {
            "prizes": ["", "5,000 USD"],
            "final_ranking": ["", "The final rerun decides."],
        }
    }


def test_contest_staff_neither_create_contests_nor_reorder_phases(client, contest, contest_staff):
    client.force_login(contest_staff)

    add = client.get(reverse("admin:contests_contest_add"))
    page = client.get(reverse("admin:contests_contest_change", args=[contest.pk]))

    assert add.status_code == 403
    assert page.status_code == 200
    assert 'name="phases-0-phase_order"' not in page.content.decode()


def test_staff_reorder_the_phases_on_the_contest_page_audited(client, contest, staff):
    client.force_login(staff)
    first, second = contest.phases.order_by("phase_order")
    data = {
        **FACTS,
        "phases-TOTAL_FORMS": "2",
        "phases-INITIAL_FORMS": "2",
        "phases-MIN_NUM_FORMS": "0",
        "phases-MAX_NUM_FORMS": "1000",
        "phases-0-id": first.pk,
        "phases-0-contest": contest.pk,
        "phases-0-phase_order": "1",
        "phases-0-phase_name": "Warm-up",
        "phases-1-id": second.pk,
        "phases-1-contest": contest.pk,
        "phases-1-phase_order": "5",
        "phases-1-phase_name": "",
    }

    response = client.post(reverse("admin:contests_contest_change", args=[contest.pk]), data)

    assert response.status_code == 302, response.content.decode()[:3000]
    assert list(
        Benchmark.objects.filter(contest=contest)
        .order_by("phase_order")
        .values_list("slug", "phase_order", "phase_name")
    ) == [("vision-p1", 1, "Warm-up"), ("vision-p2", 5, "")]
    changes = {
        event.target: event.details["changes"]
        for event in AuditEvent.objects.filter(action="benchmark.rules.change")
    }
    assert changes == {
        "benchmark:vision-p1": {"phase_name": ["", "Warm-up"]},
        "benchmark:vision-p2": {"phase_order": [2, 5]},
    }
    assert Contest.objects.get().prizes == "5,000 USD"
