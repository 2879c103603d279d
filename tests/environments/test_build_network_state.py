"""The build network's live checks: recording them per host, auditing flips, the state."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.environments.models import BuildNetworkCheck
from portal.environments.selectors import build_network_state
from portal.environments.services import build_network_record

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC)


def policy(**overrides: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "network": "podium-build",
        "subnet": "172.29.0.0/24",
        "bridge": "br-podium",
        "blocked": ["10.0.0.0/8", "169.254.0.0/16", "fc00::/7", "198.51.100.7/32"],
        "dns": ["172.29.0.1"],
        "allowed": [],
    }
    value.update(overrides)
    return value


def record(host: str = "build-1", *, enforced: bool = True, problems=(), now=T0, **policy_kw):
    return build_network_record(
        host=host, enforced=enforced, problems=list(problems), policy=policy(**policy_kw), now=now
    )


def flips() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (event.action, event.target, event.details)
        for event in AuditEvent.objects.filter(action__startswith="build_network.").order_by("id")
    ]


# Recording ---------------------------------------------------------------------------


def test_recording_keeps_one_row_per_host_with_the_latest_check():
    record("build-1", now=T0)
    record("build-2", now=T0)
    latest = record(
        "build-1",
        enforced=False,
        problems=["rule missing: drop 10.0.0.0/8"],
        now=T0 + dt.timedelta(minutes=5),
    )

    assert BuildNetworkCheck.objects.count() == 2
    row = BuildNetworkCheck.objects.get(host="build-1")
    assert row.pk == latest.pk
    assert row.enforced is False
    assert row.checked_at == T0 + dt.timedelta(minutes=5)
    assert row.problems == "rule missing: drop 10.0.0.0/8"
    assert row.policy["subnet"] == "172.29.0.0/24"


def test_problems_are_stored_one_per_line():
    row = record(
        enforced=False, problems=["rule missing: drop\n10.0.0.0/8", "", "dns rule missing"]
    )

    assert row.problems.splitlines() == ["rule missing: drop 10.0.0.0/8", "dns rule missing"]


@pytest.mark.parametrize(
    "bad_policy",
    [
        {"subnet": "172.29.0.0/24"},  # keys missing
        {**policy(), "extra": "x"},  # a key the contract does not have
        policy(blocked="10.0.0.0/8"),  # a string where a list belongs
        policy(subnet=None),
    ],
)
def test_a_policy_that_breaks_the_contract_is_refused_and_nothing_is_stored(bad_policy):
    with pytest.raises(ValueError):
        build_network_record(host="build-1", enforced=True, problems=[], policy=bad_policy)

    assert not BuildNetworkCheck.objects.exists()


# Auditing ----------------------------------------------------------------------------


def test_a_first_enforced_check_records_no_event():
    record(enforced=True)

    assert flips() == []


def test_a_first_check_that_is_not_enforced_is_audited_with_its_problems():
    record(enforced=False, problems=["rule missing: drop fc00::/7"])

    assert flips() == [
        (
            "build_network.not_enforced",
            "build_host:build-1",
            {"problems": ["rule missing: drop fc00::/7"]},
        )
    ]
    assert AuditEvent.objects.get().actor is None


def test_each_flip_is_audited_once_and_a_steady_state_is_not():
    record(enforced=True)
    record(enforced=True)
    record(enforced=False, problems=["rule missing: drop 10.0.0.0/8"])
    record(enforced=False, problems=["rule missing: drop 10.0.0.0/8"])
    record(enforced=True)
    record(enforced=True)

    assert [action for action, _, _ in flips()] == [
        "build_network.not_enforced",
        "build_network.enforced",
    ]
    assert flips()[1][2] == {"problems": []}


def test_a_flip_on_one_host_says_nothing_about_another():
    record("build-1", enforced=False, problems=["bridge missing"])
    record("build-2", enforced=True)

    assert [target for _, target, _ in flips()] == ["build_host:build-1"]


# The state ---------------------------------------------------------------------------


def test_never_checked_is_none():
    assert build_network_state() is None


def test_the_state_is_the_union_over_every_hosts_latest_check():
    record(
        "build-1",
        now=T0,
        blocked=["10.0.0.0/8", "198.51.100.7/32"],
        dns=["172.29.0.1"],
        allowed=["203.0.113.80:443"],
    )
    record(
        "build-2",
        now=T0 + dt.timedelta(minutes=2),
        blocked=["10.0.0.0/8", "198.51.100.8/32", "fc00::/7"],
        dns=["172.29.0.1", "192.0.2.53"],
        allowed=["203.0.113.80:443", "10.1.2.3/32"],
    )

    state = build_network_state(now=T0 + dt.timedelta(minutes=3))

    assert state is not None
    assert state.enforced is True
    assert state.checked_at == T0 + dt.timedelta(minutes=2)
    assert state.subnet == "172.29.0.0/24"
    assert set(state.blocked) == {"10.0.0.0/8", "198.51.100.7/32", "198.51.100.8/32", "fc00::/7"}
    assert len(state.blocked) == 4
    assert state.dns == ("172.29.0.1", "192.0.2.53")
    assert set(state.allowed) == {"203.0.113.80:443", "10.1.2.3/32"}
    assert state.allowed_count == 2
    assert state.problems == ()


def test_one_host_not_enforced_makes_the_whole_network_not_enforced():
    record("build-1", enforced=True, now=T0)
    record("build-2", enforced=False, problems=["rule missing: drop fc00::/7"], now=T0)

    state = build_network_state(now=T0)

    assert state is not None
    assert state.enforced is False
    assert state.stale is False
    assert state.problems == ("build-2: rule missing: drop fc00::/7",)


def test_a_check_older_than_the_stale_limit_is_not_enforced(settings, time_machine):
    settings.PODIUM_BUILD_NETWORK_STALE_S = 600
    time_machine.move_to(T0, tick=False)
    record("build-1", now=timezone.now())
    record("build-2", now=timezone.now() - dt.timedelta(seconds=500))

    fresh = build_network_state()
    assert fresh is not None and fresh.enforced is True

    time_machine.move_to(T0 + dt.timedelta(seconds=101), tick=False)
    stale = build_network_state()

    assert stale is not None
    assert stale.enforced is False
    assert stale.stale is True
    assert stale.checked_at == T0
    assert [line.split(":")[0] for line in stale.problems] == ["build-2"]


def test_the_stale_limit_defaults_to_an_hour(settings, time_machine):
    del settings.PODIUM_BUILD_NETWORK_STALE_S
    time_machine.move_to(T0, tick=False)
    record(now=T0)

    time_machine.move_to(T0 + dt.timedelta(minutes=59), tick=False)
    assert build_network_state().enforced is True
    time_machine.move_to(T0 + dt.timedelta(minutes=61), tick=False)
    assert build_network_state().enforced is False


# The admin ---------------------------------------------------------------------------


def test_staff_see_each_hosts_check_in_the_admin_and_cannot_change_it(client, staff):
    row = record("build-7", enforced=False, problems=["rule missing: drop fc00::/7"])
    client.force_login(staff)

    listing = client.get("/admin/environments/buildnetworkcheck/")
    detail = client.get(f"/admin/environments/buildnetworkcheck/{row.pk}/change/")

    assert listing.status_code == 200
    assert "build-7" in listing.content.decode()
    assert "rule missing: drop fc00::/7" in listing.content.decode()
    assert detail.status_code == 200
    assert client.get("/admin/environments/buildnetworkcheck/add/").status_code == 403
    assert client.get(f"/admin/environments/buildnetworkcheck/{row.pk}/delete/").status_code == 403
    client.post(
        f"/admin/environments/buildnetworkcheck/{row.pk}/change/",
        {"host": "renamed", "enforced": "on"},
    )
    row.refresh_from_db()
    assert (row.host, row.enforced) == ("build-7", False)
