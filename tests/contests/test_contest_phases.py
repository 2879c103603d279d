"""Contests of phases, their announcements and facts: the reads (phases in order, the
hub's entries) and the staff writes (each audited, an announcement's mail queued once)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.contests.announcements import (
    announcement_change,
    announcement_post,
    contest_save,
)
from portal.contests.models import Announcement, Benchmark
from portal.contests.phases import announcements_of, contest_view, hub_entries
from portal.core import errors, jobs
from portal.core.errors import InvalidParameter
from tests import factories

NOW = dt.datetime(2026, 9, 1, 12, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


@pytest.fixture
def contest(db):
    """Warm-up (closed), Phase 1 (open), Phase 2 (upcoming); created out of order."""
    contest = factories.ContestFactory(slug="vision", title="Vision Challenge")
    factories.BenchmarkFactory(
        contest=contest,
        phase_order=3,
        phase_name="",
        slug="v-p2",
        opens_at=NOW + 5 * DAY,
        closes_at=NOW + 9 * DAY,
    )
    factories.BenchmarkFactory(
        contest=contest,
        phase_order=1,
        phase_name="Warm-up",
        slug="v-warm",
        opens_at=NOW - 9 * DAY,
        closes_at=NOW - 5 * DAY,
    )
    factories.BenchmarkFactory(
        contest=contest,
        phase_order=2,
        phase_name="Phase 1",
        slug="v-p1",
        opens_at=NOW - 2 * DAY,
        closes_at=NOW + 2 * DAY,
    )
    return contest


@pytest.fixture
def contest_staff(db):
    user = factories.UserFactory(username="charlie", is_staff=True)
    user.groups.add(Group.objects.get(name="contest staff"))
    return user


def test_phases_come_in_their_order_with_each_window_status(contest):
    view = contest_view(contest, NOW)

    assert [phase.benchmark.slug for phase in view.phases] == ["v-warm", "v-p1", "v-p2"]
    assert [phase.label for phase in view.phases] == ["Warm-up", "Phase 1", "Phase 3"]
    assert [phase.schedule.status for phase in view.phases] == ["closed", "open", "upcoming"]
    assert view.status == "open"
    assert view.current is not None and view.current.benchmark.slug == "v-p1"
    assert (view.opens_at, view.closes_at) == (NOW - 9 * DAY, NOW + 9 * DAY)


def test_between_phases_the_contest_is_upcoming_and_follows_the_next(contest):
    view = contest_view(contest, NOW + 3 * DAY)

    assert view.status == "upcoming"
    assert view.current is not None and view.current.benchmark.slug == "v-p2"
    assert contest_view(contest, NOW + 10 * DAY).status == "closed"


def test_two_phases_cannot_share_a_place(contest):
    with pytest.raises(IntegrityError), transaction.atomic():
        factories.BenchmarkFactory(contest=contest, phase_order=2, slug="v-dup")


def test_the_hub_lists_contests_and_lone_benchmarks_open_first(contest):
    lone = factories.BenchmarkFactory(slug="lone", opens_at=NOW + DAY, closes_at=NOW + 2 * DAY)
    closed = factories.ContestFactory(slug="old")
    factories.BenchmarkFactory(
        contest=closed, slug="old-1", opens_at=NOW - 9 * DAY, closes_at=NOW - 8 * DAY
    )

    entries = hub_entries(NOW)

    described = [
        (entry.contest.contest.slug if entry.contest else entry.benchmark.slug, entry.status)
        for entry in entries
    ]
    assert described == [("vision", "open"), ("lone", "upcoming"), ("old", "closed")]
    assert lone.contest is None


def test_a_benchmark_leaving_its_contest_stands_alone(contest):
    contest.delete()

    assert Benchmark.objects.filter(slug="v-p1", contest=None).exists()


# Announcements ---------------------------------------------------------------------------


def test_contest_staff_post_an_announcement_audited_and_mailed_after_commit(
    contest, contest_staff, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        announcement = announcement_post(
            contest=contest, actor=contest_staff, title="  Phase 2 opens  ", body="**Soon.**"
        )
        assert sent == []  # nothing is sent before the commit

    assert len(callbacks) == 1

    assert (announcement.title, announcement.body) == ("Phase 2 opens", "**Soon.**")
    assert announcement.posted_by == contest_staff
    assert announcement.mailed_at is None
    event = AuditEvent.objects.get()
    assert (event.action, event.target, event.actor) == (
        "announcement.post",
        f"announcement:{announcement.pk}",
        contest_staff,
    )
    assert event.details == {"contest": "vision", "title": "Phase 2 opens"}
    assert sent == [(jobs.SEND_ANNOUNCEMENT_MAIL, (announcement.pk,))]


def test_staff_without_the_permission_post_nothing(contest, django_capture_on_commit_callbacks):
    plain = factories.UserFactory(username="pat", is_staff=True)

    with (
        django_capture_on_commit_callbacks() as callbacks,
        pytest.raises(errors.PermissionDenied, match=r"contests\.add_announcement"),
    ):
        announcement_post(contest=contest, actor=plain, title="Hi", body="there")

    assert not Announcement.objects.exists()
    assert not AuditEvent.objects.exists()
    assert callbacks == []


@pytest.mark.parametrize(
    ("title", "body"), [("", "body"), ("   ", "body"), ("t", " "), ("x" * 201, "b")]
)
def test_a_blank_or_oversized_announcement_is_refused(
    contest, contest_staff, django_capture_on_commit_callbacks, title, body
):
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(InvalidParameter):
        announcement_post(contest=contest, actor=contest_staff, title=title, body=body)

    assert not Announcement.objects.exists()
    assert not AuditEvent.objects.exists()
    assert callbacks == []


def test_announcements_read_newest_first(contest, contest_staff, sent):
    for days, title in [(3, "third"), (1, "first"), (2, "second")]:
        announcement_post(
            contest=contest, actor=contest_staff, title=title, body="b", now=NOW + days * DAY
        )

    assert [a.title for a in announcements_of(contest)] == ["third", "second", "first"]


def test_a_correction_is_audited_with_the_old_text_and_not_mailed_again(
    contest, contest_staff, sent, django_capture_on_commit_callbacks
):
    announcement = announcement_post(contest=contest, actor=contest_staff, title="T", body="old")

    with django_capture_on_commit_callbacks(execute=True):
        announcement_change(announcement=announcement, actor=contest_staff, title="T", body="new")
        announcement_change(announcement=announcement, actor=contest_staff, title="T", body="new")

    assert Announcement.objects.get().body == "new"
    changes = AuditEvent.objects.filter(action="announcement.change")
    assert [event.details["changes"] for event in changes] == [{"body": ["old", "new"]}]
    assert sent == []


def test_a_change_of_the_facts_is_audited_field_by_field(contest, contest_staff):
    before = {"prizes": contest.prizes, "final_ranking": contest.final_ranking}
    contest.prizes = "5,000 USD"
    contest.final_ranking = "The final rerun decides."

    contest_save(contest=contest, before=before, actor=contest_staff)
    contest_save(contest=contest, before={"prizes": "5,000 USD"}, actor=contest_staff)

    event = AuditEvent.objects.get()
    assert (event.action, event.target) == ("contest.change", "contest:vision")
    assert event.details == {
        "changes": {"prizes": ["", "5,000 USD"], "final_ranking": ["", "The final rerun decides."]}
    }


def test_announcement_dates_are_when_posted(contest, contest_staff, sent):
    before = timezone.now()

    announcement = announcement_post(contest=contest, actor=contest_staff, title="T", body="b")

    assert before <= announcement.posted_at <= timezone.now()
