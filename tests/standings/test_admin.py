"""Staff start the final rerun, publish and correct from the admin's final settings,
each asked why and audited like the API; staff without the permission see no action."""

from __future__ import annotations

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


def act(client, settings, action, reason):
    return client.post(
        URL,
        {"action": action, "_selected_action": [settings.pk], "apply": "yes", "reason": reason},
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
        act(admin_client, settings, "start_final_rerun", "closing time")
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
