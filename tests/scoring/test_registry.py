"""Submission images through a registry, by digest (``PODIUM_REGISTRY``).

The build host pushes the image and records its digest reference; a scoring host pulls
exactly that, refuses any other content (a platform fault: requeued, then refunded) and
removes the image after the run; retention deletes the manifest from the registry.

Each test starts a real CNCF Distribution registry (Debian's ``docker-registry``) on
loopback, on a free port, storing into a temp folder, with deletes enabled. One engine
plays both hosts: the build's own tag is removed before scoring, so the scoring side
has to pull the image from the registry. Every image is built FROM the local
``localhost/podium/busybox:1`` under fresh names and removed by exact name afterwards.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import shutil
import socket
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from django.utils import timezone

from portal.core import storage
from portal.submissions.models import AttemptLedger, Run, Submission
from scoring import engine
from scoring.build import builds
from scoring.images import registry
from scoring.run import runner
from scoring.upkeep import retention
from tests import factories
from tests.scoring.test_builds import accept
from tests.scoring.test_runner import RIGHT
from tests.scoring.test_staging import make_cohort, make_submission

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[2]
BASE = "localhost/podium/busybox:1"
REGISTRY_START_S = 15.0
WRONG = RIGHT.replace(r"\007", r"\010")  # answers class 8 for every row: it fails
ROWS = 10
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"


# A registry of the test's own -------------------------------------------------------------


@dataclass
class RegistryServer:
    address: str  # "127.0.0.1:PORT"
    storage: Path
    process: subprocess.Popen[bytes] | None = field(repr=False, default=None)

    def url(self, path: str) -> str:
        return f"http://{self.address}{path}"

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def registry_binary() -> str:
    """Debian's ``docker-registry`` (CNCF Distribution); skips (or fails under
    ``REQUIRE_DOCKER=1``) when it is not installed."""
    binary = shutil.which("docker-registry") or shutil.which("/usr/bin/docker-registry")
    if binary is None:
        reason = "no docker-registry binary here (Debian's docker-registry package)"
        if os.environ.get("REQUIRE_DOCKER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return binary


@contextmanager
def serve_registry(root: Path) -> Iterator[RegistryServer]:
    """A registry on 127.0.0.1 and a free port, storing under ``root``, deletes enabled
    (retention deletes manifests); stopped on exit."""
    binary = registry_binary()
    port = free_port()
    storage = root / "storage"
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    log_path = root / "registry.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
    server = RegistryServer(address=f"127.0.0.1:{port}", storage=storage, process=process)
    try:
        deadline = time.monotonic() + REGISTRY_START_S
        while True:
            with suppress(requests.RequestException):
                if requests.get(server.url("/v2/"), timeout=2).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the registry did not start:\n{log_path.read_text()}")
            time.sleep(0.05)
        yield server
    finally:
        server.stop()


@pytest.fixture
def registry_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    with serve_registry(tmp_path_factory.mktemp("registry")) as server:
        yield server


# Helpers ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def supervisor_binary() -> Path:
    subprocess.run(
        ["make", "scoring/supervisor/supervise"], cwd=REPO, check=True, capture_output=True
    )
    return REPO / "scoring" / "supervisor" / "supervise"


@pytest.fixture
def with_registry(settings, registry_server, supervisor_binary, benchmark) -> RegistryServer:
    """Scores go through ``registry_server``, on a 10-image cohort of class 7."""
    settings.PODIUM_REGISTRY = registry_server.address
    settings.PODIUM_SUPERVISOR = supervisor_binary
    benchmark.cohort_size = ROWS
    benchmark.pass_min_matches = ROWS
    benchmark.score_timeout_s = 30
    benchmark.run_memory_bytes = 256 << 20
    benchmark.save()
    make_cohort(benchmark, [7] * ROWS)
    return registry_server


@pytest.fixture
def names() -> Iterator[list[str]]:
    """Image names a test made on the engine; each removed afterwards."""
    made: list[str] = []
    yield made
    for ref in reversed(made):
        engine.remove_image(ref)


def build(tag: str, script: str, names: list[str]) -> str:
    """An image FROM the busybox base with ``script`` as /submission/run; its ID, which is
    the test's own (no other image on this shared engine has the same content)."""
    names.append(tag)
    script += f"# {uuid.uuid4().hex}\n"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for member, data, mode in (
            ("Dockerfile", f"FROM {BASE}\nCOPY run /submission/run\n".encode(), 0o644),
            ("run", script.encode(), 0o755),
        ):
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    outcome = engine.build_image(context=context, tag=tag, on_log=lambda _: None, timeout_s=120)
    assert outcome.ok, outcome.error
    return engine.image_info(tag).id


@dataclass(frozen=True)
class Pushed:
    tag: str  # the build host's own tag
    image_id: str
    ref: str  # by digest in the registry


def push_built(submission: Submission, script: str, names: list[str]) -> Pushed:
    """As a build does: the image under the submission's repository, pushed, recorded."""
    tag = f"podium-entrant/sub-{submission.pk}:{uuid.uuid4().hex[:12]}"
    image_id = build(tag, script, names)
    ref = registry.publish(tag)
    names.append(ref)
    Submission.objects.filter(pk=submission.pk).update(
        image_tag=tag, image_digest=image_id, image_ref=ref
    )
    return Pushed(tag, image_id, ref)


def only_in_the_registry(*refs: str) -> None:
    """This engine as a separate scoring host: no local name is left for the images."""
    for ref in refs:
        engine.remove_image(ref)


def the_run(submission: Submission) -> Run:
    return Run.objects.filter(submission=submission).latest("try_number")


def refunded(submission: Submission) -> bool:
    return AttemptLedger.objects.filter(submission=submission, delta=AttemptLedger.REFUND).exists()


def manifest_of(server: RegistryServer, ref: str) -> requests.Response:
    found = registry.parse(ref)
    return requests.get(
        server.url(f"/v2/{found.repository}/manifests/{found.digest}"),
        headers={"Accept": MANIFEST_V2},
        timeout=10,
    )


# Without Docker: references, and what the scoring side runs ---------------------------------


def test_only_references_by_digest_are_accepted():
    digest = "sha256:" + "a" * 64
    parsed = registry.parse(f"127.0.0.1:5000/podium-entrant/sub-3@{digest}")
    assert (parsed.registry, parsed.repository, parsed.digest) == (
        "127.0.0.1:5000",
        "podium-entrant/sub-3",
        digest,
    )
    assert str(parsed) == f"127.0.0.1:5000/podium-entrant/sub-3@{digest}"
    for ref in (
        "127.0.0.1:5000/podium-entrant/sub-3:latest",  # a tag names whatever was pushed last
        "podium-entrant/sub-3@" + digest,  # no registry
        f"127.0.0.1:5000/podium-entrant/sub-3@sha256:{'a' * 63}",
    ):
        with pytest.raises(ValueError, match="not a registry reference by digest"):
            registry.parse(ref)


def test_the_registry_api_is_plain_http_on_loopback_or_when_configured_so(settings):
    settings.PODIUM_REGISTRY = "http://10.0.0.5:5000"
    assert registry.address() == "10.0.0.5:5000"
    assert registry._base_url("10.0.0.5:5000") == "http://10.0.0.5:5000"
    assert registry._base_url("127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert registry._base_url("[::1]:5000") == "http://[::1]:5000"
    assert registry._base_url("localhost:5000") == "http://localhost:5000"
    assert registry._base_url("registry.example.org") == "https://registry.example.org"


def test_without_a_registry_the_run_uses_the_builds_own_tag(
    alice, benchmark, settings, monkeypatch
):
    settings.PODIUM_REGISTRY = ""
    submission = make_submission(alice, benchmark, image_tag="podium-entrant/sub-1:abc")

    def no_engine(*args: Any, **kw: Any) -> None:
        raise AssertionError("single-engine mode asks the engine nothing before the run")

    monkeypatch.setattr(engine, "pull_image", no_engine)
    monkeypatch.setattr(engine, "image_info", no_engine)
    measured = runner.Measured()

    image = runner.pull(submission, measured)

    assert image == runner.Image("podium-entrant/sub-1:abc", pulled=False)
    assert "pull" not in measured.overhead_ms


def test_an_image_never_pushed_runs_only_if_it_is_the_recorded_one(
    alice, benchmark, settings, monkeypatch
):
    """Built before the registry was configured: no reference, so the local tag is run,
    and only when its ID is the one recorded at build time."""
    settings.PODIUM_REGISTRY = "127.0.0.1:5000"
    submission = make_submission(alice, benchmark, image_tag="podium-entrant/sub-1:abc")
    submission.image_digest = "sha256:" + "b" * 64
    local = {"podium-entrant/sub-1:abc": engine.ImageInfo(id=submission.image_digest, size=1)}
    monkeypatch.setattr(engine, "image_info", lambda ref: local[ref])

    assert runner.pull(submission, runner.Measured()).ref == "podium-entrant/sub-1:abc"

    local["podium-entrant/sub-1:abc"] = engine.ImageInfo(id="sha256:" + "c" * 64, size=1)
    with pytest.raises(registry.ImageRefused, match="not the one that was built"):
        runner.pull(submission, runner.Measured())


# With a registry ----------------------------------------------------------------------------


@pytest.mark.docker
def test_a_build_is_pushed_then_pulled_by_digest_scored_and_removed_after_the_run(
    alice, benchmark, with_registry, sent, made, tmp_path
):
    submission = accept(alice, benchmark, tmp_path, {"run": (RIGHT.encode(), 0o755)})

    builds.build_submission(submission.pk)

    submission.refresh_from_db()
    made["images"].append(submission.image_tag)
    assert submission.status == Submission.QUEUED, submission.failure_reason
    pushed = registry.parse(submission.image_ref)
    assert (pushed.registry, pushed.repository) == (
        with_registry.address,
        f"podium-entrant/sub-{submission.pk}",
    )
    # The registry holds, under that digest, the very image the build made.
    manifest = manifest_of(with_registry, submission.image_ref)
    assert manifest.status_code == 200
    assert manifest.json()["config"]["digest"] == submission.image_digest
    assert manifest.headers["Docker-Content-Digest"] == pushed.digest
    # The build host keeps the image under its own tag only: the push name is gone.
    tag = submission.image_tag.rpartition(":")[2]
    assert not engine.image_exists(f"{with_registry.address}/{pushed.repository}:{tag}")
    assert engine.image_info(submission.image_tag).id == submission.image_digest
    build_log = (storage.submission_dir(submission.pk) / "build.log").read_text()
    assert f"Pushed to the registry as {pushed.digest}" in build_log
    assert with_registry.address not in build_log  # the entrant reads it: no host address
    only_in_the_registry(submission.image_tag)
    assert not engine.image_exists(submission.image_digest)

    runner.score_submission(submission.pk)

    run = the_run(submission)
    assert (run.verdict, run.matches) == ("passed", ROWS), run.verdict_reason
    assert run.overhead_ms["pull"] > 0
    # Gone from the scoring host after the run; still in the registry for the next one.
    assert not engine.image_exists(submission.image_ref)
    assert not engine.image_exists(submission.image_digest)
    assert registry.manifest_exists(submission.image_ref)


@pytest.mark.docker
def test_a_build_whose_push_fails_is_the_platforms_fault_and_leaves_no_image(
    alice, benchmark, with_registry, sent, made, tmp_path
):
    with_registry.stop()
    submission = accept(alice, benchmark, tmp_path, {"run": (RIGHT.encode(), 0o755)})

    builds.build_submission(submission.pk)

    submission.refresh_from_db()
    assert submission.status == Submission.ACCEPTED  # built again later, not charged twice
    assert submission.image_ref == ""
    repository = f"podium-entrant/sub-{submission.pk}"
    assert not [
        name
        for image in engine.client().api.images(all=True)
        for name in image.get("RepoTags") or []
        if repository in name
    ]


@pytest.mark.docker
def test_a_tag_pushed_over_never_runs_the_recorded_digest_does(
    alice, benchmark, with_registry, sent, names
):
    submission = make_submission(alice, benchmark)
    pushed = push_built(submission, RIGHT, names)
    # Other content pushed over the same name and tag in the registry.
    other_tag = f"podium-test/other-{uuid.uuid4().hex[:12]}:1"
    build(other_tag, WRONG, names)
    remote, _, tag = f"{with_registry.address}/{pushed.tag}".rpartition(":")
    engine.tag_image(other_tag, remote, tag)
    names.append(f"{remote}:{tag}")
    other_digest = engine.push_image(remote, tag)
    by_tag = requests.get(
        with_registry.url(f"/v2/{registry.parse(pushed.ref).repository}/manifests/{tag}"),
        headers={"Accept": MANIFEST_V2},
        timeout=10,
    )
    assert by_tag.headers["Docker-Content-Digest"] == other_digest  # the tag moved
    only_in_the_registry(pushed.tag, other_tag, f"{remote}:{tag}")

    runner.score_submission(submission.pk)

    run = the_run(submission)
    # The recorded content ran (the other answers class 8 and would fail).
    assert (run.status, run.verdict, run.matches) == (Run.FINISHED, "passed", ROWS)
    assert not engine.image_exists(pushed.ref)


@pytest.mark.docker
def test_a_pulled_image_that_is_not_the_recorded_one_is_refused_never_run_nor_charged(
    alice, benchmark, with_registry, sent, names, monkeypatch
):
    submission = make_submission(alice, benchmark)
    pushed = push_built(submission, RIGHT, names)
    other = Submission.objects.get(pk=submission.pk)
    other_tag = f"podium-entrant/sub-{submission.pk}:{uuid.uuid4().hex[:12]}"
    build(other_tag, WRONG, names)
    other_ref = registry.publish(other_tag)
    names.append(other_ref)
    other_id = engine.image_info(other_tag).id
    only_in_the_registry(pushed.tag, other_tag)
    # The reference now names other content than the image the build recorded.
    Submission.objects.filter(pk=submission.pk).update(image_ref=other_ref)
    created: list[dict[str, Any]] = []
    real_create = engine.create_container

    def create_spy(**spec: Any) -> str:
        created.append(spec)
        return real_create(**spec)

    monkeypatch.setattr(engine, "create_container", create_spy)

    runner.score_submission(submission.pk)

    run = the_run(submission)
    other.refresh_from_db()
    assert run.status == Run.INFRA_FAILED
    assert run.verdict_reason == (
        "platform error: the submission image from the registry is not the one that was built"
    )
    assert created == []  # nothing ran
    assert not engine.image_exists(other_ref) and not engine.image_exists(other_id)
    assert other.status == Submission.QUEUED  # requeued once: the platform's fault
    assert not refunded(other)

    runner.score_submission(submission.pk)

    other.refresh_from_db()
    assert other.status == Submission.INFRA_FAILED
    assert refunded(other)  # the attempt is given back
    assert created == []


@pytest.mark.docker
def test_a_registry_that_is_down_is_a_platform_fault(alice, benchmark, with_registry, sent, names):
    submission = make_submission(alice, benchmark)
    pushed = push_built(submission, RIGHT, names)
    only_in_the_registry(pushed.tag)
    with_registry.stop()

    runner.score_submission(submission.pk)

    run = the_run(submission)
    submission.refresh_from_db()
    assert run.status == Run.INFRA_FAILED
    assert run.verdict_reason == (
        "platform error: the container engine failed while pulling the submission image"
    )
    assert submission.status == Submission.QUEUED and not refunded(submission)


@pytest.mark.docker
def test_retention_deletes_the_manifests_from_the_registry(
    alice, benchmark, with_registry, sent, names
):
    submission = make_submission(alice, benchmark, status=Submission.PASSED)
    pushed = push_built(submission, RIGHT, names)
    kept = make_submission(factories.UserFactory(), benchmark, status=Submission.QUEUED)
    kept_pushed = push_built(kept, RIGHT, names)  # unfinished work stays
    now = timezone.now()
    benchmark.opens_at = now - dt.timedelta(days=200)
    benchmark.closes_at = now - dt.timedelta(days=benchmark.retention_days + 1)
    benchmark.save()

    dry = retention.artifacts_purge(benchmark=benchmark, now=now, dry_run=True)

    assert pushed.ref in dry.images_removed
    assert registry.manifest_exists(pushed.ref)

    summary = retention.artifacts_purge(benchmark=benchmark, now=now)

    assert pushed.ref in summary.images_removed and pushed.tag in summary.images_removed
    assert kept_pushed.ref not in summary.images_removed
    assert not registry.manifest_exists(pushed.ref)
    assert manifest_of(with_registry, pushed.ref).status_code == 404
    assert registry.manifest_exists(kept_pushed.ref)
    only_in_the_registry(kept_pushed.tag)
    with pytest.raises(engine.EngineError):
        engine.pull_image(pushed.ref)
    again = retention.artifacts_purge(benchmark=benchmark, now=now)
    assert pushed.ref not in again.images_removed  # idempotent: nothing new to delete


@pytest.mark.docker
def test_a_base_image_its_registry_does_not_have_fails_the_build_saying_so(
    registry_server, alice, benchmark, sent
):
    """The base image is looked at (for declared volumes) before anything runs: one the
    allowed registry answers 'unknown' for fails the build, in one sentence."""
    from portal.environments.models import Environment
    from tests.scoring.test_builds import new_environment

    missing = f"{registry_server.address}/podium/nothing-{uuid.uuid4().hex[:8]}:1"
    benchmark.allowed_registries = f"localhost/podium/\n{registry_server.address}/\n"
    benchmark.save(update_fields=["allowed_registries"])
    environment = new_environment(alice, benchmark, f"FROM {missing}\nRUN true\n")

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.FAILED
    assert f"{missing}" in environment.failure_reason
    assert "was not found in its registry" in environment.failure_reason
