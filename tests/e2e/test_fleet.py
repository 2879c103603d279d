"""Two scoring hosts of one class, each with its own Docker Engine, on one queue.

The second engine is a `dockerd` this test starts, with its own data root, exec root,
pid file, socket and a bridge of its own that the test makes and removes (the scored
container has no network; an engine started without a bridge would delete the machine's
`docker0`, which the first engine's builds use). It runs in this machine's network
namespace, so it reaches the test's registry on 127.0.0.1, which the
engine allows over plain HTTP by default (loopback is an insecure registry out of the
box). The submission image reaches each engine only from that registry, by digest
(`PODIUM_REGISTRY`): each host pulls it for a run, checks it is the recorded image and
removes it afterwards. Three entrants have six runs waiting;
two real scoring workers (one per engine, each under its own host name and lease) take
them from the class queue. Then one worker is SIGKILLed in the middle of a run: the
reaper gives the run back once and the other host scores it.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from portal.core import jobs
from portal.submissions.models import Run, Submission
from portal.submissions.wakeups import score_enqueue
from scoring import engine
from scoring.images import registry
from scoring.upkeep import reaper
from tests import factories
from tests.recovery.test_worker_crash import poll, start_worker, stop_worker
from tests.scoring.test_registry import RegistryServer, serve_registry
from tests.scoring.test_staging import make_cohort, make_submission

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.django_db(transaction=True)]

LEASE_S = 3
ROWS = 10
RUN_S = 4  # each entrant's run sleeps this long, so the two hosts overlap
SECOND_ENGINE_START_S = 60
SECOND_BRIDGE = "podium-fleet2"  # at most 15 characters, as for every interface name
SECOND_BRIDGE_ADDRESS = "172.30.251.1/24"


@pytest.fixture
def second_bridge() -> Iterator[str]:
    """A bridge interface for the second engine's default network, removed afterwards."""
    ip = shutil.which("ip")
    if ip is None:
        reason = "a second Docker Engine's bridge needs iproute2's ip"
        if os.environ.get("REQUIRE_DOCKER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    subprocess.run([ip, "link", "del", SECOND_BRIDGE], capture_output=True, check=False)
    subprocess.run([ip, "link", "add", "name", SECOND_BRIDGE, "type", "bridge"], check=True)
    try:
        subprocess.run([ip, "addr", "add", SECOND_BRIDGE_ADDRESS, "dev", SECOND_BRIDGE], check=True)
        subprocess.run([ip, "link", "set", SECOND_BRIDGE, "up"], check=True)
        yield SECOND_BRIDGE
    finally:
        subprocess.run([ip, "link", "del", SECOND_BRIDGE], capture_output=True, check=False)


@pytest.fixture
def second_engine(tmp_path_factory: pytest.TempPathFactory, second_bridge: str) -> Iterator[str]:
    """A second Docker Engine on a socket of its own; its DOCKER_HOST URL."""
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        reason = "a second Docker Engine needs dockerd and root"
        if os.environ.get("REQUIRE_DOCKER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("engine2")
    config = root / "daemon.json"
    config.write_text("{}")  # the machine's daemon.json names the first engine's data root
    socket = root / "docker.sock"
    url = f"unix://{socket}"
    log = (root / "dockerd.log").open("wb")
    had_docker0 = Path("/sys/class/net/docker0").exists()
    process = subprocess.Popen(
        [
            dockerd,
            "--config-file", str(config),
            "--data-root", str(root / "data"),
            "--exec-root", str(root / "exec"),
            "--pidfile", str(root / "dockerd.pid"),
            "-H", url,
            f"--bridge={second_bridge}",
            "--iptables=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        poll(
            lambda: (
                subprocess.run(
                    ["docker", "-H", url, "version"], capture_output=True, check=False
                ).returncode
            ),
            lambda code: code == 0,
            timeout_s=SECOND_ENGINE_START_S,
            interval_s=0.5,
        )
        assert Path("/sys/class/net/docker0").exists() == had_docker0  # left alone
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture
def sleeper_image() -> Iterator[str]:
    """A submission that sleeps RUN_S seconds, then answers class 7 for every row."""
    tag = f"podium-test/fleet-{uuid.uuid4().hex[:12]}:sleep"
    answer = "".join("\\007\\000\\000\\000" for _ in range(ROWS))
    run = f"#!/bin/sh\nsleep {RUN_S}\nprintf '{answer}' > \"$3\"\n".encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data, mode in (
            ("Dockerfile", b"FROM localhost/podium/busybox:1\nCOPY run /submission/run\n", 0o644),
            ("run", run, 0o755),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    outcome = engine.build_image(context=context, tag=tag, on_log=lambda _: None, timeout_s=120)
    assert outcome.ok, outcome.error
    yield tag
    engine.remove_image(tag)


@pytest.fixture
def local_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    with serve_registry(tmp_path_factory.mktemp("registry")) as server:
        yield server


def image_id(url: str | None, ref: str) -> str | None:
    """The ID of image ``ref`` on the engine at ``url`` (None: the first), None if absent."""
    command = ["docker", *(["-H", url] if url else []), "image", "inspect", "-f", "{{.Id}}", ref]
    found = subprocess.run(command, capture_output=True, text=True, check=False)
    return found.stdout.strip() if found.returncode == 0 else None


def test_two_hosts_share_one_queue_fairly_and_a_killed_host_loses_no_run(
    benchmark, data_dir, settings, second_engine, sleeper_image, local_registry
):
    settings.PODIUM_LEASE_S = LEASE_S
    benchmark.cohort_size = ROWS
    benchmark.pass_min_matches = ROWS
    benchmark.score_timeout_s = 60
    benchmark.save()
    make_cohort(benchmark, [7] * ROWS)
    digest = image_id(None, sleeper_image)
    settings.PODIUM_REGISTRY = local_registry.address
    ref = registry.publish(sleeper_image)  # as the build host does
    assert image_id(second_engine, digest or "") is None  # only the registry can bring it
    entrants = [factories.UserFactory(username=name) for name in ("ann", "ben", "cat")]
    # Each entrant queued two runs, all before any host is up: ann's two first.
    waiting: list[Submission] = []
    for entrant in entrants:
        for _ in range(2):
            submission = make_submission(entrant, benchmark, image_tag=sleeper_image)
            Submission.objects.filter(pk=submission.pk).update(image_digest=digest, image_ref=ref)
            waiting.append(submission)
            score_enqueue(submission.pk, kind=submission.kind)  # as a finished build does

    queue = jobs.scoring_queue(benchmark.hardware_class_id)
    # The embedded broker's folder as this process sees it (unused with Redis).
    broker_dir = Path(
        settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("data_folder_in", data_dir / "broker" / "out")
    ).parent
    hosts = {"alpha": None, "beta": second_engine}
    logs = {name: data_dir / f"scoring-{name}.log" for name in hosts}
    workers = {
        name: start_worker(
            queue=queue,
            broker_url=settings.CELERY_BROKER_URL,
            data_dir=data_dir,
            host=name,
            log_path=logs[name],
            extra_env={
                "PODIUM_HARDWARE_CLASS": benchmark.hardware_class_id,
                "PODIUM_BROKER_DIR": str(broker_dir),
                "PODIUM_REGISTRY": local_registry.address,
                **({"DOCKER_HOST": url} if url else {}),
            },
        )
        for name, url in hosts.items()
    }
    try:
        # Kill alpha in the middle of its first run.
        first_on_alpha = poll(
            lambda: Run.objects.filter(host="alpha", status=Run.RUNNING).first(),
            lambda run: run is not None,
            timeout_s=120,
        )
        os.killpg(workers["alpha"].pid, signal.SIGKILL)
        assert workers["alpha"].wait(timeout=10) == -signal.SIGKILL
        settings.PODIUM_HOST_NAME = "alpha"  # the reaper frees alpha's lock and container

        def reaped() -> str:
            reaper.reap()
            return str(Run.objects.get(pk=first_on_alpha.pk).status)

        poll(reaped, lambda status: status == Run.INFRA_FAILED, timeout_s=LEASE_S + 20)

        def finished() -> list[str]:
            return sorted(
                Submission.objects.filter(pk__in=[s.pk for s in waiting]).values_list(
                    "status", flat=True
                )
            )

        poll(finished, lambda statuses: statuses == ["passed"] * 6, timeout_s=240)
    finally:
        for name, worker in workers.items():
            stop_worker(worker, logs[name])
        for run in Run.objects.filter(submission__in=waiting, host="alpha"):
            for container in engine.list_containers([f"podium.run={run.pk}"]):
                engine.remove_container(container["Id"])
        engine.remove_image(ref)  # pulled by the killed run, which could not remove it

    runs = list(Run.objects.filter(submission__in=waiting).order_by("started_at", "id"))
    scored = [run for run in runs if run.status == Run.FINISHED]
    # None lost, none scored twice: one verdict per submission; the killed run once more.
    assert sorted(run.submission_id for run in scored) == sorted(s.pk for s in waiting)
    assert [run.pk for run in runs if run.status == Run.INFRA_FAILED] == [first_on_alpha.pk]
    retried = Run.objects.get(submission=first_on_alpha.submission, status=Run.FINISHED)
    assert retried.host == "beta" and retried.try_number == 2
    # Both hosts scored, each pulling the recorded image by digest onto its own engine (a
    # host refuses any other); each removed it after its runs, the second engine included.
    assert {run.host for run in runs} == {"alpha", "beta"}
    for run in scored:
        assert run.submission.image_ref == ref and run.overhead_ms["pull"] > 0
    assert image_id(second_engine, ref) is None and image_id(second_engine, digest or "") is None
    assert image_id(None, sleeper_image) == digest  # the build host keeps its own tag
    # Fair order: each entrant's first run started before anyone's second.
    firsts = [run.submission.entrant_id for run in runs[:3]]
    assert sorted(firsts) == sorted(entrant.pk for entrant in entrants)
