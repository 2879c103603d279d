"""Environments: create, list, read, remove, rebuild, build log."""

from __future__ import annotations

import datetime as dt

from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from portal.core import jobs, storage
from portal.environments.models import Environment
from tests import factories
from tests.api import VALID_DOCKERFILE


def _create(client, benchmark, name="cuda", dockerfile=VALID_DOCKERFILE, **extra):
    data = dockerfile.encode() if isinstance(dockerfile, str) else dockerfile
    payload = {"name": name, "dockerfile": SimpleUploadedFile("Dockerfile", data), **extra}
    return client.post(
        f"/api/v1/benchmarks/{benchmark.slug}/environments/", payload, format="multipart"
    )


def test_it_creates_an_environment_and_queues_its_build(
    benchmark, alice, client_for, sent, data_dir, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = _create(client_for(alice), benchmark)

    assert response.status_code == 201
    data = response.json()
    environment = Environment.objects.get(pk=data["id"])
    assert environment.owner == alice
    assert data["name"] == "cuda"
    assert data["status"] == "queued"
    assert data["benchmark"] == benchmark.slug
    assert data["image_digest"] is None
    assert [event["status"] for event in data["timeline"]] == ["queued"]
    assert sent == [(jobs.BUILD_ENVIRONMENT, (environment.pk,))]
    stored = storage.environment_dir(environment.pk) / "Dockerfile"
    assert stored.read_text() == VALID_DOCKERFILE


def test_it_keeps_the_optional_build_context(benchmark, alice, client_for, make_archive):
    context = make_archive({"weights.bin": (b"\0" * 10, 0o644)}, name="context.tar.gz")

    response = _create(
        client_for(alice),
        benchmark,
        context=SimpleUploadedFile("context.tar.gz", context.read_bytes()),
    )

    assert response.status_code == 201
    stored = storage.environment_dir(response.json()["id"]) / "context.archive"
    assert stored.read_bytes() == context.read_bytes()


def test_it_may_be_created_before_the_benchmark_opens(db, alice, client_for):
    now = timezone.now()
    upcoming = factories.BenchmarkFactory(
        opens_at=now + dt.timedelta(days=1), closes_at=now + dt.timedelta(days=2)
    )

    assert _create(client_for(alice), upcoming).status_code == 201


def test_none_is_accepted_after_closing(db, alice, client_for):
    now = timezone.now()
    closed = factories.BenchmarkFactory(
        opens_at=now - dt.timedelta(days=2), closes_at=now - dt.timedelta(days=1)
    )

    response = _create(client_for(alice), closed)

    assert response.status_code == 409
    assert response.json()["code"] == "window_closed"
    assert not Environment.objects.exists()


def test_it_refuses_a_dockerfile_that_breaks_the_policy(benchmark, alice, client_for, sent):
    dockerfile = "FROM localhost/podium/busybox:1\nRUN true\nADD https://example.com/x.bin /x.bin\n"

    response = _create(client_for(alice), benchmark, dockerfile=dockerfile)

    assert response.status_code == 400
    assert response.json()["code"] == "dockerfile_policy"
    assert "line 3" in response.json()["detail"]
    assert not Environment.objects.exists()
    assert sent == []


def test_it_refuses_a_base_image_from_another_registry(benchmark, alice, client_for):
    response = _create(client_for(alice), benchmark, dockerfile="FROM evil.example/x:1\n")

    assert response.status_code == 400
    assert response.json()["code"] == "dockerfile_policy"
    assert "line 1" in response.json()["detail"]


def test_a_dockerfile_that_is_not_utf8_is_an_invalid_parameter(benchmark, alice, client_for):
    response = _create(client_for(alice), benchmark, dockerfile=b"FROM podium/x\n\xff\xfe\n")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"
    assert not Environment.objects.exists()


def test_a_missing_dockerfile_is_an_invalid_parameter(benchmark, alice, client_for):
    response = client_for(alice).post(
        f"/api/v1/benchmarks/{benchmark.slug}/environments/", {"name": "x"}, format="multipart"
    )

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"


def test_it_keeps_at_most_max_environments(benchmark, alice, client_for):
    client = client_for(alice)
    first = _create(client, benchmark, name="one").json()
    _create(client, benchmark, name="two")

    refused = _create(client, benchmark, name="three")

    assert refused.status_code == 409
    assert refused.json()["code"] == "environment_limit"
    # Removing an unused one frees a place.
    Environment.objects.filter(pk=first["id"]).update(status=Environment.FAILED)
    assert client.delete(f"/api/v1/environments/{first['id']}/").status_code == 204
    assert _create(client, benchmark, name="three").status_code == 201


def test_it_lists_only_my_kept_environments(benchmark, alice, bob, client_for, ready_environment):
    mine = ready_environment(alice, benchmark, name="mine")
    ready_environment(alice, benchmark, name="gone", status=Environment.REMOVED)
    ready_environment(bob, benchmark, name="bobs")

    response = client_for(alice).get(f"/api/v1/benchmarks/{benchmark.slug}/environments/")

    assert response.status_code == 200
    assert [row["id"] for row in response.json()] == [mine.pk]


def test_it_shows_one_of_my_environments(benchmark, alice, client_for, ready_environment):
    environment = ready_environment(alice, benchmark, image_bytes=123)

    response = client_for(alice).get(f"/api/v1/environments/{environment.pk}/")

    assert response.status_code == 200
    data = response.json()
    assert data["id"] == environment.pk
    assert data["status"] == "ready"
    assert data["image_digest"] == environment.image_digest
    assert data["image_bytes"] == 123
    assert set(data) >= {"timeline", "created_at", "failure_reason", "build_started_at"}
    assert "dockerfile" not in data


def test_someone_elses_environment_is_not_found(
    benchmark, alice, bob, client_for, ready_environment
):
    environment = ready_environment(alice, benchmark, status=Environment.FAILED)
    client = client_for(bob)
    base = f"/api/v1/environments/{environment.pk}/"

    responses = [
        client.get(base),
        client.delete(base),
        client.post(f"{base}rebuild/"),
        client.get(f"{base}build-log"),
    ]

    assert [r.status_code for r in responses] == [404] * 4
    assert {r.json()["code"] for r in responses} == {"not_found"}
    environment.refresh_from_db()
    assert environment.status == Environment.FAILED


def test_environments_need_a_token(benchmark, alice, anon, ready_environment):
    environment = ready_environment(alice, benchmark)

    responses = [
        anon.get(f"/api/v1/benchmarks/{benchmark.slug}/environments/"),
        anon.get(f"/api/v1/environments/{environment.pk}/"),
        anon.get(f"/api/v1/environments/{environment.pk}/build-log"),
    ]

    assert [r.status_code for r in responses] == [401] * 3
    assert {r.json()["code"] for r in responses} == {"not_authenticated"}


def test_it_removes_an_unused_environment(
    benchmark, alice, client_for, ready_environment, sent, django_capture_on_commit_callbacks
):
    environment = ready_environment(alice, benchmark)

    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(alice).delete(f"/api/v1/environments/{environment.pk}/")

    assert response.status_code == 204
    environment.refresh_from_db()
    assert environment.status == Environment.REMOVED
    assert sent == [(jobs.REMOVE_IMAGE, (environment.image_tag,))]


def test_it_keeps_an_environment_an_unfinished_submission_uses(
    benchmark, alice, client_for, ready_environment, accepted
):
    environment = ready_environment(alice, benchmark)
    accepted(alice, environment)

    response = client_for(alice).delete(f"/api/v1/environments/{environment.pk}/")

    assert response.status_code == 409
    assert response.json()["code"] == "environment_in_use"
    environment.refresh_from_db()
    assert environment.status == Environment.READY


def test_it_rebuilds_a_failed_environment(
    benchmark, alice, client_for, ready_environment, sent, django_capture_on_commit_callbacks
):
    environment = ready_environment(
        alice, benchmark, status=Environment.FAILED, failure_reason="RUN exited 1"
    )

    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(alice).post(f"/api/v1/environments/{environment.pk}/rebuild/")

    assert response.status_code == 202
    assert response.json()["status"] == "queued"
    assert response.json()["failure_reason"] == ""
    assert sent == [(jobs.BUILD_ENVIRONMENT, (environment.pk,))]


def test_a_ready_environment_is_not_rebuilt(benchmark, alice, client_for, ready_environment):
    environment = ready_environment(alice, benchmark)

    response = client_for(alice).post(f"/api/v1/environments/{environment.pk}/rebuild/")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"


def test_it_serves_the_tail_of_the_build_log(benchmark, alice, client_for, ready_environment):
    environment = ready_environment(alice, benchmark)
    log = storage.ensure_dir(storage.environment_dir(environment.pk)) / "build.log"
    log.write_text("".join(f"step {n}\n" for n in range(1, 301)))
    client = client_for(alice)
    url = f"/api/v1/environments/{environment.pk}/build-log"

    default = client.get(url)
    short = client.get(url, {"tail": 2})

    assert default.status_code == 200
    assert default["Content-Type"].startswith("text/plain")
    assert default.content.decode().splitlines()[0] == "step 101"
    assert len(default.content.decode().splitlines()) == 200
    assert short.content.decode() == "step 299\nstep 300\n"


def test_a_build_log_not_written_yet_is_empty(benchmark, alice, client_for, ready_environment):
    environment = ready_environment(alice, benchmark)

    response = client_for(alice).get(f"/api/v1/environments/{environment.pk}/build-log")

    assert response.status_code == 200
    assert response.content == b""


def test_the_tail_must_be_between_1_and_2000(benchmark, alice, client_for, ready_environment):
    environment = ready_environment(alice, benchmark)
    client = client_for(alice)
    url = f"/api/v1/environments/{environment.pk}/build-log"

    for tail in ["0", "5000", "abc", "-1", "2001", "", "1.5", " 5", "\u00b2", "9" * 5000]:
        response = client.get(url, {"tail": tail})
        assert response.status_code == 400, tail
        assert response["Content-Type"] == "application/json"
        assert response.json()["code"] == "invalid_parameter"
    assert client.get(url, {"tail": "2000"}).status_code == 200
    assert client.get(url, {"tail": "1"}).status_code == 200


def test_an_oversized_dockerfile_is_refused_by_the_policy(benchmark, alice, client_for):
    huge = b"FROM localhost/podium/busybox:1\n" + b"# pad\n" * 50_000

    response = _create(client_for(alice), benchmark, dockerfile=huge)

    assert response.status_code == 400
    assert response.json()["code"] == "dockerfile_policy"
