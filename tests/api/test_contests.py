"""The contest endpoints: the list, one contest (phases in order, facts, latest
announcements) and its announcements (public, paginated; posted by contest staff only,
audited)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from portal.api.common import PagePagination
from portal.audit.models import AuditEvent
from portal.contests.announcements import announcement_post
from portal.contests.models import Announcement
from portal.core import jobs
from tests import factories

DAY = dt.timedelta(days=1)


@pytest.fixture
def contest(db):
    now = timezone.now()
    contest = factories.phased_contest(
        (now - 9 * DAY, now - 5 * DAY),
        (now - DAY, now + DAY),
        (now + 5 * DAY, now + 9 * DAY),
        slug="vision",
        title="Vision Challenge",
        prizes="**5,000 USD** <script>alert(1)</script>",
        final_ranking="The final rerun decides.",
    )
    contest.phases.filter(phase_order=1).update(phase_name="Warm-up")
    return contest


@pytest.fixture
def contest_staff(db):
    user = factories.UserFactory(username="charlie", is_staff=True)
    user.groups.add(Group.objects.get(name="contest staff"))
    return user


def test_the_list_gives_each_contest_with_its_phases_in_order(contest, anon):
    factories.BenchmarkFactory(slug="lone")  # a contest of one is not in this list

    response = anon.get("/api/v1/contests/")

    assert response.status_code == 200
    (row,) = response.json()
    assert (row["slug"], row["title"], row["status"]) == ("vision", "Vision Challenge", "open")
    assert [(p["order"], p["name"], p["slug"], p["status"]) for p in row["phases"]] == [
        (1, "Warm-up", "vision-p1", "closed"),
        (2, "Phase 2", "vision-p2", "open"),
        (3, "Phase 3", "vision-p3", "upcoming"),
    ]
    first = contest.phases.get(phase_order=1)
    assert dt.datetime.fromisoformat(row["phases"][0]["opens_at"]) == first.opens_at
    assert dt.datetime.fromisoformat(row["opens_at"]) == first.opens_at


def test_one_contest_gives_its_facts_and_latest_announcements(contest, anon, staff):
    for days in range(7):
        announcement_post(
            contest=contest,
            actor=staff,
            title=f"news {days}",
            body="[more](https://podium.example) <img src=x onerror=alert(1)>",
            now=timezone.now() - dt.timedelta(days=days),
        )

    body = anon.get("/api/v1/contests/vision/").json()

    assert [phase["slug"] for phase in body["phases"]] == ["vision-p1", "vision-p2", "vision-p3"]
    assert body["facts"]["prizes"] == "**5,000 USD** <script>alert(1)</script>"
    assert body["facts"]["final_ranking"] == "The final rerun decides."
    assert body["facts_html"]["prizes"] == "<p><strong>5,000 USD</strong> </p>"
    assert [a["title"] for a in body["announcements"]] == [f"news {d}" for d in range(5)]
    latest = body["announcements"][0]
    assert latest["contest"] == "vision"
    assert "onerror" not in latest["body_html"] and "<img" not in latest["body_html"]
    assert 'href="https://podium.example"' in latest["body_html"]


def test_an_unknown_contest_is_not_found(db, anon):
    for url in ("/api/v1/contests/nope/", "/api/v1/contests/nope/announcements/"):
        response = anon.get(url)
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"


def test_announcements_are_public_newest_first_and_paginated(contest, anon, staff, monkeypatch):
    monkeypatch.setattr(PagePagination, "page_size", 2)
    now = timezone.now()
    for days in (3, 1, 2):
        announcement_post(
            contest=contest, actor=staff, title=f"day {days}", body="b", now=now - days * DAY
        )

    first = anon.get("/api/v1/contests/vision/announcements/").json()
    second = anon.get("/api/v1/contests/vision/announcements/", {"page": 2}).json()

    assert first["count"] == 3
    assert [row["title"] for row in first["results"]] == ["day 1", "day 2"]
    assert [row["title"] for row in second["results"]] == ["day 3"]
    assert second["next"] is None


def test_contest_staff_post_an_announcement_audited(contest, contest_staff, client_for, sent):
    response = client_for(contest_staff).post(
        "/api/v1/contests/vision/announcements/",
        {"title": "Phase 3 opens Friday", "body": "Read the *new* limits."},
        HTTP_USER_AGENT="staff laptop",
    )

    assert response.status_code == 201, response.content
    body = response.json()
    announcement = Announcement.objects.get()
    assert body["id"] == announcement.pk
    assert body["body_html"] == "<p>Read the <em>new</em> limits.</p>"
    assert announcement.posted_by == contest_staff
    event = AuditEvent.objects.get()
    assert (event.action, event.actor, event.user_agent) == (
        "announcement.post",
        contest_staff,
        "staff laptop",
    )


def test_staff_without_the_permission_are_refused(contest, client_for, sent):
    plain = factories.UserFactory(username="pat", is_staff=True)

    response = client_for(plain).post(
        "/api/v1/contests/vision/announcements/", {"title": "t", "body": "b"}
    )

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert not Announcement.objects.exists()
    assert not AuditEvent.objects.exists()


def test_to_an_entrant_posting_does_not_exist(contest, alice, client_for, anon):
    entrant = client_for(alice).post(
        "/api/v1/contests/vision/announcements/", {"title": "t", "body": "b"}
    )
    nobody = anon.post("/api/v1/contests/vision/announcements/", {"title": "t", "body": "b"})

    assert (entrant.status_code, entrant.json()["code"]) == (404, "not_found")
    assert (nobody.status_code, nobody.json()["code"]) == (401, "not_authenticated")
    assert not Announcement.objects.exists()


def test_an_announcement_without_a_body_is_refused(contest, contest_staff, client_for):
    response = client_for(contest_staff).post(
        "/api/v1/contests/vision/announcements/", {"title": "t", "body": "   "}
    )

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"
    assert not Announcement.objects.exists()


def test_posting_queues_the_mail_once_after_the_commit(
    contest, contest_staff, client_for, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(contest_staff).post(
            "/api/v1/contests/vision/announcements/", {"title": "t", "body": "b"}
        )

    assert sent == [(jobs.SEND_ANNOUNCEMENT_MAIL, (response.json()["id"],))]


def test_a_phase_names_its_contest_and_a_lone_benchmark_none(contest, anon):
    lone = factories.BenchmarkFactory(slug="lone")

    phase = anon.get("/api/v1/benchmarks/vision-p1/").json()
    alone = anon.get(f"/api/v1/benchmarks/{lone.slug}/").json()

    assert phase["contest"] == {"slug": "vision", "phase": 1, "name": "Warm-up"}
    assert alone["contest"] is None
