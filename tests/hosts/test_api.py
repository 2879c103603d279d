"""``GET /api/v1/hosts/``: the fleet for any signed-in user, never who runs what."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from portal.contests.models import Cohort
from portal.hosts.models import ScoringHost
from portal.submissions.models import Run, Submission
from tests import factories

URL = "/api/v1/hosts/"
FIELDS = {
    "name",
    "hardware_class",
    "architecture",
    "gpus",
    "cpu_cores",
    "memory_bytes",
    "state",
    "last_heartbeat_at",
    "queue_length",
    "calibration",
    "missing_tools",
    "cpu_isolation",
}


@pytest.fixture
def alice_client(alice, client_for):
    return client_for(alice)


def test_a_signed_in_user_sees_each_hosts_machine_and_state(alice_client, make_host):
    beat = timezone.now()
    make_host(
        "alpha",
        heartbeat_at=beat,
        gpus=[{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-5d0e"}],
        hardware_class="gpu-h200",
    )

    response = alice_client.get(URL)

    assert response.status_code == 200
    [row] = response.json()
    assert set(row) == FIELDS
    assert row == {
        "name": "alpha",
        "hardware_class": "gpu-h200",
        "architecture": "x86_64",
        "gpus": ["NVIDIA H200"],  # the model, not the card's UUID
        "cpu_cores": 32,
        "memory_bytes": 64 << 30,
        "state": "online",
        "last_heartbeat_at": beat.astimezone(dt.UTC).isoformat(),
        "queue_length": 0,
        "calibration": None,  # never calibrated
        "missing_tools": [],
        "cpu_isolation": None,  # not reported yet
    }


def test_retired_hosts_are_hidden_and_states_are_shown(alice_client, make_host):
    make_host("alpha")
    make_host("bravo", status=ScoringHost.DRAINING)
    make_host("charlie", heartbeat_at=timezone.now() - dt.timedelta(minutes=10))
    make_host("delta", status=ScoringHost.RETIRED)

    rows = alice_client.get(URL).json()

    assert {row["name"]: row["state"] for row in rows} == {
        "alpha": "online",
        "bravo": "draining",
        "charlie": "offline",
    }


def test_queue_length_counts_waiting_official_practice_and_final_runs_of_the_class(
    alice_client, alice, bob, benchmark, make_host, waiting, django_assert_max_num_queries
):
    gpu_benchmark = factories.BenchmarkFactory(hardware_class="gpu-h200")
    make_host("alpha")
    make_host("bravo")
    make_host("charlie", hardware_class="gpu-h200")
    make_host("delta", hardware_class="cpu-aarch64")
    waiting(alice, benchmark, Submission.QUEUED)
    waiting(bob, benchmark, Submission.QUEUED, kind=Submission.PRACTICE)
    waiting(bob, benchmark, Submission.VERIFYING)
    waiting(alice, benchmark, Submission.RUNNING)  # a host has it already
    waiting(alice, benchmark, Submission.PASSED)
    waiting(alice, benchmark, Submission.ACCEPTED)  # still to be built
    waiting(bob, gpu_benchmark, Submission.QUEUED)
    passed = waiting(bob, benchmark, Submission.PASSED)
    (final,) = factories.cohorts(benchmark, Cohort.OFFICIAL)
    for try_number, status in enumerate((Run.QUEUED, Run.QUEUED, Run.RUNNING), 1):
        Run.objects.create(  # a final rerun's runs: two still to claim
            submission=passed,
            cohort=final,
            purpose=Run.FINAL,
            status=status,
            try_number=try_number,
        )

    with django_assert_max_num_queries(5):  # the token, its user, the hosts, the two queues
        rows = alice_client.get(URL).json()

    assert {row["name"]: row["queue_length"] for row in rows} == {
        "alpha": 5,
        "bravo": 5,
        "charlie": 1,
        "delta": 0,
    }


def test_nothing_says_who_is_running(alice_client, bob, benchmark, make_host, waiting):
    make_host("alpha")
    waiting(bob, benchmark, Submission.RUNNING)
    waiting(bob, benchmark, Submission.QUEUED)

    body = alice_client.get(URL).content.decode()

    assert "bob" not in body
    assert benchmark.slug not in body


def test_an_empty_fleet_is_an_empty_list(alice_client):
    assert alice_client.get(URL).json() == []


def test_anonymous_callers_are_not_authenticated(anon, make_host):
    make_host("alpha")

    response = anon.get(URL)

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_the_schema_documents_the_hosts_list(anon, db):
    schema = anon.get("/api/schema/", {"format": "json"}).json()

    operation = schema["paths"]["/api/v1/hosts/"]["get"]
    assert operation["operationId"] == "hosts_list"
    assert set(operation["responses"]) == {"200", "401"}
    host = schema["components"]["schemas"]["Host"]
    assert set(host["properties"]) == FIELDS
