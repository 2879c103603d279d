"""An entrant's submissions through the pages: upload, status, timeline, logs, privacy."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import tarfile
import zipfile
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone

from portal.contests.models import Cohort, CohortItem
from portal.core import jobs
from portal.environments.models import Environment
from portal.submissions.models import AttemptLedger, Run, Submission, SubmissionEvent
from tests import factories

KST = ZoneInfo("Asia/Seoul")


@pytest.fixture
def ready_env(alice, benchmark) -> Environment:
    """Alice's ready environment on the benchmark, which has both its cohorts."""
    factories.cohorts(benchmark)
    return factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, name="ready-one", image_digest="sha256:" + "e" * 64
    )


def source_archive(tmp_path: Path, name: str = "entry.tar.gz") -> Path:
    """A minimal valid entry: an executable ``run`` and a ``build.sh``."""
    path = tmp_path / name
    with tarfile.open(path, "w:gz") as archive:
        for member, mode, body in (
            ("run", 0o755, b"#!/bin/sh\nexit 0\n"),
            ("build.sh", 0o644, b"#!/bin/sh\ntrue\n"),
        ):
            info = tarfile.TarInfo(member)
            info.mode = mode
            info.size = len(body)
            archive.addfile(info, io.BytesIO(body))
    return path


def upload(path: Path) -> SimpleUploadedFile:
    return SimpleUploadedFile(path.name, path.read_bytes(), content_type="application/gzip")


def make_submission(entrant, environment, **fields) -> Submission:
    values = {
        "entrant": entrant,
        "benchmark": environment.benchmark,
        "environment": environment,
        "submitted_at": timezone.now(),
        "source_name": "entry.tar.gz",
        "source_format": "tar.gz",
        "source_sha256": "5" * 64,
        "source_bytes": 123,
    }
    values.update(fields)
    return Submission.objects.create(**values)


def test_uploading_a_valid_archive_creates_a_submission_and_charges_an_attempt(
    client, alice, benchmark, ready_env, tmp_path, sent, django_capture_on_commit_callbacks
):
    client.force_login(alice)

    with django_capture_on_commit_callbacks(execute=True):
        page = client.post(
            f"/b/{benchmark.slug}/submissions/",
            {
                "environment": ready_env.pk,
                "kind": "official",
                "source": upload(source_archive(tmp_path)),
            },
        )

    submission = Submission.objects.get(entrant=alice)
    assert page.status_code == 302
    assert page["Location"] == reverse("submissions:detail", kwargs={"pk": submission.pk})
    assert submission.kind == Submission.OFFICIAL
    assert submission.source_name == "entry.tar.gz"
    assert submission.environment == ready_env
    charges = AttemptLedger.objects.filter(submission=submission)
    assert [entry.delta for entry in charges] == [AttemptLedger.CHARGE]
    assert sent == [(jobs.BUILD_SUBMISSION, (submission.pk,))]


def test_a_practice_upload_charges_the_practice_allowance(
    client, alice, benchmark, ready_env, tmp_path
):
    client.force_login(alice)

    client.post(
        f"/b/{benchmark.slug}/submissions/",
        {
            "environment": ready_env.pk,
            "kind": "practice",
            "source": upload(source_archive(tmp_path)),
        },
    )

    assert AttemptLedger.objects.get().kind == Submission.PRACTICE


def test_a_bad_archive_is_refused_with_a_reason_and_charges_nothing(
    client, alice, benchmark, ready_env, tmp_path
):
    client.force_login(alice)
    junk = SimpleUploadedFile("entry.tar.gz", b"this is not a gzip file")

    page = client.post(
        f"/b/{benchmark.slug}/submissions/",
        {"environment": ready_env.pk, "kind": "official", "source": junk},
    )

    assert page.status_code == 400
    assert page.context["form"].non_field_errors()
    assert not Submission.objects.exists()
    assert not AttemptLedger.objects.exists()


def test_an_archive_without_an_entrypoint_is_refused_with_the_reason(
    client, alice, benchmark, ready_env, tmp_path
):
    path = tmp_path / "empty.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        info = tarfile.TarInfo("README")
        archive.addfile(info, io.BytesIO(b""))
    client.force_login(alice)

    page = client.post(
        f"/b/{benchmark.slug}/submissions/",
        {"environment": ready_env.pk, "kind": "official", "source": upload(path)},
    )

    assert page.status_code == 400
    assert "build.sh" in " ".join(page.context["form"].non_field_errors())
    assert not AttemptLedger.objects.exists()


def test_a_zip_archive_is_accepted(client, alice, benchmark, ready_env, tmp_path):
    path = tmp_path / "entry.zip"
    with zipfile.ZipFile(path, "w") as archive:
        run = zipfile.ZipInfo("run")
        run.external_attr = 0o100755 << 16
        archive.writestr(run, "#!/bin/sh\nexit 0\n")
        archive.writestr("build.sh", "true\n")
    client.force_login(alice)

    page = client.post(
        f"/b/{benchmark.slug}/submissions/",
        {"environment": ready_env.pk, "kind": "official", "source": upload(path)},
    )

    assert page.status_code == 302
    assert Submission.objects.get().source_format == "zip"


def test_a_wrong_file_type_is_refused_by_the_form(client, alice, benchmark, ready_env):
    client.force_login(alice)

    page = client.post(
        f"/b/{benchmark.slug}/submissions/",
        {
            "environment": ready_env.pk,
            "kind": "official",
            "source": SimpleUploadedFile("entry.rar", b"x"),
        },
    )

    assert page.status_code == 400
    assert "Upload a .tar.gz, .tar or .zip archive." in page.content.decode()
    assert not Submission.objects.exists()


def test_no_attempts_left_says_so_and_charges_nothing(
    client, alice, benchmark, ready_env, tmp_path
):
    client.force_login(alice)
    for index in range(benchmark.attempts_per_day):
        archive = upload(source_archive(tmp_path, f"entry{index}.tar.gz"))
        client.post(
            f"/b/{benchmark.slug}/submissions/",
            {"environment": ready_env.pk, "kind": "official", "source": archive},
        )

    page = client.post(
        f"/b/{benchmark.slug}/submissions/",
        {
            "environment": ready_env.pk,
            "kind": "official",
            "source": upload(source_archive(tmp_path, "late.tar.gz")),
        },
    )

    assert page.status_code == 400
    assert "You have used all 2 official attempts" in page.content.decode()
    assert Submission.objects.count() == 2
    assert AttemptLedger.objects.count() == 2


def test_only_my_ready_environments_on_this_benchmark_are_offered(
    client, alice, bob, benchmark, ready_env
):
    factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, name="still-building", status=Environment.BUILDING
    )
    factories.EnvironmentFactory(owner=bob, benchmark=benchmark, name="bobs-ready")
    factories.EnvironmentFactory(owner=alice, name="other-benchmark")
    client.force_login(alice)

    page = client.get(f"/b/{benchmark.slug}/submissions/")

    offered = list(page.context["form"].fields["environment"].queryset)
    assert offered == [ready_env]


def test_choosing_someone_elses_environment_is_refused(
    client, alice, bob, benchmark, ready_env, tmp_path
):
    bobs = factories.EnvironmentFactory(owner=bob, benchmark=benchmark)
    client.force_login(alice)

    page = client.post(
        f"/b/{benchmark.slug}/submissions/",
        {"environment": bobs.pk, "kind": "official", "source": upload(source_archive(tmp_path))},
    )

    assert page.status_code == 400
    assert not Submission.objects.exists()


def test_without_a_ready_environment_the_page_says_what_to_do(client, alice, benchmark):
    client.force_login(alice)

    html = client.get(f"/b/{benchmark.slug}/submissions/").content.decode()

    assert "You need a ready environment" in html
    assert reverse("environments:list", kwargs={"slug": benchmark.slug}) in html


def test_list_shows_my_submissions_with_the_latest_runs_wall_time(
    client, alice, bob, benchmark, ready_env
):
    mine = make_submission(alice, ready_env, status=Submission.PASSED)
    cohort = factories.cohorts(benchmark, Cohort.OFFICIAL)[0]
    Run.objects.create(submission=mine, cohort=cohort, try_number=1, status=Run.INFRA_FAILED)
    Run.objects.create(
        submission=mine,
        cohort=cohort,
        try_number=2,
        status=Run.FINISHED,
        wall_time_ns=987_654_321,
        matches=9999,
        total=10000,
        passed=True,
    )
    bobs_env = factories.EnvironmentFactory(owner=bob, benchmark=benchmark)
    theirs = make_submission(bob, bobs_env)
    client.force_login(alice)

    html = client.get(f"/b/{benchmark.slug}/submissions/").content.decode()

    assert f"#{mine.pk}" in html
    assert f"#{theirs.pk}<" not in html
    assert "987.654 ms" in html
    assert "9,999 / 10,000" in html


def test_detail_shows_timeline_numbers_digests_attempt_and_logs(
    client, alice, benchmark, ready_env, data_dir
):
    submission = make_submission(
        alice,
        ready_env,
        status=Submission.FAILED,
        image_digest="sha256:" + "c" * 64,
        environment_image_digest="sha256:" + "e" * 64,
        failure_reason="9,800 of 10,000 predictions matched; passing needs 9,900.",
    )
    cohort = factories.cohorts(benchmark, Cohort.OFFICIAL)[0]
    CohortItem.objects.create(
        cohort=cohort,
        position=0,
        canonical_name="ILSVRC2012_val_00000042.JPEG",
        sha256="d" * 64,
        reference_class=417,
    )
    run = Run.objects.create(
        submission=submission,
        cohort=cohort,
        status=Run.FINISHED,
        verdict="failed",
        wall_time_ns=1_500_000_042,
        matches=9800,
        total=10000,
        passed=False,
        output_sha256="f" * 64,
    )
    AttemptLedger.objects.create(
        entrant=alice,
        benchmark=benchmark,
        submission=submission,
        kind="official",
        attempt_day=timezone.now().date(),
        delta=1,
        reason="upload accepted",
        at=timezone.now(),
    )
    for status in ("accepted", "building", "queued", "staging", "running", "failed"):
        SubmissionEvent.objects.create(
            submission=submission, status=status, at=timezone.now(), note=f"note-{status}"
        )
    (data_dir / "submissions" / str(submission.pk)).mkdir(parents=True)
    (data_dir / "submissions" / str(submission.pk) / "build.log").write_text("built ok\n")
    (data_dir / "runs" / str(run.pk)).mkdir(parents=True)
    (data_dir / "runs" / str(run.pk) / "run.log").write_text("loading model\n")
    client.force_login(alice)

    html = client.get(f"/submissions/{submission.pk}/").content.decode()

    assert "1,500.000 ms (1500000042 ns)" in html
    assert 'title="1500000042 ns"' in html
    assert "9,800 / 10,000 top-1 matches" in html
    assert "sha256:" + "5" * 64 in html
    assert "sha256:" + "c" * 64 in html
    assert "sha256:" + "e" * 64 in html
    assert "sha256:" + "f" * 64 in html
    assert "official attempt charged" in html
    assert "passing needs 9,900" in html
    assert "note-staging" in html and "KST" in html
    assert "built ok" in html
    assert "loading model" in html
    # Never the reference answers or the cohort's members.
    assert "ILSVRC2012_val_00000042" not in html
    status_json = client.get(f"/submissions/{submission.pk}/status.json").content.decode()
    assert "ILSVRC2012_val_00000042" not in status_json
    # The reference class as a value (a timestamp's microseconds may hold the digits).
    assert not re.search(r"(?<![\d.:])417(?!\d)", status_json)
    assert "data-finished" in html


def test_detail_shows_a_refund(client, alice, benchmark, ready_env):
    submission = make_submission(alice, ready_env, status=Submission.INFRA_FAILED)
    for delta in (AttemptLedger.CHARGE, AttemptLedger.REFUND):
        AttemptLedger.objects.create(
            entrant=alice,
            benchmark=benchmark,
            submission=submission,
            kind="official",
            attempt_day=timezone.now().date(),
            delta=delta,
            reason="r",
            at=timezone.now(),
        )
    client.force_login(alice)

    html = client.get(f"/submissions/{submission.pk}/").content.decode()

    assert "official attempt charged, then refunded" in html


def test_status_json_carries_the_timeline_and_key_numbers(client, alice, ready_env):
    submission = make_submission(alice, ready_env, status=Submission.BUILDING)
    for status in ("accepted", "building"):
        SubmissionEvent.objects.create(submission=submission, status=status, at=timezone.now())
    client.force_login(alice)

    response = client.get(f"/submissions/{submission.pk}/status.json")

    assert response.status_code == 200
    data = json.loads(response.content)
    assert data["status"] == "building"
    assert data["finished"] is False
    assert [event["status"] for event in data["timeline"]] == ["accepted", "building"]
    assert all(event["at"] and event["at_display"] for event in data["timeline"])
    assert data["wall_time_ns"] is None
    assert data["digests"]["source"] == "5" * 64
    assert data["display"]["build_log"] == "(no output yet)"
    assert set(data) >= {"build_log", "run_log", "matches", "total", "attempt"}


def test_unfinished_submission_page_polls_its_status(client, alice, ready_env):
    submission = make_submission(alice, ready_env, status=Submission.RUNNING)
    client.force_login(alice)

    html = client.get(f"/submissions/{submission.pk}/").content.decode()

    assert f'data-live="/submissions/{submission.pk}/status.json"' in html
    assert "data-finished" not in html


def test_the_owner_downloads_their_source(client, alice, ready_env, data_dir):
    submission = make_submission(alice, ready_env)
    folder = data_dir / "submissions" / str(submission.pk)
    folder.mkdir(parents=True)
    (folder / "source.archive").write_bytes(b"archive bytes")
    client.force_login(alice)

    response = client.get(f"/submissions/{submission.pk}/source")

    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"archive bytes"
    assert 'filename="entry.tar.gz"' in response["Content-Disposition"]


@pytest.mark.parametrize("suffix", ["", "status.json", "source"])
def test_another_entrants_submission_is_404(client, alice, bob, ready_env, suffix):
    submission = make_submission(alice, ready_env)
    client.force_login(bob)

    assert client.get(f"/submissions/{submission.pk}/{suffix}").status_code == 404


def visible_text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def test_the_quota_is_stated_before_an_upload(client, alice, ready_env, time_machine):
    time_machine.move_to(dt.datetime(2026, 8, 12, 18, 48, tzinfo=KST), tick=False)
    benchmark = ready_env.benchmark
    client.force_login(alice)

    html = client.get(f"/b/{benchmark.slug}/submissions/").content.decode()

    text = visible_text(html)
    assert "2 of 2 official attempts left today; they renew at 00:00 KST, in 5 h 12 min" in text
    assert "10 of 10 practice attempts left today" in text
    assert html.index('id="quota"') < html.index('name="source"')


def test_after_two_official_uploads_none_is_left_until_midnight_kst(
    client, alice, benchmark, ready_env, tmp_path, sent, time_machine
):
    evening = timezone.now().astimezone(KST).replace(hour=18, minute=48, second=0, microsecond=0)
    time_machine.move_to(evening, tick=False)
    client.force_login(alice)
    for index in range(2):
        client.post(
            f"/b/{benchmark.slug}/submissions/",
            {
                "environment": ready_env.pk,
                "kind": "official",
                "source": upload(source_archive(tmp_path, f"e{index}.tar.gz")),
            },
        )

    text = visible_text(client.get(f"/b/{benchmark.slug}/submissions/").content.decode())

    assert "0 of 2 official attempts left today; the next one at 00:00 KST, in 5 h 12 min" in text


def test_the_kind_is_a_labelled_choice_defaulting_to_official(client, alice, ready_env):
    client.force_login(alice)

    html = client.get(f"/b/{ready_env.benchmark.slug}/submissions/").content.decode()

    assert "<legend>Kind</legend>" in html
    assert re.search(r'<input type="radio" name="kind" value="official"[^>]*checked', html)
    assert "Practice: the public cohort, off the leaderboard" in html


@pytest.mark.parametrize(
    ("status", "event_age_s", "shown"),
    [
        ("accepted", 40, "Waiting for a build slot for 40 s."),
        ("building", 75, "Building (build.sh) for 1 min 15 s of the 30 minutes allowed."),
        ("queued", 3_700, "Waiting for the scoring machine for 1 h 1 min."),
        ("running", 130, "Running for 2 min 10 s of the 16 minutes allowed."),
    ],
)
def test_an_unfinished_submission_shows_its_time_against_the_cap(
    client, alice, ready_env, time_machine, status, event_age_s, shown
):
    time_machine.move_to(timezone.now(), tick=False)
    submission = make_submission(alice, ready_env, status=status)
    SubmissionEvent.objects.create(
        submission=submission,
        status=status,
        at=timezone.now() - dt.timedelta(seconds=event_age_s),
    )
    client.force_login(alice)

    html = client.get(f"/submissions/{submission.pk}/").content.decode()
    data = client.get(f"/submissions/{submission.pk}/status.json").json()

    assert shown in html
    assert data["display"]["elapsed"] == shown
    assert data["phase"]["elapsed_s"] == event_age_s
    capped = status in ("building", "running")
    assert (data["phase"]["cap_s"] is not None) == capped
    if capped:
        assert f'value="{event_age_s}"' in html  # the progress bar against the cap


@pytest.mark.parametrize(
    ("status", "ledger", "reason", "sentence"),
    [
        (
            "build_failed",
            [1],
            "build.sh exited with status 4; see the build log.",
            "Your submission's build failed, and the official attempt was charged "
            "(your own failures count): build.sh exited with status 4; see the build log.",
        ),
        (
            "failed",
            [1],
            "9,800 of 10,000 predictions matched; passing needs 9,900.",
            "Your run did not pass, and the official attempt was charged (your own failures "
            "count): 9,800 of 10,000 predictions matched; passing needs 9,900.",
        ),
        (
            "errored",
            [1],
            "The output has 12 bytes; 40 were expected.",
            "Your run gave no valid result, and the official attempt was charged (your own "
            "failures count): the output has 12 bytes; 40 were expected.",
        ),
        (
            "infra_failed",
            [1, -1],
            "The platform failed twice (disk full); the attempt was refunded.",
            "The platform failed to score this submission, so the official attempt was "
            "refunded: the platform failed twice (disk full); the attempt was refunded.",
        ),
        ("cancelled", [1, -1], "", "Staff cancelled this submission, so the official attempt "
         "was refunded."),
        ("passed", [1], "", "Passed; the leaderboard shows it if it is your best official time."),
    ],
)  # fmt: skip
def test_a_finished_submission_says_what_happened_and_whether_it_was_charged(
    client, alice, benchmark, ready_env, status, ledger, reason, sentence
):
    submission = make_submission(alice, ready_env, status=status, failure_reason=reason)
    for delta in ledger:
        AttemptLedger.objects.create(
            entrant=alice,
            benchmark=benchmark,
            submission=submission,
            kind="official",
            attempt_day=timezone.now().date(),
            delta=delta,
            reason="r",
            at=timezone.now(),
        )
    client.force_login(alice)

    html = client.get(f"/submissions/{submission.pk}/").content.decode()

    assert sentence in html.replace("&#x27;", "'")
    assert client.get(f"/submissions/{submission.pk}/status.json").json()["outcome"] == sentence


def test_a_practice_run_says_it_stays_off_the_board(client, alice, ready_env):
    submission = make_submission(alice, ready_env, kind="practice", status="passed")
    client.force_login(alice)

    html = client.get(f"/submissions/{submission.pk}/").content.decode()

    assert "Passed; practice runs never appear on the leaderboard." in html


def test_a_run_being_verified_shows_its_official_numbers_and_the_verification(
    client, alice, ready_env
):
    submission = make_submission(alice, ready_env, status=Submission.VERIFYING)
    cohort = factories.cohorts(submission.benchmark, Cohort.OFFICIAL)[0]
    Run.objects.create(
        submission=submission,
        cohort=cohort,
        status=Run.FINISHED,
        verdict="passed",
        passed=True,
        wall_time_ns=2_000_000_000,
        matches=10,
        total=10,
        resources={"cpu_user_s": 3.0, "cpu_system_s": 1.0, "cpu_per_wall": 2.0},
    )
    Run.objects.create(submission=submission, cohort=cohort, try_number=2, purpose=Run.VERIFY)
    client.force_login(alice)

    data = client.get(f"/submissions/{submission.pk}/status.json").json()
    html = visible_text(client.get(f"/submissions/{submission.pk}/").content.decode())

    assert data["status"] == "verifying" and data["finished"] is False
    assert data["wall_time_ns"] == 2_000_000_000 and data["matches"] == 10  # the official run
    assert data["verification"] == {
        "status": "queued",
        "passed": None,
        "wall_time_ns": None,
        "matches": None,
        "total": None,
        "run": 1,
        "of": 3,
    }
    assert data["resources"]["cpu_per_wall"] == 2.0
    assert "Verifying (one more run off the board, before it ranks)" in html
    assert "queued (re-runs the image on the cohort shuffled and re-encoded)" in html
    assert "CPU 3.00 s user + 1.00 s system (2.00 CPU-s per wall-s)" in html


@pytest.mark.parametrize(
    ("gpu", "shown"),
    [
        (
            {"energy_per_image_j": 0.04213, "gpu_util_mean_pct": 93.44, "error": ""},
            "GPU 0.04213 J per image, 93.4% mean utilization",
        ),
        (
            {"energy_per_image_j": None, "gpu_util_mean_pct": None, "error": "NVML failed"},
            "GPU energy and utilization not measured",
        ),
        (None, None),  # a CPU class
    ],
)
def test_the_page_shows_a_gpu_runs_energy_per_image_and_utilization(
    client, alice, ready_env, gpu, shown
):
    submission = make_submission(alice, ready_env, status=Submission.PASSED)
    cohort = factories.cohorts(submission.benchmark, Cohort.OFFICIAL)[0]
    resources = {"cpu_user_s": 3.0, "cpu_system_s": 1.0, "cpu_per_wall": 2.0}
    Run.objects.create(
        submission=submission,
        cohort=cohort,
        status=Run.FINISHED,
        verdict="passed",
        passed=True,
        wall_time_ns=2_000_000_000,
        matches=10,
        total=10,
        resources=resources if gpu is None else resources | {"gpu": gpu},
    )
    client.force_login(alice)

    data = client.get(f"/submissions/{submission.pk}/status.json").json()
    html = visible_text(client.get(f"/submissions/{submission.pk}/").content.decode())

    figures = gpu or {}
    assert data["resources"]["energy_per_image_j"] == figures.get("energy_per_image_j")
    assert data["resources"]["gpu_util_mean_pct"] == figures.get("gpu_util_mean_pct")
    assert "CPU 3.00 s user + 1.00 s system" in html
    if shown:
        assert shown in html and shown in data["display"]["resources"]
    else:
        assert "GPU" not in data["display"]["resources"]
