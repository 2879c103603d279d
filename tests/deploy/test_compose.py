"""The production compose file is one Docker Compose accepts, with the socket in workers only."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    if probe.returncode == 0:
        return ["docker", "compose"]
    if os.environ.get("REQUIRE_DOCKER") == "1":
        pytest.fail("REQUIRE_DOCKER=1 but no Docker Compose tool is installed")
    pytest.skip("no Docker Compose tool here")


def test_compose_config_is_accepted_and_mounts_the_socket_only_into_workers(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("x")
    result = subprocess.run(
        [*compose_command(), "-f", str(REPO / "compose.yaml"), "config"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env={**os.environ, "PODIUM_SECRET_KEY_FILE": str(secret)},
    )
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert set(services) == {"db", "redis", "web", "builds", "scoring", "beat"}

    def mounts_socket(name: str) -> bool:
        volumes = services[name].get("volumes", [])
        return any("docker.sock" in str(volume) for volume in volumes)

    assert [name for name in services if mounts_socket(name)] == ["builds", "scoring"]
