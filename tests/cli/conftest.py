"""CLI tests: ``podium_cli.main.main([...])`` in this process against the live server.

Tasks the site enqueues are only recorded (no worker runs), except in the end-to-end
test, which starts the real workers (``celery_workers``, shared with tests/e2e).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache

from podium_cli import config
from podium_cli.main import main
from portal.accounts.models import ApiToken
from tests.api.conftest import (  # noqa: F401
    baked_dataset,
    hostile_tarball,
    phase,
    ready_environment,
    whest_tarball,
)
from tests.e2e.conftest import celery_workers, worker_env  # noqa: F401
from tests.e2e.test_pipeline import demo  # noqa: F401

PASSWORD = "correct horse battery"  # tests.factories.UserFactory's


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


Podium = Callable[..., Result]


@pytest.fixture(autouse=True)
def _fast_and_fresh(settings: Any) -> None:
    """Cheap password hashing, and no throttle history carried between tests."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache.clear()


@pytest.fixture(autouse=True)
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The client's config folder, private to each test; no overrides from the caller's shell."""
    folder = tmp_path / "podium-config"
    monkeypatch.setenv("PODIUM_CONFIG_DIR", str(folder))
    for name in ("PODIUM_URL", "PODIUM_TOKEN", "PODIUM_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    return folder


@pytest.fixture
def server(live_server: Any, sent: list[tuple[str, tuple[Any, ...]]]) -> str:
    """The live server's address, with the broker replaced by a recorder."""
    return str(live_server.url)


@pytest.fixture
def podium(capsys: pytest.CaptureFixture[str]) -> Podium:
    """Run ``podium ARGS...`` in this process; its exit code and what it printed."""

    def run(*argv: str) -> Result:
        capsys.readouterr()
        code = main(list(argv))
        captured = capsys.readouterr()
        return Result(code=code, out=captured.out, err=captured.err)

    return run


@pytest.fixture
def sign_in(server: str) -> Callable[[Any], str]:
    """Store a config holding a fresh token of ``user`` (``podium login`` has its own tests)."""

    def store(user: Any) -> str:
        token = ApiToken.objects.create(user=user, label="tests")
        config.save(config.Settings(url=server, token=token.key))
        return token.key

    return store


@pytest.fixture
def kit(tmp_path: Path) -> Path:
    """A submission folder: executable ``build.sh`` and ``run``, a plain file in a subfolder."""
    folder = tmp_path / "kit"
    (folder / "model").mkdir(parents=True)
    (folder / "build.sh").write_text("#!/bin/sh\necho building\n")
    (folder / "run").write_text("#!/bin/sh\nexit 0\n")
    (folder / "model" / "weights.txt").write_text("0.5\n")
    (folder / ".settings").write_text("hidden files are packed too\n")
    (folder / "build.sh").chmod(0o755)
    (folder / "run").chmod(0o755)
    (folder / "model" / "weights.txt").chmod(0o644)
    return folder


def tar_members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        return {member.name: member for member in archive.getmembers()}
