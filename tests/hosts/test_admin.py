"""Scoring hosts in the admin: the fleet's list and facts, and the drain, resume and
retire actions, which ask for a reason and need ``hosts.manage_host``."""

from __future__ import annotations

import pytest
from django.contrib import admin as django_admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from portal.audit.models import AuditEvent
from portal.hosts.models import ScoringHost
from tests import factories

CHANGELIST = "admin:hosts_scoringhost_changelist"


def _act(client, action, hosts, reason=None):
    data = {"action": action, ACTION_CHECKBOX_NAME: [host.pk for host in hosts]}
    if reason is not None:
        data.update({"apply": "yes", "reason": reason})
    return client.post(reverse(CHANGELIST), data)


def _statuses():
    return dict(ScoringHost.objects.values_list("name", "status"))


def test_the_contest_staff_group_may_view_and_manage_hosts(charlie):
    assert charlie.has_perms(["hosts.view_scoringhost", "hosts.manage_host"])


def test_contest_staff_see_the_fleet(client, charlie, make_host):
    make_host("alpha", memory_bytes=64 << 30)
    make_host("bravo", status=ScoringHost.RETIRED)
    client.force_login(charlie)

    page = client.get(reverse(CHANGELIST))

    html = page.content.decode()
    assert page.status_code == 200
    assert "alpha" in html and "bravo" in html
    assert "64.0 GiB" in html
    assert "online" in html and "retired" in html
    for action in ("drain", "resume", "retire"):
        assert f'value="{action}"' in html


def test_a_hosts_page_shows_its_facts_read_only(client, charlie, make_host):
    host = make_host(
        "alpha",
        gpus=[{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-1"}],
        docker_version="27.3.1",
    )
    client.force_login(charlie)

    page = client.get(reverse("admin:hosts_scoringhost_change", args=[host.pk]))

    html = page.content.decode()
    assert page.status_code == 200
    assert "NVIDIA H200" in html and "27.3.1" in html and "a" * 64 in html
    assert 'name="_save"' not in html  # facts come from the host, not from staff


def test_drain_asks_for_a_reason_then_drains_on_the_record(client, charlie, make_host):
    alpha, bravo = make_host("alpha"), make_host("bravo")
    client.force_login(charlie)

    asked = _act(client, "drain", [alpha, bravo])
    assert 'name="reason"' in asked.content.decode()
    assert _statuses() == {"alpha": "active", "bravo": "active"}
    done = _act(client, "drain", [alpha, bravo], reason="rack maintenance")

    assert asked.status_code == 200
    assert done.status_code == 302
    assert _statuses() == {"alpha": "draining", "bravo": "draining"}
    events = AuditEvent.objects.order_by("target")
    assert [(e.action, e.target, e.actor, e.reason) for e in events] == [
        ("host.drain", "host:alpha", charlie, "rack maintenance"),
        ("host.drain", "host:bravo", charlie, "rack maintenance"),
    ]


def test_resume_and_retire_from_the_admin(client, charlie, make_host):
    alpha = make_host("alpha", status=ScoringHost.DRAINING)
    bravo = make_host("bravo")
    client.force_login(charlie)

    _act(client, "resume", [alpha], reason="")
    _act(client, "retire", [bravo], reason="decommissioned")

    assert _statuses() == {"alpha": "active", "bravo": "retired"}
    assert list(AuditEvent.objects.order_by("id").values_list("action", "reason")) == [
        ("host.resume", ""),
        ("host.retire", "decommissioned"),
    ]


def test_an_impossible_move_is_reported_and_the_others_go_ahead(client, charlie, make_host):
    alpha = make_host("alpha", status=ScoringHost.RETIRED)
    bravo = make_host("bravo")
    client.force_login(charlie)

    done = _act(client, "drain", [alpha, bravo], reason="")
    shown = client.get(done.url).content.decode()

    assert _statuses() == {"alpha": "retired", "bravo": "draining"}
    assert "lpha: Host alpha is retired; only a host that is active" in shown
    assert "Drain: 1 host(s)." in shown
    assert AuditEvent.objects.get().target == "host:bravo"


def test_staff_without_the_permission_see_no_action_and_change_nothing(client, rita, make_host):
    alpha = make_host("alpha")
    client.force_login(rita)

    listing = client.get(reverse(CHANGELIST))
    _act(client, "drain", [alpha], reason="curious")

    assert listing.status_code == 200  # may look
    assert 'value="drain"' not in listing.content.decode()
    assert _statuses() == {"alpha": "active"}
    assert not AuditEvent.objects.exists()


def test_staff_without_any_permission_cannot_see_the_list(client, make_host):
    alpha = make_host("alpha")
    client.force_login(factories.UserFactory(username="pat", is_staff=True))

    assert client.get(reverse(CHANGELIST)).status_code == 403
    _act(client, "retire", [alpha], reason="curious")
    assert _statuses() == {"alpha": "active"}


@pytest.mark.parametrize("action", ["drain", "resume", "retire"])
def test_the_action_itself_refuses_staff_without_the_permission(rf, rita, make_host, action):
    make_host("alpha", status=ScoringHost.DRAINING)
    model_admin = django_admin.site._registry[ScoringHost]
    request = rf.post("/", {"apply": "yes", "reason": "bypassing the changelist"})
    request.user = rita

    with pytest.raises(PermissionDenied):
        getattr(model_admin, action)(request, ScoringHost.objects.all())
    assert _statuses() == {"alpha": "draining"}
    assert not AuditEvent.objects.exists()
