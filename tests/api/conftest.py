"""API test fixtures: token clients, a recorder instead of the broker, archive builders."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.contests.models import Benchmark
from portal.core import storage
from portal.environments.models import Environment
from portal.estimation.models import Suite
from portal.submissions.intake import submission_accept
from portal.submissions.models import Submission
from tests import factories
from tests.whest import whest_bake


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


# Metered estimation ---------------------------------------------------------------------

ESTIMATOR = """\
import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        return fnp.zeros((mlp.depth, mlp.width))
"""


@pytest.fixture(scope="session")
def baked_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny whestbench dataset (4 MLPs, 8 wide, 2 deep), baked once per test process."""
    return whest_bake(tmp_path_factory.mktemp("whest-dataset") / "dataset")


@pytest.fixture(scope="session")
def whest_tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An estimator packaged by whestbench's own packager (what `whest package` makes)."""
    from whestbench.packaging import package_submission

    folder = tmp_path_factory.mktemp("whest-estimator")
    (folder / "estimator.py").write_text(ESTIMATOR)
    return Path(package_submission(folder / "estimator.py", output_path=folder / "sub.tar.gz"))


def whest_members(files: dict[str, bytes], *, lie: bool = False) -> dict[str, bytes]:
    """``files`` and the manifest ``whest package`` writes for them (with ``lie``, one whose
    SHA-256 of each file is wrong)."""
    manifest = {
        "schema_version": "1.0",
        "api_version": "2.0",
        "entrypoint": {"module": "estimator", "class": "Estimator"},
        "python": {"min_version": "3.11"},
        "files": [
            {"name": name, "sha256": hashlib.sha256(data + (b"x" if lie else b"")).hexdigest()}
            for name, data in files.items()
        ],
    }
    return {**files, "manifest.json": json.dumps(manifest).encode()}


def write_tar(
    path: Path,
    members: dict[str, bytes],
    *,
    mode: str = "w:gz",
    links: dict[str, str] | None = None,
) -> Path:
    with tarfile.open(path, mode) as archive:  # type: ignore[call-overload]
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return path


HOSTILE = ("symlink_out", "51_files", "sha256_mismatch", "zip", "plain_tar")


@pytest.fixture
def hostile_tarball(tmp_path: Path) -> Callable[[str], Path]:
    """An estimator archive that must be refused, of one kind of :data:`HOSTILE`."""

    def make(kind: str) -> Path:
        estimator = {"estimator.py": ESTIMATOR.encode()}
        if kind == "symlink_out":
            return write_tar(
                tmp_path / "escape.tar.gz", whest_members(estimator), links={"out": "../../etc"}
            )
        if kind == "51_files":
            many = {**estimator, **{f"m{i:02d}.py": b"x = 1\n" for i in range(50)}}
            return write_tar(tmp_path / "many.tar.gz", whest_members(many))
        if kind == "sha256_mismatch":
            return write_tar(tmp_path / "lie.tar.gz", whest_members(estimator, lie=True))
        if kind == "plain_tar":
            return write_tar(tmp_path / "plain.tar", whest_members(estimator), mode="w")
        assert kind == "zip"
        path = tmp_path / "estimator.zip"
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in whest_members(estimator).items():
                archive.writestr(name, data)
        return path

    return make


@pytest.fixture
def phase(db: Any, baked_dataset: Path) -> Benchmark:
    """An open estimation phase whose phase suite is ready (a row) and whose public suite
    is the baked dataset, copied where the portal keeps suites."""
    benchmark = factories.PhaseRulesFactory().benchmark
    factories.SuiteFactory(benchmark=benchmark, role=Suite.PHASE)
    public = factories.SuiteFactory(benchmark=benchmark, role=Suite.PUBLIC)
    shutil.copytree(baked_dataset, storage.suite_dir(public.pk))
    return benchmark


@pytest.fixture
def enter() -> Callable[..., Any]:
    """POST an estimator archive the way a client does (multipart ``archive``)."""

    def post(client: APIClient, benchmark: Any, path: Path, **extra: Any) -> Any:
        url = f"/api/v1/benchmarks/{benchmark.slug}/estimation/entries/"
        with path.open("rb") as handle:
            return client.post(url, {"archive": handle, **extra}, format="multipart")

    return post
