"""Whether a host's scored runs have CPUs of their own (``PODIUM_SCORING_CPUS``), as it
registers it and as the hosts API and the benchmark page show it."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.core.cache import cache

from portal.core import cpus
from portal.hosts.models import ScoringHost
from scoring.host import hosts
from tests.hosts.test_worker_side import machine

__all__ = ["machine"]

URL = "/api/v1/hosts/"
TOO_SMALL = (
    "2 CPUs: too few to split (it takes 4); scored runs share them with the web server, the "
    "workers and the engine"
)


def _registered(monkeypatch: Any, settings: Any, setting: str, online: set[int]) -> ScoringHost:
    settings.PODIUM_SCORING_CPUS = setting
    monkeypatch.setattr(cpus, "online_cpus", lambda: frozenset(online))
    return hosts.register()


def test_a_host_too_small_to_split_registers_why_and_the_api_shows_it(
    machine, monkeypatch, settings, alice, client_for
):
    host = _registered(monkeypatch, settings, "auto", {0, 1})

    assert host.cpu_isolation == {
        "shared": True,
        "scoring_cpus": None,
        "other_cpus": None,
        "reason": TOO_SMALL,
    }
    [row] = client_for(alice).get(URL).json()
    assert row["cpu_isolation"] == host.cpu_isolation


def test_a_split_host_shows_both_lists(machine, monkeypatch, settings, alice, client_for):
    _registered(monkeypatch, settings, "auto", set(range(8)))

    [row] = client_for(alice).get(URL).json()

    assert row["cpu_isolation"] == {
        "shared": False,
        "scoring_cpus": "4-7",
        "other_cpus": "0-3",
        "reason": "",
    }


def test_the_schema_documents_cpu_isolation(anon, db):
    schema = anon.get("/api/schema/", {"format": "json"}).json()["components"]["schemas"]

    assert set(schema["HostCpuIsolation"]["properties"]) == {
        "shared",
        "scoring_cpus",
        "other_cpus",
        "reason",
    }


@pytest.fixture
def page(client, benchmark):
    def read() -> str:
        cache.clear()  # the rules are cached (RULES_CACHE_S): read as once it has passed
        text = client.get(f"/b/{benchmark.slug}/").content.decode()
        start = text.index('id="cpu-isolation"')
        return " ".join(text[start : text.index("</li>", start)].split())

    return read


def test_the_benchmark_page_says_when_runs_share_their_cpus(page, benchmark, make_host):
    assert "not reported yet" in page()

    make_host("alpha", hardware_class=benchmark.hardware_class_id, cpu_isolation={})
    assert "not reported yet" in page()  # registered before it reported it

    make_host(
        "bravo",
        hardware_class=benchmark.hardware_class_id,
        cpu_isolation=cpus.decide("auto", {0, 1}).as_fact(),
    )
    line = page()
    assert "shared with the web server, the workers and the engine on 1 of 1 host" in line
    assert "(2 CPUs: too few to split (it takes 4);" in line
    assert "adds to its timing noise" in line


def test_the_benchmark_page_says_when_runs_have_cpus_of_their_own(page, benchmark, make_host):
    for name in ("alpha", "bravo"):
        make_host(
            name,
            hardware_class=benchmark.hardware_class_id,
            cpu_isolation=cpus.decide("auto", range(8)).as_fact(),
        )
    make_host(
        "retired",
        hardware_class=benchmark.hardware_class_id,
        status=ScoringHost.RETIRED,
        cpu_isolation=cpus.decide("shared", range(8)).as_fact(),
    )

    line = page()

    assert "CPUs of scored runs on this hardware class: their own (CPU 4-7)" in line
    assert "shared" not in line


def test_an_edit_of_the_rules_shows_at_once_and_the_hosts_facts_within_the_cache_time(
    client, benchmark, make_host, monkeypatch
):
    from portal.web import views

    monkeypatch.setattr(views, "RULES_CACHE_S", 1)
    url = f"/b/{benchmark.slug}/"
    assert "not reported yet" in client.get(url).content.decode()

    make_host(
        "bravo",
        hardware_class=benchmark.hardware_class_id,
        cpu_isolation=cpus.decide("auto", {0, 1}).as_fact(),
    )
    assert "not reported yet" in client.get(url).content.decode()  # the cached rules
    time.sleep(1.1)  # once the rules' cache time has passed
    html = " ".join(client.get(url).content.decode().split())
    assert "shared with the web server, the workers and the engine on 1 of 1 host" in html

    benchmark.attempts_per_day = 3
    benchmark.save(update_fields=["attempts_per_day"])
    html = " ".join(client.get(url).content.decode().split())
    assert "3 official attempts" in html  # an edit of the benchmark's own row: at once
