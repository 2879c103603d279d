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


def test_the_portal_image_context_leaves_out_secrets_and_data(tmp_path):
    """What `docker build` of the portal image sends, read with .dockerignore's own rules."""
    from docker.utils.build import exclude_paths

    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for name in ("secret_key", ".env", ".env.production", "var/db.sqlite3", "portal/app.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")

    sent = exclude_paths(str(tmp_path), patterns)

    assert "portal/app.py" in sent
    assert not {"secret_key", ".env", ".env.production", "var/db.sqlite3"} & sent
