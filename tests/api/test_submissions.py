"""Submissions: upload, list, read, logs, source."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
import tarfile
import zipfile

from django.core.files.uploadhandler import TemporaryFileUploadHandler
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.contests.models import Cohort
from portal.core import jobs, storage
from portal.environments.models import Environment
from portal.submissions.models import AttemptLedger, Run, Submission
from tests import factories


def _url(benchmark):
    return f"/api/v1/benchmarks/{benchmark.slug}/submissions/"


def test_it_accepts_an_upload_and_charges_an_attempt(
    benchmark,
    alice,
    client_for,
    ready_environment,
    make_archive,
    upload,
    sent,
    django_capture_on_commit_callbacks,
):
    environment = ready_environment(alice, benchmark)
    archive = make_archive()

    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client_for(alice), benchmark, environment.pk, archive)

    assert response.status_code == 201
    data = response.json()
    submission = Submission.objects.get(pk=data["id"])
    assert submission.entrant == alice
    assert data["kind"] == "official"
    assert data["status"] == "accepted"
    assert data["environment"] == environment.pk
    assert data["benchmark"] == benchmark.slug
    assert data["attempt"] == {"charged": True, "refunded": False}
    assert data["digests"] == {
        "source": "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest(),
        "environment_image": environment.image_digest,
        "submission_image": None,
        "output": None,
    }
    assert data["runs"] == 0
    assert data["wall_time_ns"] is None
    assert [event["status"] for event in data["timeline"]] == ["accepted"]
    assert sent == [(jobs.BUILD_SUBMISSION, (submission.pk,))]
    assert AttemptLedger.objects.get(submission=submission).delta == 1


def test_it_accepts_a_practice_upload_on_its_own_allowance(
    benchmark, alice, client_for, ready_environment, make_archive, upload
):
    environment = ready_environment(alice, benchmark)
    client = client_for(alice)

    response = upload(client, benchmark, environment.pk, make_archive(), kind="practice")

    assert response.status_code == 201
    assert response.json()["kind"] == "practice"
    quota = client.get(f"/api/v1/benchmarks/{benchmark.slug}/quota/").json()
    assert quota["practice"]["used_today"] == 1
    assert quota["used_today"] == 0


def test_it_accepts_tar_and_zip_archives(
    benchmark, alice, client_for, ready_environment, upload, tmp_path
):
    environment = ready_environment(alice, benchmark, name="e")
    plain_tar = tmp_path / "source.tar"
    with tarfile.open(plain_tar, "w") as archive:
        for name, mode in [("run", 0o755), ("build.sh", 0o644)]:
            info = tarfile.TarInfo(name)
            info.size, info.mode = 2, mode
            archive.addfile(info, io.BytesIO(b"#\n"))
    as_zip = tmp_path / "source.zip"
    with zipfile.ZipFile(as_zip, "w") as archive:
        run = zipfile.ZipInfo("run")
        run.external_attr = 0o100755 << 16
        archive.writestr(run, "#!/bin/sh\n")
        archive.writestr("build.sh", "true\n")
    client = client_for(alice)

    responses = [upload(client, benchmark, environment.pk, path) for path in (plain_tar, as_zip)]

    assert [r.status_code for r in responses] == [201, 201]
    formats = list(Submission.objects.order_by("id").values_list("source_format", flat=True))
    assert formats == ["tar", "zip"]


def test_quota_exhausted_after_attempts_per_day_uploads(
    benchmark, alice, client_for, ready_environment, make_archive, upload, data_dir
):
    environment = ready_environment(alice, benchmark)
    client = client_for(alice)
    codes = [upload(client, benchmark, environment.pk, make_archive()).status_code for _ in "ab"]
    assert codes == [201, 201]
    files_before = sorted(p for p in data_dir.rglob("*") if p.is_file())

    response = upload(client, benchmark, environment.pk, make_archive())

    assert response.status_code == 429
    assert response.json()["code"] == "quota_exhausted"
    assert Submission.objects.count() == 2
    assert AttemptLedger.objects.count() == 2
    assert sorted(p for p in data_dir.rglob("*") if p.is_file()) == files_before


def test_uploads_wait_for_the_window_to_open(
    db, alice, client_for, ready_environment, make_archive, upload
):
    now = timezone.now()
    upcoming = factories.BenchmarkFactory(
        opens_at=now + dt.timedelta(hours=1), closes_at=now + dt.timedelta(days=2)
    )
    environment = ready_environment(alice, upcoming)

    response = upload(client_for(alice), upcoming, environment.pk, make_archive())

    assert response.status_code == 409
    assert response.json()["code"] == "window_not_open"
    assert not Submission.objects.exists()
    assert not AttemptLedger.objects.exists()


def test_uploads_stop_when_the_window_closes(
    db, alice, client_for, ready_environment, make_archive, upload, data_dir
):
    now = timezone.now()
    closed = factories.BenchmarkFactory(
        opens_at=now - dt.timedelta(days=2), closes_at=now - dt.timedelta(seconds=1)
    )
    environment = ready_environment(alice, closed)

    response = upload(client_for(alice), closed, environment.pk, make_archive())

    assert response.status_code == 409
    assert response.json()["code"] == "window_closed"
    assert not Submission.objects.exists()
    assert not [path for path in data_dir.rglob("*") if path.is_file()]


def test_an_environment_still_building_is_not_ready(
    benchmark, alice, client_for, ready_environment, make_archive, upload
):
    environment = ready_environment(alice, benchmark, status=Environment.BUILDING)

    response = upload(client_for(alice), benchmark, environment.pk, make_archive())

    assert response.status_code == 409
    assert response.json()["code"] == "environment_not_ready"
    assert not AttemptLedger.objects.exists()


def test_someone_elses_environment_is_not_found(
    benchmark, alice, bob, client_for, ready_environment, make_archive, upload
):
    alices = ready_environment(alice, benchmark)

    response = upload(client_for(bob), benchmark, alices.pk, make_archive())

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert not Submission.objects.exists()


def test_a_text_file_named_tar_gz_is_an_invalid_archive(
    benchmark, alice, client_for, ready_environment, upload, tmp_path
):
    environment = ready_environment(alice, benchmark)
    fake = tmp_path / "source.tar.gz"
    fake.write_text("this is not an archive\n")

    response = upload(client_for(alice), benchmark, environment.pk, fake)

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_archive"
    assert not AttemptLedger.objects.exists()


def test_an_archive_escaping_its_folder_is_invalid(
    benchmark, alice, client_for, ready_environment, make_archive, upload
):
    environment = ready_environment(alice, benchmark)
    evil = make_archive(
        {
            "run": (b"#!/bin/sh\n", 0o755),
            "build.sh": (b"true\n", 0o644),
            "../evil": (b"gotcha\n", 0o644),
        }
    )

    response = upload(client_for(alice), benchmark, environment.pk, evil)

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_archive"
    assert not Submission.objects.exists()


def test_an_archive_without_run_or_build_sh_is_invalid(
    benchmark, alice, client_for, ready_environment, make_archive, upload
):
    environment = ready_environment(alice, benchmark)
    neither = make_archive({"src/run": (b"#!/bin/sh\n", 0o755), "README": (b"hi\n", 0o644)})

    response = upload(client_for(alice), benchmark, environment.pk, neither)

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_archive"
    assert "build.sh" in response.json()["detail"]
    assert not Submission.objects.exists()


def test_an_archive_over_the_upload_limit_is_too_large(
    benchmark, alice, client_for, ready_environment, make_archive, upload
):
    benchmark.max_upload_bytes = 64
    benchmark.save(update_fields=["max_upload_bytes"])
    environment = ready_environment(alice, benchmark)

    response = upload(client_for(alice), benchmark, environment.pk, make_archive())

    assert response.status_code == 413
    assert response.json()["code"] == "archive_too_large"
    assert not AttemptLedger.objects.exists()


def test_an_upload_declared_over_the_limit_is_refused_before_it_is_written(
    benchmark, alice, client_for, ready_environment, make_archive, upload, monkeypatch
):
    benchmark.max_upload_bytes = 64
    benchmark.save(update_fields=["max_upload_bytes"])
    environment = ready_environment(alice, benchmark)
    written: list[str] = []
    monkeypatch.setattr(
        TemporaryFileUploadHandler, "new_file", lambda self, *a, **kw: written.append("file")
    )
    big = make_archive({"run": (b"#!/bin/sh\n", 0o755), "weights": (os.urandom(2 << 20), 0o644)})

    response = upload(client_for(alice), benchmark, environment.pk, big)

    assert response.status_code == 413
    assert response.json()["code"] == "archive_too_large"
    assert written == []  # the body was never spooled to disk
    assert not Submission.objects.exists()


def test_a_missing_source_or_bad_kind_is_an_invalid_parameter(
    benchmark, alice, client_for, ready_environment, make_archive, upload
):
    environment = ready_environment(alice, benchmark)
    client = client_for(alice)

    no_source = upload(client, benchmark, environment.pk, None)
    bad_kind = upload(client, benchmark, environment.pk, make_archive(), kind="warmup")
    bad_environment = upload(client, benchmark, "abc", make_archive())

    for response in (no_source, bad_kind, bad_environment):
        assert response.status_code == 400
        assert response.json()["code"] == "invalid_parameter"
    assert "source" in no_source.json()["detail"]
    assert not Submission.objects.exists()


def test_uploads_need_a_token(benchmark, alice, anon, ready_environment, make_archive, upload):
    environment = ready_environment(alice, benchmark)

    response = upload(anon, benchmark, environment.pk, make_archive())

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_it_lists_my_submissions_newest_first_paginated(
    benchmark, alice, bob, client_for, ready_environment, accepted
):
    environment = ready_environment(alice, benchmark)
    older = accepted(alice, environment)
    newer = accepted(alice, environment, kind="practice")
    accepted(bob, ready_environment(bob, benchmark))

    response = client_for(alice).get(_url(benchmark))

    assert response.status_code == 200
    data = response.json()
    assert data["count"] == 2
    assert data["next"] is None and data["previous"] is None
    assert [row["id"] for row in data["results"]] == [newer.pk, older.pk]


def test_it_shows_the_latest_run_but_never_per_image_data(
    benchmark, alice, client_for, ready_environment, accepted
):
    submission = accepted(alice, ready_environment(alice, benchmark))
    cohort = Cohort.objects.get(benchmark=benchmark, kind=Cohort.OFFICIAL)
    Submission.objects.filter(pk=submission.pk).update(
        status=Submission.PASSED, image_digest="sha256:" + "b" * 64
    )
    Run.objects.create(submission=submission, cohort=cohort, try_number=1, status=Run.INFRA_FAILED)
    Run.objects.create(
        submission=submission,
        cohort=cohort,
        try_number=2,
        status=Run.FINISHED,
        passed=True,
        wall_time_ns=1_234_567_890,
        matches=9950,
        total=10000,
        output_sha256="c" * 64,
        supervisor_sha256="d" * 64,
        host_start_ns=10,
        host_end_ns=2_000_000_000,
        trusted_start_ns=20,
        trusted_end_ns=1_234_567_910,
        readings={"gpu": "idle"},
        rusage={"maxrss": 1},
    )

    response = client_for(alice).get(f"/api/v1/submissions/{submission.pk}/")

    assert response.status_code == 200
    data = response.json()
    assert data["status"] == "passed"
    assert (data["wall_time_ns"], data["matches"], data["total"], data["passed"]) == (
        1_234_567_890,
        9950,
        10000,
        True,
    )
    assert data["runs"] == 2
    assert data["digests"]["submission_image"] == "sha256:" + "b" * 64
    assert data["digests"]["output"] == "sha256:" + "c" * 64
    assert data["supervisor_sha256"] == "sha256:" + "d" * 64
    assert data["host_interval_ns"] == [10, 2_000_000_000]
    assert data["trusted_interval_ns"] == [20, 1_234_567_910]
    body = response.content.decode()
    for secret in ("reference", "manifest", "staged", "canonical", "readings"):
        assert secret not in body


def _finished_run(submission: Submission, resources: dict) -> Run:
    cohort = Cohort.objects.get(benchmark=submission.benchmark, kind=Cohort.OFFICIAL)
    Submission.objects.filter(pk=submission.pk).update(status=Submission.PASSED)
    return Run.objects.create(
        submission=submission,
        cohort=cohort,
        status=Run.FINISHED,
        passed=True,
        wall_time_ns=2_000_000_000,
        matches=9950,
        total=10000,
        resources=resources,
    )


CGROUP = {"cpu_user_s": 1.5, "cpu_system_s": 0.5, "cpu_per_wall": 1.0, "oom_events": 0}


def test_a_run_on_a_gpu_class_publishes_its_energy_per_image_and_gpu_utilization(
    benchmark, alice, client_for, ready_environment, accepted
):
    gpu = accepted(alice, ready_environment(alice, benchmark))
    cpu = accepted(alice, ready_environment(alice, benchmark))
    samples = [[[0, 0, 615, 117.3, 8_000_000], [100, 98, 5812, 480.0, 8_030_000]]]
    _finished_run(
        gpu,
        CGROUP
        | {
            "gpu": {
                "energy_j": 30.0,
                "energy_per_image_j": 0.003,
                "gpu_util_mean_pct": 49.0,
                "samples": samples,
                "error": "",
            }
        },
    )
    _finished_run(cpu, CGROUP)
    client = client_for(alice)

    gpu_data = client.get(f"/api/v1/submissions/{gpu.pk}/").json()["resources"]
    cpu_data = client.get(f"/api/v1/submissions/{cpu.pk}/").json()["resources"]

    assert (gpu_data["energy_per_image_j"], gpu_data["gpu_util_mean_pct"]) == (0.003, 49.0)
    assert gpu_data["cpu_per_wall"] == 1.0
    assert "samples" not in gpu_data and "energy_j" not in gpu_data  # the figures only
    assert (cpu_data["energy_per_image_j"], cpu_data["gpu_util_mean_pct"]) == (None, None)


def test_someone_elses_submission_is_not_found(
    benchmark, alice, bob, client_for, ready_environment, accepted
):
    submission = accepted(alice, ready_environment(alice, benchmark))
    client = client_for(bob)
    base = f"/api/v1/submissions/{submission.pk}/"

    responses = [
        client.get(base),
        client.get(f"{base}build-log"),
        client.get(f"{base}run-log"),
        client.get(f"{base}source"),
        client.get("/api/v1/submissions/999999/"),
    ]

    assert [r.status_code for r in responses] == [404] * 5
    assert {r.json()["code"] for r in responses} == {"not_found"}
    assert client.get(_url(benchmark)).json()["count"] == 0


def test_it_serves_the_build_and_run_log_tails(
    benchmark, alice, client_for, ready_environment, accepted
):
    submission = accepted(alice, ready_environment(alice, benchmark))
    (storage.submission_dir(submission.pk) / "build.log").write_text("a\nb\nc\n")
    cohort = Cohort.objects.get(benchmark=benchmark, kind=Cohort.OFFICIAL)
    old = Run.objects.create(submission=submission, cohort=cohort, try_number=1)
    new = Run.objects.create(submission=submission, cohort=cohort, try_number=2)
    storage.ensure_dir(storage.run_dir(old.pk)).joinpath("run.log").write_text("old\n")
    storage.ensure_dir(storage.run_dir(new.pk)).joinpath("run.log").write_text("x\ny\nz\n")
    client = client_for(alice)
    base = f"/api/v1/submissions/{submission.pk}/"

    build = client.get(f"{base}build-log", {"tail": 2})
    run = client.get(f"{base}run-log")

    assert build.status_code == run.status_code == 200
    assert build["Content-Type"].startswith("text/plain")
    assert build.content == b"b\nc\n"
    assert run.content == b"x\ny\nz\n"


def test_the_run_log_is_empty_before_any_run(
    benchmark, alice, client_for, ready_environment, accepted
):
    submission = accepted(alice, ready_environment(alice, benchmark))

    response = client_for(alice).get(f"/api/v1/submissions/{submission.pk}/run-log")

    assert response.status_code == 200
    assert response.content == b""


def test_log_tails_refuse_a_bad_tail(benchmark, alice, client_for, ready_environment, accepted):
    submission = accepted(alice, ready_environment(alice, benchmark))
    client = client_for(alice)

    for log in ("build-log", "run-log"):
        for tail in (
            "0",
            "-1",
            "2001",
            "5000",
            "abc",
            "1.5",
            "",
            " 5",
            "5 ",
            "+5",
            "\u0665",
            "9" * 5000,
        ):
            response = client.get(f"/api/v1/submissions/{submission.pk}/{log}", {"tail": tail})
            assert response.status_code == 400, (log, tail)
            assert response.json()["code"] == "invalid_parameter"
        ok = client.get(f"/api/v1/submissions/{submission.pk}/{log}", {"tail": "2000"})
        assert ok.status_code == 200, log


def test_an_entrant_downloads_their_own_source_unaudited(
    benchmark, alice, client_for, ready_environment, make_archive, upload
):
    archive = make_archive(name="my-solution.tar.gz")
    client = client_for(alice)
    created = upload(client, benchmark, ready_environment(alice, benchmark).pk, archive).json()

    response = client.get(f"/api/v1/submissions/{created['id']}/source")

    assert response.status_code == 200
    assert b"".join(response.streaming_content) == archive.read_bytes()
    assert 'filename="my-solution.tar.gz"' in response["Content-Disposition"]
    assert not AuditEvent.objects.exists()


def test_sources_need_a_token(benchmark, alice, anon, ready_environment, accepted):
    submission = accepted(alice, ready_environment(alice, benchmark))

    response = anon.get(f"/api/v1/submissions/{submission.pk}/source")

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
