"""``manage.py hosts``: the fleet from the command line, moves audited with no actor."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.hosts.models import ScoringHost

pytestmark = pytest.mark.django_db


def hosts(*args: str) -> str:
    out = io.StringIO()
    call_command("hosts", *args, stdout=out)
    return out.getvalue()


def test_list_prints_a_table_of_every_host(make_host):
    beat = timezone.now().replace(microsecond=0)
    make_host("alpha", heartbeat_at=beat, cpu_cores=32, memory_bytes=64 << 30)
    make_host("bravo", status=ScoringHost.DRAINING, heartbeat_at=beat)
    make_host("charlie", heartbeat_at=beat - dt.timedelta(hours=1))
    make_host("delta", status=ScoringHost.RETIRED, hardware_class="gpu-h200")

    lines = hosts("list").splitlines()

    assert lines[0].split() == ["NAME", "CLASS", "STATE", "LAST", "HEARTBEAT", "CORES", "MEMORY"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["alpha"] == [
        "alpha",
        "cpu-x86_64",
        "online",
        beat.isoformat(timespec="seconds"),
        "32",
        "64.0",
        "GiB",
    ]
    assert rows["bravo"][2] == "draining"
    assert rows["charlie"][2] == "offline"
    assert rows["delta"][1:3] == ["gpu-h200", "retired"]
    assert [line.split()[0] for line in lines[1:]] == ["alpha", "bravo", "charlie", "delta"]


def test_list_says_when_no_host_registered():
    assert hosts("list").strip() == "No scoring host has registered yet."


def test_drain_resume_retire_are_audited_without_an_actor(make_host):
    make_host("alpha")

    drained = hosts("drain", "alpha", "--reason", "kernel update")
    assert ScoringHost.objects.get(name="alpha").status == ScoringHost.DRAINING
    hosts("resume", "alpha")
    assert ScoringHost.objects.get(name="alpha").status == ScoringHost.ACTIVE
    retired = hosts("retire", "alpha")
    assert ScoringHost.objects.get(name="alpha").status == ScoringHost.RETIRED

    assert "alpha is now draining" in drained
    assert "alpha is now retired" in retired
    events = AuditEvent.objects.order_by("id")
    assert [(e.action, e.target, e.actor, e.reason) for e in events] == [
        ("host.drain", "host:alpha", None, "kernel update"),
        ("host.resume", "host:alpha", None, ""),
        ("host.retire", "host:alpha", None, ""),
    ]


@pytest.mark.parametrize("move", ["drain", "resume", "retire"])
def test_an_unknown_name_is_a_clear_error(move):
    with pytest.raises(CommandError, match="No scoring host is called 'ghost'"):
        hosts(move, "ghost")

    assert not AuditEvent.objects.exists()


def test_an_impossible_move_is_an_error(make_host):
    make_host("alpha", status=ScoringHost.RETIRED)

    with pytest.raises(CommandError, match="alpha is retired"):
        hosts("drain", "alpha")

    assert ScoringHost.objects.get(name="alpha").status == ScoringHost.RETIRED
    assert not AuditEvent.objects.exists()


def test_a_move_needs_a_name():
    with pytest.raises(CommandError):
        hosts("drain")
