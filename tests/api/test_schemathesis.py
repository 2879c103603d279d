"""Every operation of the live OpenAPI schema, called with generated data (Schemathesis).

The schema is the one ``/api/schema/`` serves through the WSGI app. Each operation runs as
alice (a token header), whose benchmark, environment and submission (with a build log and
a run log) exist, so path parameters name real objects: a generated id or slug is replaced
by a real one. Every response must be a non-5xx answer that the schema documents: status
code, content type, headers and body. Tasks go to the ``sent`` recorder, never a broker.
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from django.urls import resolve
from hypothesis import HealthCheck, settings

from portal.accounts.models import ApiToken
from portal.api.common import IsStaff
from portal.contests.models import Cohort, CohortItem
from portal.core import storage
from portal.submissions.intake import submission_accept
from portal.submissions.models import Run, Submission
from portal.wsgi import application
from tests import factories

CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {
            "deterministic": True,
            "max-examples": 25,
            # Unknown query parameters are ignored, as Django and DRF do everywhere.
            "allow-extra-parameters": False,
        },
        "checks": {
            # 400 is also the contract's answer to well-formed requests that break a rule
            # no schema can express (dockerfile_policy, invalid_archive, a rebuild of a
            # ready environment): those are refusals, not server errors.
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "400", "401", "404", "409", "413", "429"]
            },
        },
    }
)
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application, config=CONFIG)


@dataclass
class World:
    token: str
    staff_token: str
    slug: str
    environment_id: int
    submission_id: int
    token_id: int


def _source_archive(folder: Any) -> Any:
    path = folder / "source.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, data, mode in [
            ("run", b"#!/bin/sh\nexit 0\n", 0o755),
            ("build.sh", b"#!/bin/sh\ntrue\n", 0o644),
        ]:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(autouse=True)
def _keep_the_test_connection() -> Iterator[None]:
    """Requests go straight to the WSGI app, which closes the database connection after each
    one (and with it the test's transaction); Django's own test client avoids that the same way.
    """
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def world(settings: Any, alice: Any, staff: Any, benchmark: Any, tmp_path: Any) -> World:
    """Alice's objects, logs and a practice cohort; generous throttles and build slots so
    the code runs."""
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"tokens": "1000/min", "uploads": "1000/min"},
    }
    benchmark.max_concurrent_builds = 100
    benchmark.save(update_fields=["max_concurrent_builds"])
    environment = factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, image_digest="sha256:" + "e" * 64
    )
    official = Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    submission = submission_accept(
        entrant=alice,
        benchmark=benchmark,
        environment=environment,
        source_file=_source_archive(tmp_path),
        source_name="source.tar.gz",
        kind=Submission.OFFICIAL,
    )
    storage.submission_build_log(submission.pk).write_text("step 1\nstep 2\n")
    run = Run.objects.create(submission=submission, cohort=official, try_number=1)
    storage.ensure_dir(storage.run_dir(run.pk))
    storage.run_log(run.pk).write_text("stdout line\nstderr line\n")
    storage.ensure_dir(storage.environment_dir(environment.pk))
    storage.environment_build_log(environment.pk).write_text("FROM localhost/podium/busybox:1\n")
    practice = Cohort.objects.create(benchmark=benchmark, kind=Cohort.PRACTICE)
    CohortItem.objects.create(
        cohort=practice, position=0, canonical_name="0001.jpg", sha256="0" * 64, reference_class=7
    )
    storage.ensure_dir(storage.cohort_dir(practice.pk)).joinpath("0001.jpg").write_bytes(b"jpg")
    spare = ApiToken.objects.create(user=alice, label="spare")
    token = ApiToken.objects.create(user=alice, label="schemathesis")
    return World(
        token=token.key,
        staff_token=ApiToken.objects.create(user=staff, label="schemathesis").key,
        slug=benchmark.slug,
        environment_id=environment.pk,
        submission_id=submission.pk,
        token_id=spare.pk,
    )


def _aim_at_real_objects(case: schemathesis.Case, world: World) -> None:
    real = {
        "slug": world.slug,
        "environment_id": world.environment_id,
        "submission_id": world.submission_id,
        "token_id": world.token_id,
    }
    parameters = case.path_parameters or {}
    for name, value in parameters.items():
        # A value of the wrong type is a negative case: it must stay wrong.
        if name in real and type(value) is type(real[name]):
            parameters[name] = real[name]
    body = case.body
    if isinstance(body, dict) and type(body.get("environment")) is int:
        body["environment"] = world.environment_id


def _caller_token(case: schemathesis.Case, world: World) -> str:
    """Staff-only operations run as staff (to an entrant they do not exist: the matrix in
    test_authorization checks that); everything else as alice."""
    sample_path = re.sub(r"\{(\w+)\}", lambda m: "x" if m[1] == "slug" else "1", case.path)
    view_class = resolve(sample_path).func.view_class
    return world.staff_token if IsStaff in view_class.permission_classes else world.token


@schema.parametrize()
@settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_answers_as_documented(case: schemathesis.Case, world: World) -> None:
    _aim_at_real_objects(case, world)

    case.call_and_validate(headers={"Authorization": f"Token {_caller_token(case, world)}"})


def _call(world: World, path: str, method: str, **parts: Any) -> Any:
    case = schema[path][method].Case(path_parameters={"slug": world.slug}, **parts)
    return case.call_and_validate(headers={"Authorization": f"Token {world.token}"})


def test_accepted_uploads_answer_as_documented(world: World, tmp_path: Any) -> None:
    """Generated files are never valid Dockerfiles or archives: the 201s, checked here."""
    environment = _call(
        world,
        "/api/v1/benchmarks/{slug}/environments/",
        "POST",
        body={"name": "second", "dockerfile": b"FROM localhost/podium/busybox:1\n"},
        media_type="multipart/form-data",
    )
    submission = _call(
        world,
        "/api/v1/benchmarks/{slug}/submissions/",
        "POST",
        body={
            "environment": world.environment_id,
            "source": _source_archive(tmp_path).read_bytes(),
            "kind": "practice",
        },
        media_type="multipart/form-data",
    )

    assert environment.status_code == 201
    assert submission.status_code == 201
    assert submission.json()["kind"] == "practice"
