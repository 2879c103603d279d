"""Retention: ``manage.py purge_artifacts`` removes a closed benchmark's bulky artifacts
only once its retention period is over, and keeps results, digests and the audit trail.

Most tests use a fake engine (a set of image tags); the ``docker`` ones build real
images FROM the local ``localhost/podium/busybox:1`` under fresh tags and remove them afterwards.
"""

from __future__ import annotations

import datetime as dt
import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.audit.models import AuditEvent
from portal.contests.models import Benchmark, Cohort, CohortItem, LeaderboardEntry
from portal.core import storage
from portal.environments.models import Environment, EnvironmentEvent
from portal.submissions.intake import source_path
from portal.submissions.models import AttemptLedger, Run, Submission, SubmissionEvent
from scoring import engine
from scoring.upkeep.retention import PurgeNotAllowed, artifacts_purge
from tests import factories
from tests.scoring.images import build_dockerfile

UTC = dt.UTC
OPENS_AT = dt.datetime(2026, 2, 1, 0, 0, tzinfo=UTC)
CLOSES_AT = dt.datetime(2026, 3, 1, 15, 0, tzinfo=UTC)
ALLOWED_FROM = dt.datetime(2026, 5, 30, 15, 0, tzinfo=UTC)  # + the default 90 days
LATER = ALLOWED_FROM + dt.timedelta(days=3)
WALL_TIME_NS = 4_321_000_000
OUTPUT_SHA256 = "a" * 64
REFUSAL = (
    "Benchmark 'closed' keeps its artifacts for 90 days after it closed "
    "(2026-03-01T15:00:00+00:00); purging is allowed from 2026-05-30T15:00:00+00:00. "
    "Nothing was deleted."
)


# Fixtures -----------------------------------------------------------------------------


class FakeEngine:
    """The images the engine holds; refs in ``running`` are used by a running container."""

    def __init__(self) -> None:
        self.images: set[str] = set()
        self.running: set[str] = set()

    def image_exists(self, ref: str) -> bool:
        return ref in self.images

    def remove_image_if_unused(self, ref: str) -> bool:
        if ref in self.running:
            raise engine.ImageInUse(f"{ref} is used by running container(s) 0123456789ab")
        if ref not in self.images:
            return False
        self.images.remove(ref)
        return True


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    fake = FakeEngine()
    monkeypatch.setattr(engine, "image_exists", fake.image_exists)
    monkeypatch.setattr(engine, "remove_image_if_unused", fake.remove_image_if_unused)
    return fake


@dataclass
class Filled:
    """One entrant's finished work on a benchmark, with every file it leaves behind."""

    environment: Environment
    submission: Submission
    run: Run
    cohort_file: Path
    artifacts: list[Path]  # every file a purge removes

    @property
    def images(self) -> list[str]:
        return [self.submission.image_tag, self.environment.image_tag]


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def fill(benchmark: Benchmark, entrant: Any, fake: FakeEngine | None = None) -> Filled:
    """A passed, scored, ranked official submission, as the pipeline leaves it."""
    cohort = Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    cohort_file = write(storage.cohort_dir(cohort.pk) / "cat.png", b"png" * 100)
    CohortItem.objects.create(
        cohort=cohort, position=0, canonical_name="cat.png", sha256="c" * 64, reference_class=7
    )
    environment = factories.EnvironmentFactory(owner=entrant, benchmark=benchmark)
    environment.image_tag = f"podium-entrant/env-{environment.pk}:0123abcd"
    environment.image_digest = "sha256:" + "e" * 64
    environment.save(update_fields=["image_tag", "image_digest"])
    EnvironmentEvent.objects.create(environment=environment, status="ready", at=CLOSES_AT)
    submission = Submission.objects.create(
        entrant=entrant,
        benchmark=benchmark,
        environment=environment,
        status=Submission.PASSED,
        submitted_at=CLOSES_AT - dt.timedelta(days=2),
        source_name="kit.tar.gz",
        source_format="tar.gz",
        source_sha256="5" * 64,
        source_bytes=1000,
        environment_image_digest=environment.image_digest,
        image_digest="sha256:" + "d" * 64,
    )
    submission.image_tag = f"podium-entrant/sub-{submission.pk}:4567cdef"
    submission.save(update_fields=["image_tag"])
    SubmissionEvent.objects.create(submission=submission, status="passed", at=CLOSES_AT)
    AttemptLedger.objects.create(
        entrant=entrant,
        benchmark=benchmark,
        submission=submission,
        kind=Submission.OFFICIAL,
        attempt_day=CLOSES_AT.date(),
        delta=AttemptLedger.CHARGE,
        reason="official upload",
        at=submission.submitted_at,
    )
    run = Run.objects.create(
        submission=submission,
        cohort=cohort,
        status=Run.FINISHED,
        verdict="passed",
        wall_time_ns=WALL_TIME_NS,
        matches=1,
        total=1,
        passed=True,
        output_sha256=OUTPUT_SHA256,
    )
    LeaderboardEntry.objects.create(
        benchmark=benchmark,
        entrant=entrant,
        submission=submission,
        run=run,
        wall_time_ns=WALL_TIME_NS,
        matches=1,
        total=1,
        submitted_at=submission.submitted_at,
    )
    runs = storage.run_dir(run.pk)
    leftover_input = runs / "input" / "images" / "x1y2.png"
    leftover_input.parent.mkdir(parents=True)
    leftover_input.hardlink_to(cohort_file)  # a staged copy a crashed run left behind
    artifacts = [
        write(
            storage.environment_dir(environment.pk) / "Dockerfile",
            b"FROM localhost/podium/busybox:1\n",
        ),
        write(storage.environment_dir(environment.pk) / "context.archive", b"x" * 500),
        write(storage.environment_build_log(environment.pk), b"Step 1/1\n"),
        write(source_path(submission), b"s" * 1000),
        write(storage.submission_build_log(submission.pk), b"built\n"),
        write(storage.run_log(run.pk), b"stdout tail\n"),
        write(runs / "output" / "predictions.i32", b"\x07\x00\x00\x00"),
        write(runs / "private" / "mapping.tsv", b"0\tabc\tx1y2.png\tcat.png\n"),
        leftover_input,
    ]
    filled = Filled(environment, submission, run, cohort_file, artifacts)
    if fake is not None:
        fake.images.update(filled.images)
    return filled


@pytest.fixture
def closed(db: Any) -> Benchmark:
    """A benchmark that closed on 2026-03-01 15:00 UTC and keeps its artifacts 90 days."""
    return factories.BenchmarkFactory(slug="closed", opens_at=OPENS_AT, closes_at=CLOSES_AT)


@pytest.fixture
def filled(closed: Benchmark, alice: Any, fake_engine: FakeEngine) -> Filled:
    return fill(closed, alice, fake_engine)


def purge(*args: str, at: dt.datetime = LATER) -> tuple[str, str]:
    """Run the command at ``at``; its stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with time_machine.travel(at, tick=False):
        call_command("purge_artifacts", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def purge_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="artifacts.purge").order_by("id"))


def sizes(paths: list[Path]) -> int:
    return sum(path.stat().st_size for path in paths if path.stat().st_nlink == 1)


# Refusal ------------------------------------------------------------------------------


def test_it_refuses_before_the_retention_period_ends_and_deletes_nothing(
    filled: Filled, fake_engine: FakeEngine
) -> None:
    just_before = ALLOWED_FROM - dt.timedelta(microseconds=1)

    with pytest.raises(CommandError) as refused:
        purge("--benchmark", "closed", at=just_before)

    assert str(refused.value) == REFUSAL
    assert all(path.exists() for path in filled.artifacts)
    assert fake_engine.images == set(filled.images)
    assert purge_events() == []
    assert Benchmark.objects.get(slug="closed").artifacts_purged_at is None


def test_a_dry_run_before_the_date_is_refused_too(filled: Filled) -> None:
    with pytest.raises(CommandError, match="purging is allowed from 2026-05-30T15:00:00"):
        purge("--benchmark", "closed", "--dry-run", at=CLOSES_AT + dt.timedelta(days=89))

    assert all(path.exists() for path in filled.artifacts)


def test_an_open_benchmark_is_refused(benchmark: Benchmark, fake_engine: FakeEngine) -> None:
    with pytest.raises(CommandError, match="purging is allowed from"):
        purge("--benchmark", benchmark.slug, at=dt.datetime.now(UTC))


def test_the_retention_period_is_the_benchmarks_own(filled: Filled, closed: Benchmark) -> None:
    closed.retention_days = 0
    closed.save(update_fields=["retention_days"])

    summary = artifacts_purge(benchmark=closed, now=CLOSES_AT)

    assert summary.files_removed == len(filled.artifacts)
    closed.retention_days = 365
    closed.save(update_fields=["retention_days"])
    with pytest.raises(PurgeNotAllowed, match="from 2027-03-01T15:00:00"):
        artifacts_purge(benchmark=closed, now=LATER)


def test_an_unknown_benchmark_is_a_clear_error(db: Any) -> None:
    with pytest.raises(CommandError, match=r"^no benchmark 'nope'$"):
        purge("--benchmark", "nope")


# The purge ----------------------------------------------------------------------------


def test_from_the_date_on_it_deletes_the_artifacts_and_keeps_the_results(
    filled: Filled, fake_engine: FakeEngine, closed: Benchmark
) -> None:
    freed = sizes(filled.artifacts)

    out, err = purge("--benchmark", "closed", at=ALLOWED_FROM)

    assert not any(path.exists() for path in filled.artifacts)
    assert not storage.run_dir(filled.run.pk).exists()
    assert not storage.submission_dir(filled.submission.pk).exists()
    assert not storage.environment_dir(filled.environment.pk).exists()
    assert fake_engine.images == set()
    assert out == (
        f"Purged closed: deleted {len(filled.artifacts)} files ({freed:,} bytes) "
        "in 3 folders and 2 images.\n"
    )
    assert err == ""
    # What is kept: the cohort, every row and its digests and timings.
    assert filled.cohort_file.read_bytes() == b"png" * 100
    assert CohortItem.objects.filter(cohort__benchmark=closed).count() == 1
    run = Run.objects.get(pk=filled.run.pk)
    assert (run.wall_time_ns, run.output_sha256, run.verdict) == (
        WALL_TIME_NS,
        OUTPUT_SHA256,
        "passed",
    )
    submission = Submission.objects.get(pk=filled.submission.pk)
    assert submission.source_sha256 == "5" * 64
    assert submission.image_digest == "sha256:" + "d" * 64
    assert submission.status == Submission.PASSED
    assert Environment.objects.get(pk=filled.environment.pk).image_digest == "sha256:" + "e" * 64
    assert LeaderboardEntry.objects.get(benchmark=closed).wall_time_ns == WALL_TIME_NS
    assert AttemptLedger.objects.filter(submission=submission).count() == 1
    assert SubmissionEvent.objects.filter(submission=submission).count() == 1
    assert EnvironmentEvent.objects.filter(environment=filled.environment).count() == 1
    # ...and what it recorded.
    [event] = purge_events()
    assert event.actor is None
    assert event.target == "benchmark:closed"
    assert event.details == {
        "folders": 3,
        "files": len(filled.artifacts),
        "bytes": freed,
        "images": 2,
        "images_left": 0,
        "folders_left": 0,
        "skipped": 0,
    }
    assert Benchmark.objects.get(slug="closed").artifacts_purged_at == ALLOWED_FROM


def test_a_staged_hard_link_frees_no_bytes_and_leaves_the_cohort_file(
    filled: Filled, closed: Benchmark
) -> None:
    every_byte = sum(path.stat().st_size for path in filled.artifacts)
    staged_link = filled.artifacts[-1]
    assert staged_link.stat().st_nlink == 2

    summary = artifacts_purge(benchmark=closed, now=LATER)

    assert summary.files_removed == len(filled.artifacts)
    assert summary.bytes_removed == every_byte - len(b"png" * 100)
    assert filled.cohort_file.stat().st_nlink == 1
    assert filled.cohort_file.read_bytes() == b"png" * 100


def test_other_benchmarks_keep_their_files_and_images(
    filled: Filled, fake_engine: FakeEngine, bob: Any
) -> None:
    other = factories.BenchmarkFactory(slug="other", opens_at=OPENS_AT, closes_at=CLOSES_AT)
    rival = fill(other, bob, fake_engine)

    purge("--benchmark", "closed")

    assert not any(path.exists() for path in filled.artifacts)
    assert all(path.exists() for path in rival.artifacts)
    assert fake_engine.images == set(rival.images)
    assert Benchmark.objects.get(slug="other").artifacts_purged_at is None


def test_a_second_purge_deletes_nothing_new_and_says_so(
    filled: Filled, fake_engine: FakeEngine
) -> None:
    purge("--benchmark", "closed")
    survivor = write(storage.cohort_dir(filled.run.cohort_id) / "dog.png", b"dog")

    out, err = purge("--benchmark", "closed", at=LATER + dt.timedelta(days=1))

    assert out == "Nothing left to purge for closed.\n"
    assert err == ""
    assert survivor.exists()
    first, second = purge_events()
    assert first.details["files"] == len(filled.artifacts)
    assert second.details == dict.fromkeys(first.details, 0)
    assert Benchmark.objects.get(slug="closed").artifacts_purged_at == LATER + dt.timedelta(days=1)


def test_a_dry_run_lists_what_would_go_and_deletes_nothing(
    filled: Filled, fake_engine: FakeEngine
) -> None:
    out, err = purge("--benchmark", "closed", "--dry-run")

    assert out.splitlines() == [
        f"would delete environments/{filled.environment.pk}/",
        f"would delete submissions/{filled.submission.pk}/",
        f"would delete runs/{filled.run.pk}/",
        f"would remove image {filled.submission.image_tag}",
        f"would remove image {filled.environment.image_tag}",
        f"Dry run for closed: would delete {len(filled.artifacts)} files "
        f"({sizes(filled.artifacts):,} bytes) in 3 folders and 2 images.",
    ]
    assert err == ""
    assert all(path.exists() for path in filled.artifacts)
    assert fake_engine.images == set(filled.images)
    assert purge_events() == []
    assert Benchmark.objects.get(slug="closed").artifacts_purged_at is None


def test_an_image_a_running_container_uses_is_reported_and_kept(
    filled: Filled, fake_engine: FakeEngine
) -> None:
    fake_engine.running.add(filled.environment.image_tag)

    out, err = purge("--benchmark", "closed")

    assert out.startswith(f"Purged closed: deleted {len(filled.artifacts)} files")
    assert out.endswith("in 3 folders and 1 images.\n")
    assert err.splitlines() == [
        f"left in place: {filled.environment.image_tag}: {filled.environment.image_tag} "
        "is used by running container(s) 0123456789ab",
        "Run the command again to retry what was left in place.",
    ]
    assert fake_engine.images == {filled.environment.image_tag}
    assert not any(path.exists() for path in filled.artifacts)
    [event] = purge_events()
    assert (event.details["images"], event.details["images_left"]) == (1, 1)

    fake_engine.running.clear()
    out, _ = purge("--benchmark", "closed")
    assert out == "Purged closed: deleted 0 files (0 bytes) in 0 folders and 1 images.\n"
    assert fake_engine.images == set()


def test_an_image_podium_did_not_build_for_the_row_is_never_removed(
    filled: Filled, fake_engine: FakeEngine
) -> None:
    Environment.objects.filter(pk=filled.environment.pk).update(
        image_tag="localhost/podium/busybox:1"
    )
    fake_engine.images.add("localhost/podium/busybox:1")

    _, err = purge("--benchmark", "closed")

    assert "localhost/podium/busybox:1" in fake_engine.images
    assert err.splitlines()[0] == (
        "left in place: localhost/podium/busybox:1: not an image Podium built for this row"
    )


def test_unfinished_work_is_skipped_and_reported(filled: Filled, fake_engine: FakeEngine) -> None:
    Submission.objects.filter(pk=filled.submission.pk).update(status=Submission.QUEUED)

    out, err = purge("--benchmark", "closed")

    assert out == "Nothing left to purge for closed.\n"
    assert err.splitlines() == [
        f"skipped, still in progress: submission {filled.submission.pk} (queued)",
        f"skipped, still in progress: environment {filled.environment.pk} "
        "(used by unfinished work)",
        "Run the command again to retry what was left in place.",
    ]
    assert all(path.exists() for path in filled.artifacts)
    assert fake_engine.images == set(filled.images)


def test_an_environment_a_later_phase_still_uses_is_skipped(
    filled: Filled, fake_engine: FakeEngine, alice: Any
) -> None:
    """The closed benchmark was a contest's first phase; alice's upload to the second,
    with her first-phase environment (carried over), is still queued."""
    contest = factories.ContestFactory()
    Benchmark.objects.filter(slug="closed").update(contest=contest, phase_order=1)
    later = factories.BenchmarkFactory(slug="later", contest=contest, phase_order=2)
    Submission.objects.create(
        entrant=alice,
        benchmark=later,
        environment=filled.environment,
        status=Submission.QUEUED,
        submitted_at=LATER,
        source_name="s.tar.gz",
        source_format="tar.gz",
        source_sha256="0" * 64,
        source_bytes=1,
    )

    _, err = purge("--benchmark", "closed")

    skipped = f"skipped, still in progress: environment {filled.environment.pk}"
    assert f"{skipped} (used by unfinished work)" in err.splitlines()
    assert storage.environment_dir(filled.environment.pk).exists()
    assert not storage.submission_dir(filled.submission.pk).exists()  # its own finished work


def test_after_a_purge_log_tails_are_empty_and_the_source_is_no_longer_kept(
    filled: Filled, alice: Any
) -> None:
    purge("--benchmark", "closed")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {ApiToken.objects.create(user=alice).key}")
    submission = f"/api/v1/submissions/{filled.submission.pk}/"

    environment_log = client.get(f"/api/v1/environments/{filled.environment.pk}/build-log")
    build_log = client.get(f"{submission}build-log")
    run_log = client.get(f"{submission}run-log")
    source = client.get(f"{submission}source")

    assert [r.status_code for r in (environment_log, build_log, run_log)] == [200] * 3
    assert environment_log.content == build_log.content == run_log.content == b""
    assert source.status_code == 404
    assert "no longer kept" in source.json()["detail"]


# The real engine ----------------------------------------------------------------------


def build_tiny_image(tag: str) -> None:
    build_dockerfile(tag, f"FROM localhost/podium/busybox:1\nLABEL purge-test={uuid.uuid4().hex}\n")


@pytest.fixture
def real_environment(closed: Benchmark, alice: Any) -> Iterator[Environment]:
    """A ready environment of the closed benchmark whose image is really in the engine."""
    environment = factories.EnvironmentFactory(owner=alice, benchmark=closed)
    environment.image_tag = f"podium-entrant/env-{environment.pk}:test-{uuid.uuid4().hex[:12]}"
    environment.save(update_fields=["image_tag"])
    build_tiny_image(environment.image_tag)
    yield environment
    engine.remove_image(environment.image_tag)


@pytest.mark.docker
def test_the_purge_removes_the_environment_image_from_the_engine(
    real_environment: Environment,
) -> None:
    assert engine.image_exists(real_environment.image_tag)

    out, err = purge("--benchmark", "closed")

    assert not engine.image_exists(real_environment.image_tag)
    assert out == "Purged closed: deleted 0 files (0 bytes) in 0 folders and 1 images.\n"
    assert err == ""
    assert purge_events()[0].details["images"] == 1


@pytest.mark.docker
def test_an_image_a_real_running_container_uses_is_left_and_reported(
    real_environment: Environment,
) -> None:
    container_id = engine.create_container(
        image=real_environment.image_tag, command=["sleep", "60"], network_mode="none"
    )
    try:
        engine.start(container_id)

        _, err = purge("--benchmark", "closed")

        assert engine.image_exists(real_environment.image_tag)
        assert f"is used by running container(s) {container_id[:12]}" in err
    finally:
        engine.remove_container(container_id)
    assert engine.remove_image_if_unused(real_environment.image_tag) is True
    assert engine.remove_image_if_unused(real_environment.image_tag) is False
