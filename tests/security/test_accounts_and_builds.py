"""Hardening for a public contest: each test is an attacker's request that used to pass.

- One person, one account's attempts: an account without a verified email address
  uploads nothing (API or web, environment or submission) and is charged nothing.
- One entrant holds at most ``max_concurrent_builds`` builds at once (environments queued
  or building, submissions accepted or building); the next is refused, uncharged.
- The practice archive is built once per cohort and served from the storage root; a
  stream of downloads does not rebuild it each time.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from allauth.account.models import EmailAddress
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.api import downloads
from portal.contests.cohorts import cohort_import
from portal.contests.models import Cohort
from portal.environments.models import Environment
from portal.environments.services import environment_claim_build, environment_finish_build
from portal.submissions.builds import submission_build_finished
from portal.submissions.models import AttemptLedger, Submission
from portal.submissions.services import submission_transition
from tests import factories
from tests.submissions.test_concurrent_charging import source_archive

DOCKERFILE = b"FROM localhost/podium/busybox:1\n"


@pytest.fixture(autouse=True)
def _generous_throttles(settings: Any) -> None:
    """The upload throttle is not under test here: the verification and build limits are."""
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"tokens": "1000/min", "uploads": "1000/min"},
    }


@pytest.fixture
def mallory(db: Any) -> Any:
    """Signed up with a throwaway address and never followed the verification link."""
    return factories.UserFactory(username="mallory", email_verified=False)


def api(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {ApiToken.objects.create(user=user).key}")
    return client


def archive_file(tmp_path: Path) -> Path:
    path = tmp_path / "kit.tar.gz"
    path.write_bytes(source_archive())
    return path


def submit(client: APIClient, benchmark: Any, environment: Environment, tmp_path: Path) -> Any:
    """A practice upload (the benchmark has its cohorts)."""
    factories.cohorts(benchmark)
    with archive_file(tmp_path).open("rb") as source:
        return client.post(
            f"/api/v1/benchmarks/{benchmark.slug}/submissions/",
            {"environment": environment.pk, "kind": "practice", "source": source},
            format="multipart",
        )


def create_environment(client: APIClient, benchmark: Any, name: str) -> Any:
    return client.post(
        f"/api/v1/benchmarks/{benchmark.slug}/environments/",
        {"name": name, "dockerfile": SimpleUploadedFile("Dockerfile", DOCKERFILE)},
        format="multipart",
    )


def stored_files(data_dir: Path, folder: str) -> list[Path]:
    return [path for path in (data_dir / folder).rglob("*") if path.is_file()]


# One person, one account's attempts ------------------------------------------------------


def test_an_unverified_account_cannot_upload_a_submission_and_is_charged_nothing(
    mallory, benchmark, data_dir, tmp_path, sent
):
    environment = factories.EnvironmentFactory(owner=mallory, benchmark=benchmark)

    response = submit(api(mallory), benchmark, environment, tmp_path)

    assert response.status_code == 403
    assert response.json()["code"] == "email_not_verified"
    assert "Verify your email address" in response.json()["detail"]
    assert Submission.objects.count() == AttemptLedger.objects.count() == 0
    assert stored_files(data_dir, "submissions") == []
    assert sent == []


def test_an_account_with_no_address_row_at_all_cannot_upload_either(
    benchmark, data_dir, tmp_path, sent
):
    # As createsuperuser makes them: an email field, but no allauth EmailAddress.
    user = factories.UserFactory(username="root", is_staff=True, is_superuser=True)
    EmailAddress.objects.filter(user=user).delete()
    environment = factories.EnvironmentFactory(owner=user, benchmark=benchmark)

    response = submit(api(user), benchmark, environment, tmp_path)

    assert response.json()["code"] == "email_not_verified"
    assert Submission.objects.count() == 0


def test_an_unverified_account_cannot_create_or_rebuild_an_environment(
    mallory, benchmark, data_dir, sent
):
    client = api(mallory)
    failed = factories.EnvironmentFactory(
        owner=mallory, benchmark=benchmark, status=Environment.FAILED
    )

    created = create_environment(client, benchmark, "free-builds")
    rebuilt = client.post(f"/api/v1/environments/{failed.pk}/rebuild/")

    assert (created.status_code, created.json()["code"]) == (403, "email_not_verified")
    assert (rebuilt.status_code, rebuilt.json()["code"]) == (403, "email_not_verified")
    assert list(Environment.objects.values_list("pk", "status")) == [
        (failed.pk, Environment.FAILED)
    ]
    assert stored_files(data_dir, "environments") == []
    assert sent == []


def test_an_unverified_account_is_refused_on_the_web_pages_too(
    client, mallory, benchmark, data_dir, tmp_path, sent
):
    client.force_login(mallory)
    environment = factories.EnvironmentFactory(owner=mallory, benchmark=benchmark)
    source = SimpleUploadedFile("kit.tar.gz", source_archive(), content_type="application/gzip")

    submission_page = client.post(
        f"/b/{benchmark.slug}/submissions/",
        {"environment": environment.pk, "kind": "official", "source": source},
    )
    environment_page = client.post(
        f"/b/{benchmark.slug}/environments/",
        {"name": "free-builds", "dockerfile_text": DOCKERFILE.decode()},
    )

    assert submission_page.status_code == environment_page.status_code == 400
    assert "Verify your email address" in submission_page.content.decode()
    assert "Verify your email address" in environment_page.content.decode()
    assert Submission.objects.count() == AttemptLedger.objects.count() == 0
    assert Environment.objects.count() == 1
    assert sent == []


def test_once_verified_the_same_upload_is_accepted_and_charged_once(
    mallory, benchmark, data_dir, tmp_path, sent
):
    client = api(mallory)
    environment = factories.EnvironmentFactory(owner=mallory, benchmark=benchmark)
    assert submit(client, benchmark, environment, tmp_path).status_code == 403

    EmailAddress.objects.filter(user=mallory).update(verified=True)
    response = submit(client, benchmark, environment, tmp_path)

    assert response.status_code == 201, response.content
    assert list(AttemptLedger.objects.values_list("delta", flat=True)) == [AttemptLedger.CHARGE]
    assert create_environment(client, benchmark, "second").status_code == 201


# The per-entrant build limit ----------------------------------------------------------------


@pytest.fixture
def two_builds(alice, benchmark, tmp_path, sent) -> dict[str, Any]:
    """alice holds both build slots: one environment queued, one submission accepted."""
    client = api(alice)
    ready = factories.EnvironmentFactory(owner=alice, benchmark=benchmark)
    queued = create_environment(client, benchmark, "second")
    accepted = submit(client, benchmark, ready, tmp_path)
    assert (queued.status_code, accepted.status_code) == (201, 201)
    return {
        "client": client,
        "ready": ready,
        "queued": Environment.objects.get(pk=queued.json()["id"]),
        "submission": Submission.objects.get(pk=accepted.json()["id"]),
    }


def finish_submission_build(submission: Submission) -> None:
    """The build worker's two steps: accepted -> building -> queued (to be scored)."""
    submission_transition(submission.pk, frm=[Submission.ACCEPTED], to=Submission.BUILDING)
    submission_build_finished(
        submission_id=submission.pk, ok=True, image_tag="sub", image_digest="sha256:" + "d" * 64
    )


def test_a_third_concurrent_build_is_refused_and_charged_nothing(
    alice, benchmark, data_dir, tmp_path, sent, two_builds
):
    sent.clear()
    source_files = stored_files(data_dir, "submissions")

    response = submit(two_builds["client"], benchmark, two_builds["ready"], tmp_path)

    assert response.status_code == 409
    assert response.json()["code"] == "too_many_builds"
    assert "2 builds queued or building" in response.json()["detail"]
    assert Submission.objects.count() == 1
    assert list(AttemptLedger.objects.values_list("delta", flat=True)) == [AttemptLedger.CHARGE]
    assert stored_files(data_dir, "submissions") == source_files
    assert sent == []


def test_a_rebuild_is_a_build_too(alice, benchmark, tmp_path, sent, two_builds):
    client, failed = two_builds["client"], two_builds["queued"]
    environment_claim_build(failed.pk)
    environment_finish_build(environment_id=failed.pk, status=Environment.FAILED, reason="exit 3")
    assert submit(client, benchmark, two_builds["ready"], tmp_path).status_code == 201

    refused = client.post(f"/api/v1/environments/{failed.pk}/rebuild/")
    finish_submission_build(two_builds["submission"])
    accepted = client.post(f"/api/v1/environments/{failed.pk}/rebuild/")

    assert (refused.status_code, refused.json()["code"]) == (409, "too_many_builds")
    assert accepted.status_code == 202, accepted.content
    statuses = failed.events.order_by("at", "id").values_list("status", flat=True)
    assert list(statuses) == ["queued", "building", "failed", "queued"]


def test_the_next_build_is_accepted_once_one_finishes(alice, benchmark, tmp_path, sent, two_builds):
    client, ready = two_builds["client"], two_builds["ready"]
    assert submit(client, benchmark, ready, tmp_path).status_code == 409

    environment_claim_build(two_builds["queued"].pk)
    environment_finish_build(
        environment_id=two_builds["queued"].pk, status=Environment.READY, image_tag="img"
    )
    third = submit(client, benchmark, ready, tmp_path)
    fourth = submit(client, benchmark, ready, tmp_path)
    finish_submission_build(two_builds["submission"])
    fifth = submit(client, benchmark, ready, tmp_path)

    assert third.status_code == 201, third.content
    assert fourth.json()["code"] == "too_many_builds"
    assert fifth.status_code == 201, fifth.content
    assert AttemptLedger.objects.count() == 3


def test_builds_of_another_entrant_or_benchmark_take_no_slot_of_yours(
    alice, bob, benchmark, tmp_path, sent, two_builds
):
    other_benchmark = factories.BenchmarkFactory()
    bobs = factories.EnvironmentFactory(owner=bob, benchmark=benchmark)
    elsewhere = factories.EnvironmentFactory(owner=alice, benchmark=other_benchmark)

    assert submit(api(bob), benchmark, bobs, tmp_path).status_code == 201
    assert submit(two_builds["client"], other_benchmark, elsewhere, tmp_path).status_code == 201


def test_a_third_build_is_refused_on_the_web_page_with_the_reason(
    client, alice, benchmark, data_dir, two_builds
):
    client.force_login(alice)
    source = SimpleUploadedFile("kit.tar.gz", source_archive(), content_type="application/gzip")

    page = client.post(
        f"/b/{benchmark.slug}/submissions/",
        {"environment": two_builds["ready"].pk, "kind": "practice", "source": source},
    )

    assert page.status_code == 400
    assert "try again when one of them finishes" in page.content.decode()
    assert Submission.objects.count() == 1


def test_simultaneous_uploads_take_no_more_than_the_free_build_slots(
    crowd_server, data_dir, monkeypatch, settings
):
    sent: list[str] = []
    monkeypatch.setattr(
        "portal.core.jobs.app.send_task", lambda name, args, **kw: sent.append(name)
    )
    alice = factories.UserFactory(username="alice")
    benchmark = factories.BenchmarkFactory(practice_per_day=100)
    factories.cohorts(benchmark)
    environment = factories.EnvironmentFactory(owner=alice, benchmark=benchmark)
    token = ApiToken.objects.create(user=alice).key
    source = source_archive()

    def upload(_: int) -> requests.Response:
        return requests.post(
            f"{crowd_server}/api/v1/benchmarks/{benchmark.slug}/submissions/",
            headers={"Authorization": f"Token {token}"},
            data={"environment": environment.pk, "kind": "practice"},
            files={"source": ("kit.tar.gz", source)},
            timeout=120,
        )

    with ThreadPoolExecutor(max_workers=12) as pool:
        responses = list(pool.map(upload, range(12)))

    codes = [response.status_code for response in responses]
    assert codes.count(201) == 2, [r.text for r in responses if r.status_code != 409][:3]
    assert {r.json()["code"] for r in responses if r.status_code != 201} == {"too_many_builds"}
    assert AttemptLedger.objects.count() == Submission.objects.count() == 2
    assert len(stored_files(data_dir, "submissions")) == 2
    assert sent == ["scoring.build_submission"] * 2


# The practice archive, built once per cohort ---------------------------------------------------


@pytest.fixture
def import_practice(benchmark, tmp_path) -> Callable[[dict[str, tuple[bytes, int]]], Cohort]:
    def make(members: dict[str, tuple[bytes, int]]) -> Cohort:
        images = tmp_path / f"images-{len(list(tmp_path.iterdir()))}"
        for name, (data, _class) in members.items():
            (images / name).parent.mkdir(parents=True, exist_ok=True)
            (images / name).write_bytes(data)
        answers = [(name, klass) for name, (_data, klass) in members.items()]
        return cohort_import(
            benchmark=benchmark, kind=Cohort.PRACTICE, images_dir=images, answers=answers
        )

    return make


@pytest.fixture
def builds(monkeypatch) -> list[int]:
    """The cohort id of every practice archive build."""
    calls: list[int] = []
    real = downloads.practice_archive_build

    def counting(cohort: Cohort, items: Any, path: Path) -> None:
        calls.append(cohort.pk)
        real(cohort, items, path)

    monkeypatch.setattr(downloads, "practice_archive_build", counting)
    return calls


def download(client: APIClient, benchmark: Any) -> tuple[Any, dict[str, str]]:
    response = client.get(f"/api/v1/benchmarks/{benchmark.slug}/practice/download")
    assert response.status_code == 200, response.content
    body = b"".join(response.streaming_content)
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as archive:
        answers = archive.extractfile("answers.tsv").read().decode()
    return response, dict(line.split("\t") for line in answers.splitlines())


def test_the_practice_archive_is_built_once_and_served_as_a_file(
    alice, benchmark, data_dir, import_practice, builds
):
    cohort = import_practice({"a.jpg": (b"jpeg a", 3), "b.jpg": (b"jpeg b", 7)})
    client = api(alice)

    _, answers = download(client, benchmark)
    [kept] = (data_dir / "practice").iterdir()
    kept_inode = kept.stat().st_ino
    _, again = download(client, benchmark)
    third, _ = download(client, benchmark)

    assert builds == [cohort.pk]
    assert answers == again == {"a.jpg": "3", "b.jpg": "7"}
    assert kept.name.startswith(f"{cohort.pk}-") and kept.stat().st_ino == kept_inode
    assert int(third["Content-Length"]) == kept.stat().st_size  # that file, as it is


def test_the_practice_archive_is_rebuilt_when_the_cohort_changes(
    alice, benchmark, data_dir, import_practice, builds
):
    cohort = import_practice({"a.jpg": (b"jpeg a", 3)})
    client = api(alice)
    download(client, benchmark)

    cohort.items.update(reference_class=4)  # an answer corrected in place: a new digest
    _, corrected = download(client, benchmark)
    reimported = import_practice({"a.jpg": (b"jpeg a", 4), "c.jpg": (b"jpeg c", 9)})
    _, replaced = download(client, benchmark)
    download(client, benchmark)

    assert builds == [cohort.pk, cohort.pk, reimported.pk]
    assert corrected == {"a.jpg": "4"}
    assert replaced == {"a.jpg": "4", "c.jpg": "9"}
    [kept] = (data_dir / "practice").iterdir()  # the stale archives are gone
    assert kept.name.startswith(f"{reimported.pk}-")


def test_a_missing_practice_file_is_not_found_and_leaves_no_partial_archive(
    alice, benchmark, data_dir, import_practice
):
    cohort = import_practice({"a.jpg": (b"jpeg a", 3)})
    (data_dir / "cohorts" / str(cohort.pk) / "a.jpg").unlink()

    response = api(alice).get(f"/api/v1/benchmarks/{benchmark.slug}/practice/download")

    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    assert list((data_dir / "practice").iterdir()) == []
