"""Environment builds and build.sh builds, on the real Docker Engine with real rows.

Every image here is built FROM the local ``localhost/podium/busybox:1``. Tags carry a random
suffix and every image and container a test makes is removed by exact name, because
other test runs share the engine.
"""

from __future__ import annotations

import io
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any, cast

import pytest

from portal.audit.models import AuditEvent
from portal.core import jobs, storage
from portal.environments.models import Environment
from portal.environments.services import environment_claim_build, environment_create
from portal.submissions.intake import submission_accept
from portal.submissions.models import AttemptLedger, Submission
from scoring import engine
from scoring.build import builds
from scoring.build.logfile import CappedLog
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "localhost/podium/busybox:1"


# Helpers and fixtures ---------------------------------------------------------------


def container_gone(container_id: str) -> bool:
    return not engine.container_exists(container_id)


def new_environment(owner: Any, benchmark: Any, dockerfile: str, **kw: Any) -> Environment:
    return environment_create(
        owner=owner,
        benchmark=benchmark,
        name=f"env-{uuid.uuid4().hex[:6]}",
        dockerfile_text=dockerfile,
        **kw,
    )


def timeline(model: Any) -> list[str]:
    return [event.status for event in model.events.all()]


def tar_gz(path: Path, files: dict[str, tuple[bytes, int]]) -> Path:
    with tarfile.open(path, mode="w:gz") as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return path


RUN_OK = (b"#!/bin/sh\nexit 0\n", 0o755)


def accept(
    alice: Any, benchmark: Any, tmp_path: Path, files: dict[str, tuple[bytes, int]]
) -> Submission:
    """An accepted, charged submission on a ready environment built from the busybox base."""
    factories.cohorts(benchmark)
    environment = cast(Environment, factories.EnvironmentFactory(owner=alice, benchmark=benchmark))
    archive = tar_gz(tmp_path / f"src-{uuid.uuid4().hex[:6]}.tar.gz", files)
    return submission_accept(
        entrant=alice,
        benchmark=benchmark,
        environment=environment,
        source_file=archive,
        source_name="kit.tar.gz",
    )


def build_sh(script: str) -> tuple[bytes, int]:
    return (f"set -e\n{script}\n".encode(), 0o644)


# CappedLog ---------------------------------------------------------------------------


def test_capped_log_stops_at_the_cap_with_one_final_line(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "build.log"
    with CappedLog(path, cap_bytes=10) as log:
        log.write("12345")
        assert path.read_text() == "12345"  # flushed while still open: the web can tail it
        log.write("67890abc")
        log.write("more that is dropped\n")
    assert path.read_text() == "1234567890\n[log truncated at 10 bytes]\n"


def test_capped_log_never_splits_a_character_and_ignores_writes_after_close(
    tmp_path: Path,
) -> None:
    path = tmp_path / "build.log"
    log = CappedLog(path, cap_bytes=4)
    log.write("ab\u00e9\u00e9")  # a, b, then two 2-byte characters: the cap falls inside one
    log.close()
    log.write("late line from a cancelled build\n")
    assert path.read_text(encoding="utf-8") == "ab\u00e9\n[log truncated at 4 bytes]\n"


def test_capped_log_defaults_to_the_setting(tmp_path: Path, settings: Any) -> None:
    settings.PODIUM_LOG_CAP_BYTES = 3
    with CappedLog(tmp_path / "build.log") as log:
        log.write_bytes(b"abcdef")
    assert (tmp_path / "build.log").read_bytes() == b"abc\n[log truncated at 3 bytes]\n"


# Environment builds ------------------------------------------------------------------


@pytest.mark.docker
def test_a_good_dockerfile_builds_a_ready_environment(alice, benchmark, sent, made) -> None:
    marker = f"hello-from-build-{uuid.uuid4().hex}"  # fresh, so no cached layer hides the output
    environment = new_environment(alice, benchmark, f"FROM {BASE}\nRUN echo {marker}\n")

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.READY, environment.failure_reason
    assert environment.image_tag == made["tags"][0]
    assert environment.image_tag.startswith(f"podium-entrant/env-{environment.pk}:")
    assert environment.image_digest.startswith("sha256:")
    assert environment.image_bytes and environment.image_bytes > 0
    assert engine.image_info(environment.image_tag).id == environment.image_digest
    assert timeline(environment) == ["queued", "building", "ready"]
    build_log = (storage.environment_dir(environment.pk) / "build.log").read_text()
    assert build_log.startswith(f"Building environment {environment.name} (cap 1800 s)")
    assert marker in build_log
    assert "Environment ready" in build_log.splitlines()[-1]
    assert all(container_gone(c) for c in made["containers"])


@pytest.mark.docker
def test_a_failing_run_step_fails_the_environment_with_the_error(alice, benchmark, sent, made):
    environment = new_environment(alice, benchmark, f"FROM {BASE}\nRUN exit 3\n")

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.FAILED
    assert environment.failure_reason.startswith("The Dockerfile build failed: ")
    assert "returned a non-zero code: 3" in environment.failure_reason
    assert timeline(environment) == ["queued", "building", "failed"]
    build_log = (storage.environment_dir(environment.pk) / "build.log").read_text()
    assert "returned a non-zero code: 3" in build_log
    assert not engine.image_exists(made["tags"][0])


@pytest.mark.docker
def test_a_build_past_the_cap_times_out_and_leaves_no_image(alice, benchmark, sent, made):
    benchmark.build_timeout_s = 3
    benchmark.save(update_fields=["build_timeout_s"])
    environment = new_environment(
        alice, benchmark, f"FROM {BASE}\nRUN echo {uuid.uuid4().hex} && sleep 30\n"
    )

    started = time.monotonic()
    builds.build_environment(environment.pk)
    elapsed = time.monotonic() - started

    environment.refresh_from_db()
    assert environment.status == Environment.TIMED_OUT
    assert environment.failure_reason == "The build ran past the 3-second cap."
    assert elapsed < 12, f"the build was stopped only after {elapsed:.1f} s"
    assert not engine.image_exists(made["tags"][0])
    assert environment.image_tag == ""


@pytest.mark.docker
def test_an_image_over_the_size_cap_is_too_large_and_removed(alice, benchmark, sent, made):
    benchmark.max_image_bytes = 1
    benchmark.save(update_fields=["max_image_bytes"])
    environment = new_environment(alice, benchmark, f"FROM {BASE}\n")

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.TOO_LARGE
    assert environment.failure_reason.startswith("The image is ")
    assert environment.failure_reason.endswith("bytes; the cap is 1 bytes.")
    assert not engine.image_exists(made["tags"][0])


@pytest.mark.docker
def test_an_image_without_bin_sh_fails_and_is_removed(alice, benchmark, sent, made):
    environment = new_environment(alice, benchmark, f"FROM {BASE}\nRUN rm -rf /bin\n")

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.FAILED
    assert environment.failure_reason == "The image has no /bin/sh, which build.sh needs."
    assert not engine.image_exists(made["tags"][0])
    assert all(container_gone(c) for c in made["containers"])


@pytest.mark.docker
def test_the_context_archive_is_the_build_context(alice, benchmark, sent, made, tmp_path):
    greeting = f"hello-from-context-{uuid.uuid4().hex}"
    context = tar_gz(
        tmp_path / "context.tar.gz",
        {
            "greeting.txt": (greeting.encode() + b"\n", 0o644),
            "Dockerfile": (b"FROM podium/not-this-one:1\n", 0o644),
        },
    )
    environment = new_environment(
        alice,
        benchmark,
        f"FROM {BASE}\nCOPY greeting.txt /greeting.txt\nRUN cat /greeting.txt\n",
        context_path=context,
    )

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.READY, environment.failure_reason
    build_log = (storage.environment_dir(environment.pk) / "build.log").read_text()
    assert greeting in build_log
    assert "The context archive's own Dockerfile is ignored" in build_log


@pytest.mark.docker
def test_a_context_archive_damaged_after_acceptance_fails_with_a_sentence(
    alice, benchmark, sent, made, tmp_path
):
    context = tmp_path / "context.tar"
    with tarfile.open(context, "w") as tar:
        tar.addfile(tarfile.TarInfo("empty.txt"))
    environment = new_environment(alice, benchmark, f"FROM {BASE}\n", context_path=context)
    stored = storage.environment_dir(environment.pk) / "context.archive"
    stored.write_bytes(b"this is not an archive at all")  # damaged on disk after the checks

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.FAILED
    assert environment.failure_reason.startswith("The build context archive cannot be used: ")
    assert made["tags"] == []  # nothing reached the engine


@pytest.mark.docker
def test_an_engine_error_fails_the_environment_as_a_platform_error(
    alice, benchmark, sent, made, monkeypatch
):
    def broken(ref: str, path: str) -> bool:
        raise engine.EngineError("the engine went away")

    monkeypatch.setattr(engine, "image_has_path", broken)
    environment = new_environment(alice, benchmark, f"FROM {BASE}\n")

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.FAILED
    # The entrant reads a plain sentence; staff read the engine's own words.
    assert environment.failure_reason == (
        "The build could not run because of a platform fault, not because of your files; "
        "rebuild it, it costs nothing."
    )
    assert "went away" not in (storage.environment_dir(environment.pk) / "build.log").read_text()
    fault = AuditEvent.objects.get(action="build.platform_fault")
    assert fault.target == f"environment:{environment.pk}"
    assert fault.details == {"detail": "the engine went away"}
    assert not engine.image_exists(made["tags"][0])


def test_a_build_claimed_elsewhere_is_not_built_again(alice, benchmark, sent, made):
    environment = new_environment(alice, benchmark, f"FROM {BASE}\n")
    assert environment_claim_build(environment.pk) is not None  # another delivery got it

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.BUILDING
    assert timeline(environment) == ["queued", "building"]
    assert made["tags"] == []


# Submission builds -------------------------------------------------------------------


@pytest.mark.docker
def test_build_sh_builds_the_submission_image_and_queues_the_score(
    alice, benchmark, sent, made, tmp_path
):
    submission = accept(
        alice,
        benchmark,
        tmp_path,
        {
            "build.sh": build_sh(
                "echo hello-from-build-sh\necho to-stderr >&2\n"
                "echo built > /submission/artifact.txt\nchmod 755 /submission/run"
            ),
            "run": (b"#!/bin/sh\ncat /submission/artifact.txt\n", 0o644),
        },
    )
    assert sent == [(jobs.BUILD_SUBMISSION, (submission.pk,))]

    builds.build_submission(submission.pk)

    submission.refresh_from_db()
    made["images"].append(submission.image_tag)
    assert submission.status == Submission.QUEUED, submission.failure_reason
    assert submission.image_tag.startswith(f"podium-entrant/sub-{submission.pk}:")
    assert submission.image_digest == engine.image_info(submission.image_tag).id
    assert submission.image_digest.startswith("sha256:")
    assert submission.image_bytes and submission.image_bytes > 0
    assert timeline(submission) == ["accepted", "building", "queued"]
    assert sent[-1] == (jobs.SCORE_NEXT, (submission.benchmark.hardware_class_id, 0))
    probe = engine.create_container(image=submission.image_tag, command=["/x"], entrypoint=[])
    run_stat = engine.path_stat(probe, "/submission/run")
    assert run_stat is not None and run_stat["mode"] & 0o111
    assert engine.read_file(probe, "/submission/artifact.txt", 100) == b"built\n"
    build_log = (storage.submission_dir(submission.pk) / "build.log").read_text()
    assert "hello-from-build-sh" in build_log
    assert "to-stderr" in build_log
    assert all(container_gone(c) for c in made["containers"] if c != probe)


@pytest.mark.docker
def test_a_failing_build_sh_is_the_entrants_build_failure(alice, benchmark, sent, made, tmp_path):
    submission = accept(
        alice,
        benchmark,
        tmp_path,
        {"build.sh": build_sh("echo compiling\nexit 1"), "run": RUN_OK},
    )

    builds.build_submission(submission.pk)

    submission.refresh_from_db()
    assert submission.status == Submission.BUILD_FAILED
    assert submission.failure_reason == "build.sh exited with status 1; see the build log."
    assert timeline(submission) == ["accepted", "building", "build_failed"]
    ledger = list(
        AttemptLedger.objects.filter(submission=submission).values_list("delta", flat=True)
    )
    assert ledger == [AttemptLedger.CHARGE]  # the attempt counts
    assert "compiling" in (storage.submission_dir(submission.pk) / "build.log").read_text()
    assert all(container_gone(c) for c in made["containers"])
    assert not any(name == jobs.SCORE_NEXT for name, _ in sent)


@pytest.mark.docker
@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"build.sh": build_sh("echo no run here")}, "/submission/run is missing after build.sh."),
        (
            {"run": (b"#!/bin/sh\n", 0o644)},
            "/submission/run is not executable (mode 644); chmod +x it.",
        ),
        (
            {"build.sh": build_sh("ln -s /bin/busybox /submission/run")},
            "/submission/run is a symlink to /bin/busybox, outside /submission; "
            "make it a file, or a link to a file inside /submission.",
        ),
    ],
    ids=["missing", "not-executable", "symlink-outside"],
)
def test_a_missing_or_unusable_run_is_a_build_failure(
    alice, benchmark, sent, made, tmp_path, files, reason
):
    submission = accept(alice, benchmark, tmp_path, files)

    builds.build_submission(submission.pk)

    submission.refresh_from_db()
    assert submission.status == Submission.BUILD_FAILED
    assert submission.failure_reason == reason
    assert all(container_gone(c) for c in made["containers"])


@pytest.mark.docker
def test_a_run_link_inside_submission_is_accepted(alice, benchmark, sent, made, tmp_path):
    submission = accept(
        alice,
        benchmark,
        tmp_path,
        {"build.sh": build_sh("ln -s bin/real-run /submission/run"), "bin/real-run": RUN_OK},
    )

    builds.build_submission(submission.pk)

    submission.refresh_from_db()
    made["images"].append(submission.image_tag)
    assert submission.status == Submission.QUEUED, submission.failure_reason


@pytest.mark.docker
def test_build_sh_past_the_cap_is_stopped_and_fails(alice, benchmark, sent, made, tmp_path):
    benchmark.build_timeout_s = 3
    benchmark.save(update_fields=["build_timeout_s"])
    submission = accept(
        alice,
        benchmark,
        tmp_path,
        {"build.sh": build_sh("echo started-sleeping\nsleep 30"), "run": RUN_OK},
    )

    started = time.monotonic()
    builds.build_submission(submission.pk)
    elapsed = time.monotonic() - started

    submission.refresh_from_db()
    assert submission.status == Submission.BUILD_FAILED
    assert submission.failure_reason == "build.sh ran past the 3-second cap."
    assert elapsed < 12
    assert "started-sleeping" in (storage.submission_dir(submission.pk) / "build.log").read_text()
    assert all(container_gone(c) for c in made["containers"])


@pytest.mark.docker
def test_an_engine_error_requeues_once_then_refunds(
    alice, benchmark, sent, made, tmp_path, monkeypatch
):
    def broken(container_id: str, path: str, data: Any) -> None:
        raise engine.EngineError("the engine went away")

    monkeypatch.setattr(engine, "put_archive", broken)
    submission = accept(alice, benchmark, tmp_path, {"run": RUN_OK})

    builds.build_submission(submission.pk)

    submission.refresh_from_db()
    assert submission.status == Submission.ACCEPTED  # not the entrant's fault: built again
    assert sent[-1] == (jobs.BUILD_SUBMISSION, (submission.pk,))
    assert all(container_gone(c) for c in made["containers"])

    builds.build_submission(submission.pk)

    submission.refresh_from_db()
    assert submission.status == Submission.INFRA_FAILED
    assert "refunded" in submission.failure_reason
    assert "went away" not in submission.failure_reason  # the details are for staff
    faults = AuditEvent.objects.filter(
        action="build.platform_fault", target=f"submission:{submission.pk}"
    )
    assert [("went away" in event.details["detail"]) for event in faults] == [True, True]
    assert timeline(submission) == ["accepted", "building", "accepted", "building", "infra_failed"]
    deltas = sorted(
        AttemptLedger.objects.filter(submission=submission).values_list("delta", flat=True)
    )
    assert deltas == [AttemptLedger.REFUND, AttemptLedger.CHARGE]


def test_a_submission_not_accepted_is_not_built(alice, benchmark, sent, made, tmp_path):
    submission = accept(alice, benchmark, tmp_path, {"run": RUN_OK})
    Submission.objects.filter(pk=submission.pk).update(status=Submission.BUILDING)

    builds.build_submission(submission.pk)

    submission.refresh_from_db()
    assert submission.status == Submission.BUILDING
    assert made["containers"] == []
