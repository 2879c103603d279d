"""Benchmarks, leaderboard, quota and the practice cohort."""

from __future__ import annotations

import datetime as dt
import io
import tarfile

import pytest
import time_machine
from django.utils import timezone

from portal.contests.models import Cohort, CohortItem
from portal.core import storage
from portal.submissions.leaderboard import leaderboard_refresh_entrant
from portal.submissions.models import Run, Submission
from tests import factories


def test_it_lists_every_benchmark_with_its_status(db, anon):
    now = timezone.now()
    factories.BenchmarkFactory(
        slug="later", opens_at=now + dt.timedelta(days=1), closes_at=now + dt.timedelta(days=2)
    )
    factories.BenchmarkFactory(
        slug="now", opens_at=now - dt.timedelta(days=1), closes_at=now + dt.timedelta(days=2)
    )
    factories.BenchmarkFactory(
        slug="past", opens_at=now - dt.timedelta(days=3), closes_at=now - dt.timedelta(days=2)
    )

    response = anon.get("/api/v1/benchmarks/")

    assert response.status_code == 200
    statuses = {row["slug"]: row["status"] for row in response.json()}
    assert statuses == {"later": "upcoming", "now": "open", "past": "closed"}
    row = response.json()[0]
    assert set(row) == {"slug", "title", "status", "opens_at", "closes_at"}
    assert dt.datetime.fromisoformat(row["opens_at"]).utcoffset() == dt.timedelta(0)


def test_it_shows_one_benchmark_with_its_rules(benchmark, anon):
    response = anon.get(f"/api/v1/benchmarks/{benchmark.slug}/")

    assert response.status_code == 200
    data = response.json()
    assert data["slug"] == benchmark.slug
    assert data["status"] == "open"
    assert data["pass_min_matches"] == 9900
    assert data["cohort_size"] == 10000
    assert data["attempts_per_day"] == 2
    assert data["attempt_timezone"] == "Asia/Seoul"
    assert data["practice_per_day"] == 10
    assert data["max_environments"] == 2
    assert data["build_timeout_s"] == 1800
    assert data["score_timeout_s"] == 960
    assert data["max_image_bytes"] == 16 * 1024**3
    assert data["max_concurrent_builds"] == 2
    assert "allowed_registries" not in data


def test_an_unknown_benchmark_is_not_found(db, anon):
    response = anon.get("/api/v1/benchmarks/nope/")

    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "detail": "No such benchmark."}


def _passing_run(submission: Submission, wall_time_ns: int) -> Run:
    cohort, _ = Cohort.objects.get_or_create(benchmark=submission.benchmark, kind=Cohort.OFFICIAL)
    Submission.objects.filter(pk=submission.pk).update(status=Submission.PASSED)
    run = Run.objects.create(
        submission=submission,
        cohort=cohort,
        status=Run.FINISHED,
        passed=True,
        wall_time_ns=wall_time_ns,
        matches=9950,
        total=10000,
        verdict=Submission.PASSED,
    )
    leaderboard_refresh_entrant(benchmark=submission.benchmark, entrant_id=submission.entrant_id)
    return run


def test_the_leaderboard_is_public_and_ranked(
    benchmark, alice, bob, anon, accepted, ready_environment
):
    slow = accepted(alice, ready_environment(alice, benchmark))
    fast = accepted(bob, ready_environment(bob, benchmark))
    _passing_run(slow, 2_000_000_000)
    _passing_run(fast, 1_000_000_000)

    response = anon.get(f"/api/v1/benchmarks/{benchmark.slug}/leaderboard/")

    assert response.status_code == 200
    rows = response.json()["rows"]
    assert [(row["rank"], row["entrant"], row["wall_time_ns"]) for row in rows] == [
        (1, "bob", 1_000_000_000),
        (2, "alice", 2_000_000_000),
    ]
    assert rows[0]["submission_id"] == fast.pk
    assert rows[0]["matches"] == 9950
    assert rows[0]["total"] == 10000
    assert dt.datetime.fromisoformat(rows[0]["submitted_at"]) == fast.submitted_at


def test_leaderboard_rows_carry_the_gpu_meters_figures_null_without_a_gpu(
    benchmark, alice, bob, anon, accepted, ready_environment
):
    gpu = _passing_run(accepted(alice, ready_environment(alice, benchmark)), 1_000_000_000)
    cpu = _passing_run(accepted(bob, ready_environment(bob, benchmark)), 2_000_000_000)
    Run.objects.filter(pk=gpu.pk).update(
        resources={
            "cpu_per_wall": 0.8,
            "gpu": {"energy_per_image_j": 0.0421, "gpu_util_mean_pct": 93.4, "samples": [[]]},
        }
    )
    Run.objects.filter(pk=cpu.pk).update(resources={"cpu_per_wall": 3.5})

    rows = anon.get(f"/api/v1/benchmarks/{benchmark.slug}/leaderboard/").json()["rows"]

    assert [
        (row["entrant"], row["cpu_per_wall"], row["energy_per_image_j"], row["gpu_util_mean_pct"])
        for row in rows
    ] == [("alice", 0.8, 0.0421, 93.4), ("bob", 3.5, None, None)]


def test_the_quota_counts_my_accepted_uploads(
    benchmark, alice, bob, client_for, accepted, ready_environment
):
    accepted(alice, ready_environment(alice, benchmark))
    accepted(bob, ready_environment(bob, benchmark))

    response = client_for(alice).get(f"/api/v1/benchmarks/{benchmark.slug}/quota/")

    assert response.status_code == 200
    data = response.json()
    assert data["timezone"] == "Asia/Seoul"
    assert (data["attempts_per_day"], data["used_today"], data["remaining_today"]) == (2, 1, 1)
    assert data["official"]["used_today"] == 1
    assert data["practice"] == {
        **data["practice"],
        "attempts_per_day": 10,
        "used_today": 0,
        "remaining_today": 10,
    }
    assert dt.datetime.fromisoformat(data["resets_at"]) > timezone.now()


def test_the_quota_resets_at_midnight_in_seoul(db, alice, client_for, accepted, ready_environment):
    benchmark = factories.BenchmarkFactory(
        opens_at=dt.datetime(2026, 8, 10, tzinfo=dt.UTC),
        closes_at=dt.datetime(2026, 8, 31, tzinfo=dt.UTC),
    )
    environment = ready_environment(alice, benchmark)
    client = client_for(alice)
    url = f"/api/v1/benchmarks/{benchmark.slug}/quota/"
    with time_machine.travel(dt.datetime(2026, 8, 12, 14, 59, tzinfo=dt.UTC), tick=False):
        accepted(alice, environment)
        accepted(alice, environment)
        before = client.get(url).json()
    with time_machine.travel(dt.datetime(2026, 8, 12, 15, 0, tzinfo=dt.UTC), tick=False):
        after = client.get(url).json()

    assert before["remaining_today"] == 0
    assert dt.datetime.fromisoformat(before["resets_at"]) == dt.datetime(
        2026, 8, 12, 15, tzinfo=dt.UTC
    )
    assert after["remaining_today"] == 2


def test_the_quota_needs_a_token(benchmark, anon):
    response = anon.get(f"/api/v1/benchmarks/{benchmark.slug}/quota/")

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


# Practice ---------------------------------------------------------------------------


@pytest.fixture
def practice(benchmark) -> Cohort:
    """A practice cohort of three images on disk, and an official one that must stay hidden."""
    cohort = Cohort.objects.create(benchmark=benchmark, kind=Cohort.PRACTICE)
    folder = storage.cohort_dir(cohort.pk)
    for position, (name, klass) in enumerate([("b/2.jpg", 7), ("a/1.jpg", 3), ("c.jpg", 999)]):
        CohortItem.objects.create(
            cohort=cohort,
            position=position,
            canonical_name=name,
            sha256="0" * 64,
            reference_class=klass,
        )
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(f"image {name}".encode())
    official = Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    CohortItem.objects.create(
        cohort=official,
        position=0,
        canonical_name="secret-official.jpg",
        sha256="1" * 64,
        reference_class=42,
    )
    return cohort


def test_it_publishes_the_practice_answers_and_a_download_link(practice, alice, client_for):
    response = client_for(alice).get(f"/api/v1/benchmarks/{practice.benchmark.slug}/practice/")

    assert response.status_code == 200
    data = response.json()
    assert data["count"] == 3
    assert data["answers"] == [
        {"path": "a/1.jpg", "class": 3},
        {"path": "b/2.jpg", "class": 7},
        {"path": "c.jpg", "class": 999},
    ]
    assert data["download_url"] == (
        f"http://testserver/api/v1/benchmarks/{practice.benchmark.slug}/practice/download"
    )
    assert data["seed"] is None  # a prepared cohort: no draw to redo
    assert "secret-official" not in response.content.decode()


def test_the_practice_download_holds_the_images_and_answers(practice, alice, client_for):
    response = client_for(alice).get(
        f"/api/v1/benchmarks/{practice.benchmark.slug}/practice/download"
    )

    assert response.status_code == 200
    assert response["Content-Type"] == "application/gzip"
    assert f"{practice.benchmark.slug}-practice.tar.gz" in response["Content-Disposition"]
    body = b"".join(response.streaming_content)
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as archive:
        names = sorted(archive.getnames())
        answers = archive.extractfile("answers.tsv").read().decode()
        image = archive.extractfile("images/b/2.jpg").read()
    assert names == ["answers.tsv", "images/a/1.jpg", "images/b/2.jpg", "images/c.jpg"]
    assert answers == "a/1.jpg\t3\nb/2.jpg\t7\nc.jpg\t999\n"
    assert image == b"image b/2.jpg"


def test_the_practice_download_needs_a_signed_in_user(practice, anon):
    response = anon.get(f"/api/v1/benchmarks/{practice.benchmark.slug}/practice/download")

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_no_practice_cohort_is_not_found(benchmark, alice, client_for):
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    client = client_for(alice)

    listing = client.get(f"/api/v1/benchmarks/{benchmark.slug}/practice/")
    download = client.get(f"/api/v1/benchmarks/{benchmark.slug}/practice/download")

    assert listing.status_code == download.status_code == 404
    assert listing.json()["code"] == download.json()["code"] == "not_found"


# The build network, as the last live check found it -------------------------------

CHECKED_AT = dt.datetime(2026, 8, 12, 3, 0, tzinfo=dt.UTC)


@pytest.fixture
def checked_network(time_machine):
    """One build host whose latest check, a minute ago, found every rule in place."""
    from portal.environments.services import build_network_record

    time_machine.move_to(CHECKED_AT + dt.timedelta(minutes=1), tick=False)
    return build_network_record(
        host="build-1",
        enforced=True,
        problems=[],
        policy={
            "network": "podium-build",
            "subnet": "172.29.0.0/24",
            "bridge": "br-podium",
            "blocked": ["10.0.0.0/8", "fc00::/7", "198.51.100.7/32"],
            "dns": ["172.29.0.1"],
            "allowed": ["203.0.113.80:443", "10.20.30.40/32"],
        },
        now=CHECKED_AT,
    )


def test_an_entrant_sees_the_build_network_without_the_allow_list(
    benchmark, alice, client_for, checked_network
):
    response = client_for(alice).get(f"/api/v1/benchmarks/{benchmark.slug}/")

    assert response.status_code == 200
    assert response.json()["build_network"] == {
        "enforced": True,
        "checked_at": "2026-08-12T03:00:00+00:00",
        "subnet": "172.29.0.0/24",
        "blocked": ["10.0.0.0/8", "fc00::/7", "198.51.100.7/32"],
        "dns": ["172.29.0.1"],
        "allowed_count": 2,
    }


def test_an_anonymous_caller_sees_no_allow_list_either(benchmark, anon, checked_network):
    network = anon.get(f"/api/v1/benchmarks/{benchmark.slug}/").json()["build_network"]

    assert network["allowed_count"] == 2
    assert "allowed" not in network


def test_staff_see_the_allow_list_entries(benchmark, staff, client_for, checked_network):
    response = client_for(staff).get(f"/api/v1/benchmarks/{benchmark.slug}/")

    network = response.json()["build_network"]
    assert network["allowed"] == ["203.0.113.80:443", "10.20.30.40/32"]
    assert network["allowed_count"] == 2


def test_a_stale_check_is_not_enforced(benchmark, anon, settings, checked_network, time_machine):
    settings.PODIUM_BUILD_NETWORK_STALE_S = 600
    time_machine.move_to(CHECKED_AT + dt.timedelta(seconds=601), tick=False)

    network = anon.get(f"/api/v1/benchmarks/{benchmark.slug}/").json()["build_network"]

    assert network["enforced"] is False
    assert network["checked_at"] == "2026-08-12T03:00:00+00:00"


def test_a_build_network_never_checked_is_not_enforced_and_empty(benchmark, alice, client_for):
    response = client_for(alice).get(f"/api/v1/benchmarks/{benchmark.slug}/")

    assert response.json()["build_network"] == {
        "enforced": False,
        "checked_at": None,
        "subnet": "",
        "blocked": [],
        "dns": [],
        "allowed_count": 0,
    }


def test_the_benchmark_list_does_not_carry_the_build_network(db, anon, checked_network):
    factories.BenchmarkFactory()

    row = anon.get("/api/v1/benchmarks/").json()[0]

    assert "build_network" not in row


def test_the_schema_documents_the_build_network_with_a_staff_only_allow_list(db, anon):
    schemas = anon.get("/api/schema/", {"format": "json"}).json()["components"]["schemas"]

    network = schemas["BuildNetwork"]
    assert set(network["properties"]) == {
        "enforced",
        "checked_at",
        "subnet",
        "blocked",
        "dns",
        "allowed_count",
        "allowed",
    }
    assert "allowed" not in network["required"]
    assert "allowed_count" in network["required"]
    assert network["properties"]["checked_at"]["nullable"] is True
    assert "build_network" in schemas["BenchmarkDetail"]["required"]
