"""The host registry's services and selectors: registration, heartbeats, staff's moves,
and when a host counts as online."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.audit.services import Origin
from portal.core import errors
from portal.hosts import services
from portal.hosts.models import ScoringHost
from portal.hosts.selectors import host_state, hosts_online
from tests.hosts.conftest import FACTS

pytestmark = pytest.mark.django_db

STALE = dt.timedelta(seconds=90)


# Registration -------------------------------------------------------------------------


def test_a_new_host_registers_active_with_its_facts():
    host = services.host_register(name="alpha", hardware_class="cpu-x86_64", facts=FACTS)

    host.refresh_from_db()
    assert (host.name, host.hardware_class_id, host.status) == ("alpha", "cpu-x86_64", "active")
    assert {field: getattr(host, field) for field in FACTS} == FACTS
    assert host.registered_at == host.last_heartbeat_at
    assert timezone.now() - host.last_heartbeat_at < dt.timedelta(seconds=5)


def test_registering_again_updates_the_same_row():
    first = services.host_register(name="alpha", hardware_class="cpu-x86_64", facts=FACTS)
    ScoringHost.objects.filter(pk=first.pk).update(
        last_heartbeat_at=first.last_heartbeat_at - dt.timedelta(hours=1),
        registered_at=first.registered_at - dt.timedelta(hours=1),
    )

    again = services.host_register(
        name="alpha",
        hardware_class="cpu-x86_64",
        facts={**FACTS, "docker_version": "28.0.0", "gpus": [{"index": 0, "name": "NVIDIA L4"}]},
    )

    assert ScoringHost.objects.count() == 1
    again.refresh_from_db()
    assert again.pk == first.pk
    assert again.docker_version == "28.0.0"
    assert again.gpus == [{"index": 0, "name": "NVIDIA L4"}]
    assert again.registered_at == first.registered_at - dt.timedelta(hours=1)  # the first time
    assert timezone.now() - again.last_heartbeat_at < dt.timedelta(seconds=5)


@pytest.mark.parametrize("status", [ScoringHost.DRAINING, ScoringHost.RETIRED])
def test_a_restarted_worker_does_not_undo_staffs_decision(make_host, status):
    make_host("alpha", status=status)

    host = services.host_register(name="alpha", hardware_class="cpu-x86_64", facts=FACTS)

    host.refresh_from_db()
    assert host.status == status
    assert not services.host_accepts_work("alpha")


def test_registration_refuses_unknown_facts_and_blank_names():
    with pytest.raises(ValueError, match="unknown host facts"):
        services.host_register(name="alpha", hardware_class="cpu-x86_64", facts={"owner": "x"})
    with pytest.raises(errors.InvalidParameter):
        services.host_register(name="  ", hardware_class="cpu-x86_64", facts=FACTS)
    with pytest.raises(errors.InvalidParameter):
        services.host_register(name="alpha", hardware_class="", facts=FACTS)
    assert not ScoringHost.objects.exists()


def test_odd_hardware_still_registers():
    host = services.host_register(
        name="alpha", hardware_class="cpu-x86_64", facts={**FACTS, "cpu_model": "Z" * 500}
    )

    host.refresh_from_db()
    assert host.cpu_model == "Z" * 200


def test_a_heartbeat_touches_only_a_registered_host(make_host):
    long_ago = timezone.now() - dt.timedelta(hours=2)
    make_host("alpha", heartbeat_at=long_ago, status=ScoringHost.DRAINING)

    assert services.host_heartbeat("alpha") is True
    assert services.host_heartbeat("ghost") is False

    host = ScoringHost.objects.get(name="alpha")
    assert host.last_heartbeat_at > long_ago
    assert host.status == ScoringHost.DRAINING
    assert not ScoringHost.objects.filter(name="ghost").exists()


# State --------------------------------------------------------------------------------


def test_a_host_goes_offline_when_its_heartbeat_is_stale(make_host):
    now = timezone.now()
    host = make_host("alpha", heartbeat_at=now)

    assert host_state(host, now) == "online"
    assert host_state(host, now + STALE) == "online"  # exactly the stale time: still fresh
    assert host_state(host, now + STALE + dt.timedelta(seconds=1)) == "offline"


def test_the_stale_time_is_a_setting(make_host, settings):
    now = timezone.now()
    host = make_host("alpha", heartbeat_at=now - dt.timedelta(seconds=20))
    settings.PODIUM_HOST_STALE_S = 10

    assert host_state(host, now) == "offline"


def test_draining_and_retired_hosts(make_host):
    now = timezone.now()
    draining = make_host("alpha", status=ScoringHost.DRAINING, heartbeat_at=now)
    retired = make_host("bravo", status=ScoringHost.RETIRED, heartbeat_at=now)

    assert host_state(draining, now) == "draining"
    assert host_state(draining, now + STALE * 2) == "offline"
    assert host_state(retired, now) == "offline"


def test_hosts_online_counts_fresh_active_hosts_of_the_class(make_host):
    now = timezone.now()
    make_host("alpha")
    make_host("bravo")
    make_host("charlie", status=ScoringHost.DRAINING)
    make_host("delta", status=ScoringHost.RETIRED)
    make_host("echo", heartbeat_at=now - STALE * 2)
    make_host("foxtrot", hardware_class="gpu-h200")

    assert hosts_online("cpu-x86_64", now) == 2
    assert hosts_online("gpu-h200", now) == 1
    assert hosts_online("cpu-aarch64", now) == 0
    assert hosts_online("cpu-x86_64", now + STALE * 2) == 0


def test_only_an_active_host_accepts_work(make_host):
    make_host("alpha")
    make_host("bravo", status=ScoringHost.DRAINING)
    make_host("charlie", status=ScoringHost.RETIRED)

    assert services.host_accepts_work("alpha")
    assert not services.host_accepts_work("bravo")
    assert not services.host_accepts_work("charlie")
    assert not services.host_accepts_work("ghost")


# Staff's moves ------------------------------------------------------------------------


def test_drain_resume_retire_and_back_each_on_the_record(make_host, staff):
    make_host("alpha")
    origin = Origin(remote_addr="203.0.113.9", user_agent="Staff laptop")

    drained = services.host_drain(name="alpha", actor=staff, reason="kernel update", origin=origin)
    assert drained.status == ScoringHost.DRAINING
    assert not services.host_accepts_work("alpha")
    resumed = services.host_resume(name="alpha", actor=staff)
    assert resumed.status == ScoringHost.ACTIVE
    retired = services.host_retire(name="alpha", actor=None, reason="disk failing")
    assert retired.status == ScoringHost.RETIRED
    back = services.host_resume(name="alpha", actor=staff, reason="disk replaced")
    assert back.status == ScoringHost.ACTIVE
    assert services.host_accepts_work("alpha")

    events = list(AuditEvent.objects.order_by("id"))
    assert [(e.action, e.target, e.actor, e.reason) for e in events] == [
        ("host.drain", "host:alpha", staff, "kernel update"),
        ("host.resume", "host:alpha", staff, ""),
        ("host.retire", "host:alpha", None, "disk failing"),
        ("host.resume", "host:alpha", staff, "disk replaced"),
    ]
    assert events[0].remote_addr == "203.0.113.9"
    assert [(e.details["from"], e.details["to"]) for e in events] == [
        ("active", "draining"),
        ("draining", "active"),
        ("active", "retired"),
        ("retired", "active"),
    ]


def test_a_draining_host_may_be_retired(make_host):
    make_host("alpha", status=ScoringHost.DRAINING)

    assert services.host_retire(name="alpha", actor=None).status == ScoringHost.RETIRED


@pytest.mark.parametrize(
    ("status", "move"),
    [
        (ScoringHost.DRAINING, services.host_drain),
        (ScoringHost.RETIRED, services.host_drain),
        (ScoringHost.ACTIVE, services.host_resume),
        (ScoringHost.RETIRED, services.host_retire),
    ],
)
def test_impossible_moves_are_refused_and_record_nothing(make_host, staff, status, move):
    make_host("alpha", status=status)

    with pytest.raises(errors.InvalidParameter, match=f"alpha is {status}"):
        move(name="alpha", actor=staff, reason="try")

    assert ScoringHost.objects.get(name="alpha").status == status
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize("move", [services.host_drain, services.host_resume, services.host_retire])
def test_an_unknown_host_is_not_found(staff, move):
    with pytest.raises(errors.NotFound, match="ghost"):
        move(name="ghost", actor=staff)

    assert not AuditEvent.objects.exists()
