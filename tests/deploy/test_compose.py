"""The production compose file is one Docker Compose accepts: every image made locally, a
registry the host's engine reaches on loopback, two scoring hosts, the socket in workers only.

``scripts/compose-check`` (run by CI) brings the same file up and scores the starter kit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKERS = ["builds", "scoring-1", "scoring-2"]


def compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    if probe.returncode == 0:
        return ["docker", "compose"]
    if os.environ.get("REQUIRE_DOCKER") == "1":
        pytest.fail("REQUIRE_DOCKER=1 but no Docker Compose tool is installed")
    pytest.skip("no Docker Compose tool here")


def compose_config(tmp_path: Path, **env: str) -> dict[str, Any]:
    """The services as ``compose config`` resolves them, with ``env`` set."""
    return dict(compose_document(tmp_path, **env)["services"])


def compose_document(tmp_path: Path, **env: str) -> dict[str, Any]:
    """The whole file as ``compose config`` resolves it, with ``env`` set."""
    secret = tmp_path / "secret"
    secret.write_text("x")
    unset = {name: "" for name in os.environ if name.startswith("PODIUM_")}
    result = subprocess.run(
        [*compose_command(), "-f", str(REPO / "compose.yaml"), "config"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env={
            **{key: value for key, value in os.environ.items() if key not in unset},
            "PODIUM_SECRET_KEY_FILE": str(secret),
            **env,
        },
    )
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = yaml.safe_load(result.stdout)
    return document


def published(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(host address, host port, container port) of each published port, whichever form
    the Compose tool prints (v1: "ip:port:port/tcp", v2: a mapping)."""
    found = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            found.append((port["host_ip"], int(port["published"]), int(port["target"])))
        else:
            address, host_port, container_port = str(port).rsplit("/", 1)[0].split(":")
            found.append((address, int(host_port), int(container_port)))
    return found


def mount_sources(service: dict[str, Any]) -> list[str]:
    """The host side of each volume (v1 prints "source:target:mode", v2 a mapping)."""
    return [
        volume["source"] if isinstance(volume, dict) else str(volume).split(":")[0]
        for volume in service.get("volumes", [])
    ]


def mounts_socket(service: dict[str, Any]) -> bool:
    return "/var/run/docker.sock" in mount_sources(service)


def test_compose_config_is_accepted_and_mounts_the_socket_only_into_workers(tmp_path):
    services = compose_config(tmp_path)

    assert set(services) == {
        "db", "redis", "registry", "web", "builds", "scoring-1", "scoring-2", "beat",
    }  # fmt: skip
    assert [name for name in services if mounts_socket(services[name])] == WORKERS
    assert not mounts_socket(services["registry"])


def test_two_scoring_services_take_turns_on_their_machines_one_lock(tmp_path):
    services = compose_config(tmp_path, PODIUM_NAME="east", PODIUM_DATA_DIR="/data/podium")
    scoring = [services["scoring-1"], services["scoring-2"]]

    # One machine, one scoring host and one machine lock: the build worker's too, so builds
    # see a score's lock and wait.
    names = {services[name]["environment"]["PODIUM_HOST_NAME"] for name in WORKERS}
    assert names == {"east"}
    workers = [service["environment"]["PODIUM_WORKER_NAME"] for service in scoring]
    assert workers == ["scoring-1", "scoring-2"]
    # One command for both (Compose prints a shell's "$" escaped as "$$"): the class's queue,
    # a Celery node name of each service's own.
    commands = [service["command"].replace("$$", "$") for service in scoring]
    assert commands[0] == commands[1]
    assert "--queues scoring.${PODIUM_HARDWARE_CLASS:-cpu-$(uname -m)} " in commands[0]
    assert "--hostname ${PODIUM_WORKER_NAME}@${PODIUM_HOST_NAME}" in commands[0]
    # Each host installs the supervisor it bind-mounts on a host path of its own.
    supervisors = [service["environment"]["PODIUM_SUPERVISOR"] for service in scoring]
    assert supervisors == [
        "/data/podium/bin/scoring-1/supervise",
        "/data/podium/bin/scoring-2/supervise",
    ]


def test_the_workers_reach_the_registry_where_the_hosts_engine_does(tmp_path):
    services = compose_config(tmp_path, PODIUM_REGISTRY_PORT="5123", PODIUM_DB_PORT="5433")

    assert published(services["registry"]) == [("127.0.0.1", 5123, 5000)]
    for name in WORKERS:
        worker = services[name]
        # The host's network namespace: its engine and the worker both mean the same
        # registry by 127.0.0.1:5123, and the build worker sees the host's firewall.
        assert worker["network_mode"] == "host"
        assert worker["environment"]["PODIUM_REGISTRY"] == "127.0.0.1:5123"
        assert "@127.0.0.1:5433/" in worker["environment"]["DATABASE_URL"]
    assert services["builds"]["cap_add"] == ["NET_ADMIN"]
    # Its builds' cgroups are made in the host's cgroup filesystem.
    assert "/sys/fs/cgroup" in mount_sources(services["builds"])
    assert "build_network --apply" in services["builds"]["command"]
    for name in ("web", "beat", "registry", "db", "redis"):
        assert "network_mode" not in services[name]
        assert "cap_add" not in services[name]
    # Nothing is published beyond the host's loopback.
    assert {address for service in services.values() for address, _, _ in published(service)} == {
        "127.0.0.1"
    }


def test_no_score_pauses_a_service_of_the_deployment(tmp_path):
    services = compose_config(tmp_path, PODIUM_NAME="east")

    names = {service["container_name"] for service in services.values()}
    assert names == {f"east-{name}" for name in services}
    for service in services.values():
        if "PODIUM_FREEZE_EXEMPT" in service.get("environment", {}):
            assert set(service["environment"]["PODIUM_FREEZE_EXEMPT"].split(",")) == names


def test_every_image_is_a_local_one_and_can_be_swapped(tmp_path):
    services = compose_config(tmp_path)
    assert {service["image"] for service in services.values()} == {
        "localhost/podium/portal:latest",
        "localhost/podium/postgresql:15",
        "localhost/podium/redis:7",
        "localhost/podium/registry:2",
    }
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "ARG PYTHON_IMAGE=localhost/podium/runtime:bookworm" in dockerfile

    swapped = compose_config(tmp_path, PODIUM_POSTGRES_IMAGE="postgres:16")
    assert swapped["db"]["image"] == "postgres:16"


def test_the_portal_image_context_leaves_out_secrets_and_data(tmp_path):
    """What `docker build` of the portal image sends, read with .dockerignore's own rules."""
    from docker.utils.build import exclude_paths

    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    names = (
        "secret_key", ".env", ".env.production", "var/db.sqlite3", "portal/app.py",
        "deploy/wheels/django-5.2-py3-none-any.whl",
    )  # fmt: skip
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")

    sent = exclude_paths(str(tmp_path), patterns)

    assert {"portal/app.py", "deploy/wheels/django-5.2-py3-none-any.whl"} <= sent
    assert not {"secret_key", ".env", ".env.production", "var/db.sqlite3"} & sent


PODIUM_SERVICES = ("web", "builds", "scoring-1", "scoring-2", "beat")


def secret_names(service: dict[str, Any]) -> list[str]:
    """The secrets a service mounts (v1 prints {"source": name}, some tools the bare name)."""
    return [s["source"] if isinstance(s, dict) else str(s) for s in service.get("secrets", [])]


def test_every_podium_service_reads_its_mail_server_from_a_secret_file(tmp_path):
    url_file = tmp_path / "email_url"
    url_file.write_text("smtp://mailer:p%40ss@mail.example.org:587/?tls=True\n")
    document = compose_document(
        tmp_path, PODIUM_EMAIL_URL_FILE=str(url_file), PODIUM_SITE_URL="https://podium.example.org"
    )

    assert document["secrets"]["podium_email_url"]["file"] == str(url_file)
    for name in PODIUM_SERVICES:
        service = document["services"][name]
        assert "podium_email_url" in secret_names(service), name
        environment = service["environment"]
        assert environment["EMAIL_URL_FILE"] == "/run/secrets/podium_email_url", name
        assert environment["PODIUM_SITE_URL"] == "https://podium.example.org", name
        assert "p%40ss" not in str(environment)  # the password stays in the file
    # Without a mail server the secret is empty, and mail is only logged.
    assert compose_document(tmp_path)["secrets"]["podium_email_url"]["file"] == "/dev/null"
