"""Staff start the final rerun, publish and correct from the admin's final settings,
each asked why and audited like the API; staff without the permission see no action."""

from __future__ import annotations

import datetime as dt

import time_machine
from django.contrib.auth.models import Permission
from django.urls import reverse

from portal.audit.models import AuditEvent
from portal.standings.models import FinalRerun, FinalSettings, Standings
from portal.submissions.leaderboard import leaderboard_refresh_entrant
from portal.submissions.models import Submission
from tests import factories
from tests.web.boards import official_run

URL = reverse("admin:standings_finalsettings_changelist")


def act(client, settings, action, reason, **fields):
    return client.post(
        URL,
        {
            "action": action,
            "_selected_action": [settings.pk],
            "apply": "yes",
            "reason": reason,
            **fields,
        },
        follow=True,
    )


def test_publishing_asks_why_then_freezes_the_board_audited(
    admin_client, closing, alice, bob, after_close
):
    official_run(closing, alice, 200)
    official_run(closing, bob, 100)
    settings = FinalSettings.objects.create(benchmark=closing)
    with time_machine.travel(after_close, tick=False):
        asked = admin_client.post(URL, {"action": "publish", "_selected_action": [settings.pk]})
        assert 'name="reason"' in asked.content.decode()
        blank = act(admin_client, settings, "publish", "  ")
        assert not Standings.objects.filter(benchmark=closing).exists()
        assert 'name="reason"' in blank.content.decode()
        done = act(admin_client, settings, "publish", "results day")
    assert "Publish the final standings: 1 benchmark(s)." in done.content.decode()
    standings = Standings.objects.get(benchmark=closing)
    assert [row.entrant for row in standings.rows.all()] == ["bob", "alice"]
    event = AuditEvent.objects.get(action="standings.published")
    assert (event.reason, event.details["digest"]) == ("results day", standings.digest)


def test_a_refused_step_says_why_and_changes_nothing(admin_client, closing, alice):
    official_run(closing, alice, 100)
    settings = FinalSettings.objects.create(benchmark=closing)
    answer = act(admin_client, settings, "publish", "too early")
    assert "published after the benchmark closes" in answer.content.decode()
    assert not Standings.objects.exists()
    assert not AuditEvent.objects.filter(action="standings.published").exists()


def test_the_final_rerun_starts_and_a_correction_follows_from_the_admin(
    admin_client, closing, alice, bob, after_close
):
    bad = official_run(closing, alice, 50)
    official_run(closing, bob, 100)
    settings = FinalSettings.objects.create(benchmark=closing)
    with time_machine.travel(after_close, tick=False):
        act(
            admin_client,
            settings,
            "start_final_rerun",
            "closing time",
            confirm_official_cohort="rerun on the official cohort",
        )
    assert FinalRerun.objects.filter(benchmark=closing).exists()
    started = AuditEvent.objects.get(action="standings.final_rerun_started")
    assert started.reason == "closing time"
    FinalRerun.objects.filter(benchmark=closing).delete()  # publish from the board instead
    with time_machine.travel(after_close, tick=False):
        act(admin_client, settings, "publish", "results")
        Submission.objects.filter(pk=bad.submission_id).update(disqualified_at=after_close)
        leaderboard_refresh_entrant(benchmark=closing, entrant_id=alice.pk)
        act(admin_client, settings, "correct", "alice disqualified")
    standings = Standings.objects.get(benchmark=closing)
    assert [row.entrant for row in standings.rows.all()] == ["bob"]
    assert standings.corrections.get().reason == "alice disqualified"


def test_staff_without_the_permission_are_not_offered_the_actions(client, closing):
    viewer = factories.UserFactory(username="viewer", is_staff=True)
    viewer.user_permissions.add(
        Permission.objects.get(codename="view_finalsettings"),
    )
    client.force_login(viewer)
    settings = FinalSettings.objects.create(benchmark=closing)
    page = client.get(URL).content.decode()
    assert closing.slug in page and 'value="publish"' not in page
    act(client, settings, "publish", "sneaky")
    assert not Standings.objects.exists()


def _form(settings, **values):
    """The change form's fields as the admin posts them, with ``values`` replaced."""
    deadline = values.pop("nomination_deadline", settings.nomination_deadline)
    data = {
        "benchmark": settings.benchmark_id,
        "final_runs": settings.final_runs,
        "extra_runs": settings.extra_runs,
        "prize_positions": settings.prize_positions,
        "nomination_deadline_0": deadline.strftime("%Y-%m-%d") if deadline else "",
        "nomination_deadline_1": deadline.strftime("%H:%M:%S") if deadline else "",
    }
    return {**data, **values}


def test_editing_the_final_settings_is_audited_with_old_and_new_values(admin_client, closing):
    added = admin_client.post(
        reverse("admin:standings_finalsettings_add"),
        _form(FinalSettings(benchmark=closing), final_runs=5),
    )
    assert added.status_code == 302, added.content.decode()[:2000]
    settings = FinalSettings.objects.get(benchmark=closing)
    created = AuditEvent.objects.get(action="standings.settings.create")
    assert created.target == f"benchmark:{closing.slug}" and created.actor.is_superuser
    assert created.details["values"] == {
        "nomination_deadline": None,
        "final_runs": 5,
        "extra_runs": 2,
        "prize_positions": 3,
    }
    url = reverse("admin:standings_finalsettings_change", args=[settings.pk])
    deadline = closing.closes_at.replace(microsecond=0) + dt.timedelta(days=1)
    # Quietly fewer prize positions and one final run: both on the record.
    admin_client.post(
        url, _form(settings, prize_positions=1, final_runs=1, nomination_deadline=deadline)
    )
    changed = AuditEvent.objects.get(action="standings.settings.change")
    assert changed.details["changes"] == {
        "final_runs": [5, 1],
        "prize_positions": [3, 1],
        "nomination_deadline": [None, deadline.isoformat()],
    }
    settings.refresh_from_db()
    assert (settings.final_runs, settings.prize_positions) == (1, 1)
    admin_client.post(url, _form(settings))  # saved with nothing changed: nothing recorded
    assert AuditEvent.objects.filter(action="standings.settings.change").count() == 1
    admin_client.post(
        reverse("admin:standings_finalsettings_delete", args=[settings.pk]), {"post": "yes"}
    )
    assert not FinalSettings.objects.exists()
    deleted = AuditEvent.objects.get(action="standings.settings.delete")
    assert deleted.details["values"]["prize_positions"] == 1
