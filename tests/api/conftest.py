"""API test fixtures: token clients, a recorder instead of the broker, archive builders."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.environments.models import Environment
from portal.submissions.intake import submission_accept
from portal.submissions.models import Submission
from tests import factories


@pytest.fixture(autouse=True)
def _fast_and_fresh(settings: Any) -> None:
    """Cheap password hashing, and no throttle history carried between tests."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache.clear()


@pytest.fixture(autouse=True)
def sent(sent: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[str, tuple[Any, ...]]]:
    """No API test reaches a broker: the shared recorder, for every test here."""
    return sent


@pytest.fixture
def client_for(db: Any) -> Callable[[Any], APIClient]:
    """An API client authenticated with a fresh personal token of ``user``."""

    def make(user: Any) -> APIClient:
        token = ApiToken.objects.create(user=user, label="tests")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return make


@pytest.fixture
def anon() -> APIClient:
    return APIClient()


@pytest.fixture
def make_archive(tmp_path: Path) -> Callable[..., Path]:
    """Build a .tar.gz (by default a valid submission: executable ``run`` and ``build.sh``)."""
    counter = iter(range(1_000_000))

    def make(
        members: dict[str, tuple[bytes, int]] | None = None, name: str = "source.tar.gz"
    ) -> Path:
        if members is None:
            members = {
                "run": (b"#!/bin/sh\nexit 0\n", 0o755),
                "build.sh": (b"#!/bin/sh\ntrue\n", 0o644),
            }
        folder = tmp_path / f"archive-{next(counter)}"
        folder.mkdir()
        path = folder / name
        with tarfile.open(path, "w:gz") as archive:
            for member, (data, mode) in members.items():
                info = tarfile.TarInfo(member)
                info.size, info.mode = len(data), mode
                archive.addfile(info, io.BytesIO(data))
        return path

    return make


@pytest.fixture
def ready_environment(db: Any) -> Callable[..., Environment]:
    """A ready environment of ``owner`` on ``benchmark``, which has both its cohorts."""

    def make(owner: Any, benchmark: Any, **fields: Any) -> Environment:
        fields.setdefault("image_digest", "sha256:" + "e" * 64)
        factories.cohorts(benchmark)
        return factories.EnvironmentFactory(owner=owner, benchmark=benchmark, **fields)

    return make


@pytest.fixture
def accepted(make_archive: Callable[..., Path]) -> Callable[..., Submission]:
    """A submission accepted through the service (charged), as an upload would be."""

    def make(entrant: Any, environment: Environment, kind: str = Submission.OFFICIAL) -> Submission:
        factories.cohorts(environment.benchmark)
        return submission_accept(
            entrant=entrant,
            benchmark=environment.benchmark,
            environment=environment,
            source_file=make_archive(),
            source_name="source.tar.gz",
            kind=kind,
        )

    return make


@pytest.fixture
def upload() -> Callable[..., Any]:
    """POST a submission the way a client does (multipart)."""

    def post(
        client: APIClient, benchmark: Any, environment_id: int, path: Path | None, **extra: Any
    ) -> Any:
        data: dict[str, Any] = {"environment": environment_id, **extra}
        url = f"/api/v1/benchmarks/{benchmark.slug}/submissions/"
        if path is None:
            return client.post(url, data, format="multipart")
        with path.open("rb") as handle:
            return client.post(url, {**data, "source": handle}, format="multipart")

    return post
