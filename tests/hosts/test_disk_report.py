"""The hosts admin shows each host's engine disk use (``docker system df``), as the host
recorded it at registration or heartbeat."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.hosts.models import ScoringHost
from scoring import engine
from scoring.host import hosts

pytestmark = pytest.mark.django_db

REPORT = {
    "at": "2026-12-05T08:00:00+00:00",
    "images": {"count": 12, "bytes": 30 << 30},
    "containers": {"count": 3, "bytes": 1 << 30},
    "build_cache": {"count": 40, "bytes": 2 << 30},
    "volumes": {"count": 1, "bytes": 0},
}


def test_the_admin_shows_a_hosts_disk_report(client, charlie, make_host):
    host = make_host("alpha")
    make_host("bravo")
    ScoringHost.objects.filter(pk=host.pk).update(disk=REPORT)
    client.force_login(charlie)

    listed = client.get(reverse("admin:hosts_scoringhost_changelist")).content.decode()
    page = client.get(reverse("admin:hosts_scoringhost_change", args=[host.pk])).content.decode()

    assert "33.0 GiB" in listed  # alpha's engine takes 33 GiB in all
    assert "not reported" in listed  # bravo never recorded one
    assert "build cache" in page and "2.0 GiB" in page and "30.0 GiB" in page
    assert "2026-12-05T08:00:00" in page


@pytest.mark.docker
def test_a_host_records_its_engines_disk_use(make_host):
    make_host("alpha")

    recorded = hosts.record_disk("alpha")

    row = ScoringHost.objects.get(name="alpha")
    assert row.disk == recorded
    assert row.disk["images"]["count"] >= 1  # the local busybox base, at least
    assert row.disk["images"]["bytes"] > 0


def test_an_engine_that_does_not_answer_keeps_the_last_report(make_host, monkeypatch):
    host = make_host("alpha")
    ScoringHost.objects.filter(pk=host.pk).update(disk=REPORT)

    def down() -> None:
        raise engine.EngineError("no engine")

    monkeypatch.setattr(engine, "disk_usage", down)

    assert hosts.record_disk("alpha") == {}
    assert ScoringHost.objects.get(name="alpha").disk == REPORT
