"""Builds are a sandbox too: hostile Dockerfiles and build.sh scripts against the network
policy, the bounds and the image namespace, on the real engine and the real firewall.

Every target is one of Podium's own test hosts (tests/testhosts.py): a listener on the
Docker host, a listener container on a second private network, and a "mirror" in a
network namespace whose address the allow-list admits.
"""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portal.audit.models import AuditEvent
from portal.core import errors, jobs, storage
from portal.environments.models import BuildNetworkCheck, Environment
from portal.environments.services import BUILD_NETWORK_WAIT_NOTE
from portal.submissions.intake import submission_accept
from portal.submissions.models import Submission
from scoring import engine
from scoring.build import buildbox, buildnet, builds, egress
from tests import factories, testhosts
from tests.scoring.test_builds import RUN_OK, accept, new_environment, tar_gz

BASE = "localhost/podium/busybox:1"
PYTHON = "localhost/podium/python:bookworm"

pytestmark = pytest.mark.docker


@pytest.fixture
def mirror(settings: Any, tmp_path: Path) -> Iterator[testhosts.Mirror]:
    """The allow-listed mirror, admitted by the policy for the length of the test."""
    folder = tmp_path / "mirror"
    folder.mkdir()
    (folder / "index.html").write_text("mirror-listener")
    original = settings.PODIUM_BUILD_EGRESS_ALLOW
    with testhosts.mirror_host(folder) as host:
        settings.PODIUM_BUILD_EGRESS_ALLOW = ",".join(filter(None, [original, host.allow]))
        buildnet.apply()
        try:
            yield host
        finally:
            settings.PODIUM_BUILD_EGRESS_ALLOW = original
            buildnet.apply()


@pytest.fixture
def targets(mirror: testhosts.Mirror) -> Iterator[dict[str, str]]:
    """name -> host:port of every listener, and what a build must find there."""
    with (
        testhosts.host_listener() as host_port,
        testhosts.private_listener("podium-test-priv", "172.30.253.0/24") as private,
    ):
        found = {
            "gateway": f"172.29.254.1:{host_port}",  # the build bridge's own gateway
            "private": f"{private}:8080",
            "mirror": f"{mirror.address}:{mirror.port}",
        }
        for number, address in enumerate(testhosts.host_addresses(4)):
            found[f"host{number}"] = f"{address}:{host_port}"
        for number, address in enumerate(testhosts.host_addresses(6)):
            found[f"hostv6-{number}"] = f"[{address}]:{host_port}"
        for address in found.values():  # each listener is there: only the policy stops builds
            host, port = address.rsplit(":", 1)
            socket.create_connection((host.strip("[]"), int(port)), timeout=4).close()
        yield found


# No single quote in these lines: the shell gets each one single-quoted.
PROBE_PY = (
    "import socket, sys",
    "for target in sys.argv[1:]:",
    '    name, address = target.split("=", 1)',
    '    host, port = address.rsplit(":", 1)',
    "    try:",
    '        socket.create_connection((host.strip("[]"), int(port)), 4).close()',
    '        print("PROBE", name, "REACHED")',
    "    except OSError:",
    '        print("PROBE", name, "BLOCKED")',
)


def probes(targets: dict[str, str]) -> str:
    """A shell command that prints ``PROBE <name> REACHED|BLOCKED`` for each target (a TCP
    connect from inside the build: busybox's own wget cannot be trusted to run here)."""
    script = " ".join(f"'{line}'" for line in PROBE_PY)
    pairs = " ".join(f"{name}={address}" for name, address in targets.items())
    return f"printf '%s\\n' {script} > /tmp/probe.py && python3 /tmp/probe.py {pairs}"


def outcomes(log: str) -> dict[str, str]:
    return dict(re.findall(r"PROBE (\S+) (REACHED|BLOCKED)", log))


def expected(targets: dict[str, str]) -> dict[str, str]:
    return {name: "REACHED" if name == "mirror" else "BLOCKED" for name in targets}


def accept_on(image: str, owner: Any, benchmark: Any, tmp_path: Path, files: Any) -> Submission:
    """An accepted submission on a ready environment whose image is ``image``."""
    factories.cohorts(benchmark)
    environment = factories.EnvironmentFactory(owner=owner, benchmark=benchmark, image_tag=image)
    archive = tar_gz(tmp_path / "src.tar.gz", files)
    return submission_accept(
        entrant=owner,
        benchmark=benchmark,
        environment=environment,
        source_file=archive,
        source_name="kit.tar.gz",
    )


def build_log(model: Any, kind: str) -> str:
    folder = storage.environment_dir if kind == "env" else storage.submission_dir
    return (folder(model.pk) / "build.log").read_text()


# The network policy ---------------------------------------------------------------------


def test_a_dockerfile_reaches_only_the_allow_listed_mirror(alice, benchmark, sent, made, targets):
    environment = new_environment(alice, benchmark, f"FROM {PYTHON}\nRUN {probes(targets)}\n")

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.READY, environment.failure_reason
    assert outcomes(build_log(environment, "env")) == expected(targets)


def test_build_sh_reaches_only_the_allow_listed_mirror(
    alice, benchmark, sent, made, targets, tmp_path
):
    script = (f"set -e\n{probes(targets)}\n".encode(), 0o644)
    submission = accept_on(PYTHON, alice, benchmark, tmp_path, {"build.sh": script, "run": RUN_OK})

    builds.build_submission(submission.pk)

    submission.refresh_from_db()
    assert submission.status == Submission.QUEUED, submission.failure_reason
    assert outcomes(build_log(submission, "sub")) == expected(targets)


def test_a_name_resolving_to_a_private_address_changes_nothing(
    alice, benchmark, sent, made, targets
):
    private = targets["private"].split(":")[0]
    dockerfile = (
        f"FROM {PYTHON}\n"
        f"RUN echo '{private} mirror.example.test' >> /etc/hosts && "
        f"{probes({'named': 'mirror.example.test:8080'})}\n"
    )
    environment = new_environment(alice, benchmark, dockerfile)

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.READY, environment.failure_reason
    assert outcomes(build_log(environment, "env")) == {"named": "BLOCKED"}


def test_apt_get_update_still_works_under_the_policy(alice, benchmark, sent, made):
    """The machine's own apt mirror sits inside a blocked range: the allow-list that
    `make test` derives from the apt sources admits exactly it."""
    environment = new_environment(alice, benchmark, f"FROM {PYTHON}\nRUN apt-get update\n")

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.READY, build_log(environment, "env")[-2000:]
    assert "Reading package lists" in build_log(environment, "env")


def test_a_removed_rule_makes_the_next_build_wait_uncharged(
    alice, benchmark, sent, made, tmp_path, django_capture_on_commit_callbacks
):
    rule = f"{egress.OUT_CHAIN} -d 10.0.0.0/8 -j REJECT --reject-with icmp-admin-prohibited"
    subprocess.run(["iptables", "-w", "-D", *rule.split()], check=True)
    try:
        environment = new_environment(alice, benchmark, f"FROM {BASE}\nRUN true\n")
        submission = accept(alice, benchmark, tmp_path, {"run": RUN_OK})

        with django_capture_on_commit_callbacks(execute=True):
            builds.build_environment(environment.pk)
            builds.build_submission(submission.pk)

        environment.refresh_from_db()
        submission.refresh_from_db()
        assert environment.status == Environment.QUEUED
        assert submission.status == Submission.ACCEPTED
        assert [e.note for e in environment.events.all()][-1] == BUILD_NETWORK_WAIT_NOTE
        assert [e.note for e in submission.events.all()][-1] == BUILD_NETWORK_WAIT_NOTE
        assert made["tags"] == [] and made["containers"] == []  # nothing ran
        assert (jobs.BUILD_ENVIRONMENT, (environment.pk,)) in sent  # looked at again later
        assert (jobs.BUILD_SUBMISSION, (submission.pk,)) in sent
        check = BuildNetworkCheck.objects.get()
        assert not check.enforced and "10.0.0.0/8" in check.problems  # staff see why
        assert AuditEvent.objects.filter(action="build_network.not_enforced").exists()
    finally:
        buildnet.apply()

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.READY
    assert BuildNetworkCheck.objects.get().enforced


# Bounds ----------------------------------------------------------------------------------


def assert_next_build_is_fine(owner: Any, benchmark: Any) -> None:
    environment = new_environment(owner, benchmark, f"FROM {BASE}\nRUN echo fine\n")
    builds.build_environment(environment.pk)
    environment.refresh_from_db()
    assert environment.status == Environment.READY, environment.failure_reason


def test_a_fork_bomb_in_a_dockerfile_fails_the_build_and_harms_nothing(
    alice, benchmark, sent, made, settings
):
    settings.PODIUM_BUILD_PIDS_LIMIT = 64
    environment = new_environment(
        alice, benchmark, f"FROM {BASE}\nRUN while :; do sleep 60 & done\n"
    )

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.FAILED
    assert "limit of 64 processes" in environment.failure_reason
    assert not buildbox.Cgroup(f"env-{environment.pk}", 1).pids_dir.exists()  # removed after
    assert_next_build_is_fine(alice, benchmark)


def test_a_memory_bomb_in_a_dockerfile_fails_the_build(alice, benchmark, sent, made, settings):
    settings.PODIUM_BUILD_MEMORY_BYTES = 64 << 20
    bomb = "RUN awk 'BEGIN { s = \"x\"; while (1) s = s s }'"
    environment = new_environment(alice, benchmark, f"FROM {BASE}\n{bomb}\n")

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.FAILED
    assert "non-zero code: 137" in environment.failure_reason
    assert f"more than its {64 << 20:,} bytes of memory" in environment.failure_reason
    assert_next_build_is_fine(alice, benchmark)


def test_a_disk_filler_in_a_dockerfile_is_stopped_at_the_cap(alice, benchmark, sent, made):
    benchmark.max_image_bytes = 32 << 20
    benchmark.save(update_fields=["max_image_bytes"])
    environment = new_environment(
        alice, benchmark, f"FROM {BASE}\nRUN dd if=/dev/zero of=/fill bs=1M count=100000\n"
    )

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.FAILED
    assert f"more than {32 << 20:,} bytes to disk" in environment.failure_reason
    assert_next_build_is_fine(alice, benchmark)


def test_build_sh_runs_without_capabilities_and_within_the_bounds(
    alice, benchmark, sent, made, settings, tmp_path
):
    settings.PODIUM_BUILD_PIDS_LIMIT = 48
    script = (
        b"grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status\nwhile :; do sleep 60 & done\n",
        0o644,
    )
    submission = accept(alice, benchmark, tmp_path, {"build.sh": script, "run": RUN_OK})

    builds.build_submission(submission.pk)

    submission.refresh_from_db()
    log = build_log(submission, "sub")
    assert "CapEff:\t0000000000000000" in log
    assert "CapBnd:\t0000000000000000" in log
    assert "NoNewPrivs:\t1" in log
    assert submission.status == Submission.BUILD_FAILED
    assert "limit of 48 processes" in submission.failure_reason


# The image namespace ---------------------------------------------------------------------


@pytest.fixture
def rival_image() -> Iterator[str]:
    """Another entrant's submission image, holding their source."""
    tag = "podium-entrant/sub-35:abc123"
    container_id = engine.create_container(image=BASE, command=["true"])
    try:
        engine.put_archive(container_id, "/", _tar({"submission/run": b"SECRET-RIVAL-SOURCE"}))
        engine.commit(container_id, repository="podium-entrant/sub-35", tag="abc123")
    finally:
        engine.remove_container(container_id)
    try:
        yield tag
    finally:
        engine.remove_image(tag)


def _tar(files: dict[str, bytes]) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_no_dockerfile_can_name_another_entrants_image(alice, benchmark, sent, made, rival_image):
    short_id = engine.image_info(rival_image).id.removeprefix("sha256:")
    attempts = [
        f"FROM {rival_image}\n",
        f"FROM docker.io/{rival_image}\n",
        f"FROM localhost/{rival_image}\n",
        f"FROM {short_id[:4]}\n",
        f"FROM {short_id[:12]}\n",
        f"FROM sha256:{short_id}\n",
        f"FROM {BASE}\nCOPY --from={rival_image} /submission/run /stolen\n",
        f"FROM {BASE}\nCOPY --from={short_id[:12]} /submission/run /stolen\n",
        f"ARG IMG={rival_image}\nFROM ${{IMG}}\n",
    ]
    for dockerfile in attempts:
        with pytest.raises(errors.DockerfilePolicy, match="line"):
            new_environment(alice, benchmark, dockerfile)

    assert not Environment.objects.exists()  # nothing accepted, nothing queued
    assert made["tags"] == [] and sent == []
