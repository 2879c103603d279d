"""An upload of a kind whose cohort the benchmark lacks is refused at once (``no_cohort``),
and every cheap refusal comes before the archive is inspected.

The README's own import makes only the official cohort: a practice upload there used to
be accepted and charged, then stall its hardware class's queue at the claim.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from podium_cli.errors import Refused
from podium_policy import archives
from portal.contests.models import Benchmark, Cohort
from portal.submissions.models import AttemptLedger, Submission
from tests import factories


@pytest.fixture
def official_only(benchmark: Benchmark) -> Benchmark:
    """A benchmark as the README's import leaves it: an official cohort, no practice one."""
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    return benchmark


@pytest.fixture
def inspected(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The archives the upload path inspected (the real inspection still runs)."""
    calls: list[Path] = []
    real = archives.inspect_archive

    def spy(path: Path, fmt: str) -> Any:
        calls.append(path)
        return real(path, fmt)

    monkeypatch.setattr(archives, "inspect_archive", spy)
    return calls


def stored_sources(data_dir: Path) -> list[Path]:
    return [path for path in (data_dir / "submissions").rglob("*") if path.is_file()]


def quota(client: Any, benchmark: Benchmark) -> dict[str, Any]:
    response = client.get(f"/api/v1/benchmarks/{benchmark.slug}/quota/")
    assert response.status_code == 200
    return dict(response.json())


def test_a_practice_upload_without_a_practice_cohort_is_refused_and_charges_nothing(
    official_only, alice, client_for, make_archive, upload, sent, data_dir, inspected
):
    environment = factories.EnvironmentFactory(owner=alice, benchmark=official_only)
    client = client_for(alice)

    response = upload(client, official_only, environment.pk, make_archive(), kind="practice")

    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "no_cohort"
    assert "no practice cohort" in body["detail"] and "nothing was charged" in body["detail"]
    assert not Submission.objects.exists() and not AttemptLedger.objects.exists()
    assert quota(client, official_only)["practice"]["used_today"] == 0
    assert stored_sources(data_dir) == [] and sent == [] and inspected == []
    # The official cohort is there: an official upload of the same archive is accepted.
    accepted = upload(client, official_only, environment.pk, make_archive())
    assert accepted.status_code == 201, accepted.content


def test_an_official_upload_without_any_cohort_is_refused_too(
    benchmark, alice, client_for, make_archive, upload
):
    environment = factories.EnvironmentFactory(owner=alice, benchmark=benchmark)

    response = upload(client_for(alice), benchmark, environment.pk, make_archive())

    assert response.status_code == 409
    assert response.json()["code"] == "no_cohort"
    assert "no official cohort" in response.json()["detail"]
    assert not AttemptLedger.objects.exists()


def test_the_web_form_shows_the_refusal_and_charges_nothing(
    client, official_only, alice, make_archive, data_dir
):
    environment = factories.EnvironmentFactory(owner=alice, benchmark=official_only)
    client.force_login(alice)
    archive = make_archive()

    page = client.post(
        f"/b/{official_only.slug}/submissions/",
        {
            "environment": environment.pk,
            "kind": "practice",
            "source": SimpleUploadedFile(archive.name, archive.read_bytes()),
        },
    )

    assert page.status_code == 400
    assert "This benchmark has no practice cohort yet" in page.content.decode()
    assert not Submission.objects.exists() and not AttemptLedger.objects.exists()
    assert stored_sources(data_dir) == []


def test_a_campaign_upload_needs_its_cohort_as_well(alice, client_for, make_archive, upload):
    campaign = factories.BenchmarkFactory(kind=Benchmark.CAMPAIGN)
    environment = factories.EnvironmentFactory(owner=alice, benchmark=campaign)

    response = upload(client_for(alice), campaign, environment.pk, make_archive())

    # A campaign's rounds draw their requests from its official cohort.
    assert response.status_code == 409 and response.json()["code"] == "no_cohort"
    assert not AttemptLedger.objects.exists()


def test_the_cli_names_the_refusal():
    refusal = Refused("no_cohort", "This benchmark has no practice cohort yet.", url="x")

    assert str(refusal).startswith("No cohort to score it on: This benchmark has no practice")
    assert "Nothing was charged." in str(refusal)


# The archive is inspected only after every cheap check --------------------------------


def test_with_no_attempts_left_an_invalid_archive_is_not_even_inspected(
    benchmark, alice, client_for, ready_environment, make_archive, upload, inspected
):
    benchmark.attempts_per_day = 1
    benchmark.save(update_fields=["attempts_per_day"])
    environment = ready_environment(alice, benchmark)
    client = client_for(alice)
    assert upload(client, benchmark, environment.pk, make_archive()).status_code == 201
    Submission.objects.update(status=Submission.QUEUED)  # built: its build slot is free
    assert len(inspected) == 1
    junk = make_archive({"not-a-run": (b"hello\n", 0o644)})

    response = upload(client, benchmark, environment.pk, junk)

    assert response.status_code == 429
    assert response.json()["code"] == "quota_exhausted"  # not invalid_archive
    assert len(inspected) == 1  # the inspection never ran
    assert AttemptLedger.objects.count() == 1


def test_with_an_attempt_left_the_same_archive_is_inspected_and_refused(
    benchmark, alice, client_for, ready_environment, make_archive, upload, inspected
):
    environment = ready_environment(alice, benchmark)
    junk = make_archive({"not-a-run": (b"hello\n", 0o644)})

    response = upload(client_for(alice), benchmark, environment.pk, junk)

    assert response.status_code == 400 and response.json()["code"] == "invalid_archive"
    assert len(inspected) == 1 and not AttemptLedger.objects.exists()
