"""No build cache shared between entrants, on the real Docker Engine with real rows.

Docker's classic builder answers "Using cache" for a step it has run before on the same
parent image; if two entrants' builds shared that cache, one could write lines another
might have written and learn from "Using cache" which they had built. Podium puts the
owner's cache label after every FROM, so only the owner's own rebuilds are cached.

Every test sets a fresh ``SECRET_KEY`` (the salt's key), so no earlier run of these tests,
whose images other runs may still hold, can warm the cache for this one.
"""

from __future__ import annotations

import json
import platform
import re
import uuid
from typing import Any

import pytest

from podium_policy.dockerfile_policy import build_cache_salt
from portal.core import storage
from portal.environments.models import Environment
from portal.environments.services import environment_create
from scoring import engine
from scoring.build import builds

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]

BASE = "localhost/podium/busybox:1"
DOCKERFILE = f"FROM {BASE}\nRUN echo a > /a\n"
_STEP = re.compile(r"^Step \d+/\d+ : ", re.MULTILINE)


@pytest.fixture
def key(settings: Any) -> str:
    settings.SECRET_KEY = f"cache-isolation-{uuid.uuid4().hex}"
    return str(settings.SECRET_KEY)


def build(owner: Any, benchmark: Any, dockerfile: str) -> tuple[Environment, str]:
    """The environment built through the real build path, and its build log."""
    environment = environment_create(
        owner=owner,
        benchmark=benchmark,
        name=f"env-{uuid.uuid4().hex[:6]}",
        dockerfile_text=dockerfile,
    )
    builds.build_environment(environment.pk)
    environment.refresh_from_db()
    assert environment.status == Environment.READY, environment.failure_reason
    return environment, (storage.environment_dir(environment.pk) / "build.log").read_text()


def step_output(log: str, instruction: str) -> str:
    """What the build log says under the (only) step running ``instruction``."""
    steps = [chunk for chunk in _STEP.split(log) if chunk.startswith(instruction + "\n")]
    assert len(steps) == 1, log
    return steps[0]


def image_config(tag: str) -> dict[str, Any]:
    config: dict[str, Any] = engine.client().api.inspect_image(tag)["Config"]
    return config


def test_a_second_entrant_never_hits_the_first_entrants_cache(
    alice, bob, benchmark, sent, made, key
) -> None:
    first, first_log = build(alice, benchmark, DOCKERFILE)
    second, second_log = build(bob, benchmark, DOCKERFILE)

    assert "Using cache" not in step_output(first_log, "RUN echo a > /a")
    assert "Using cache" not in step_output(second_log, "RUN echo a > /a")
    assert second.image_digest != first.image_digest


def test_the_same_entrant_rebuilding_hits_their_own_cache(
    alice, bob, benchmark, sent, made, key
) -> None:
    first, _ = build(alice, benchmark, DOCKERFILE)
    build(bob, benchmark, DOCKERFILE)  # someone else's build in between changes nothing
    again, again_log = build(alice, benchmark, DOCKERFILE)

    assert "Using cache" in step_output(again_log, "RUN echo a > /a")
    assert again.image_digest == first.image_digest


def test_the_entrant_sees_a_label_that_names_no_one(alice, benchmark, sent, made, key) -> None:
    environment, log = build(alice, benchmark, DOCKERFILE)

    salt = build_cache_salt(key, alice.pk)
    assert re.search(rf'^Step 2/\d+ : LABEL podium\.cache="{salt}"$', log, re.MULTILINE), log
    config = image_config(environment.image_tag)
    assert config["Labels"]["podium.cache"] == salt
    assert "alice" not in json.dumps(config)
    # And no build step is handed a GPU: the NVIDIA runtime reads this and hands none.
    assert re.search(r"^Step 3/\d+ : ENV NVIDIA_VISIBLE_DEVICES=void$", log, re.MULTILINE), log
    assert "NVIDIA_VISIBLE_DEVICES=void" in config["Env"]


def test_every_stage_of_a_multi_stage_file_gets_the_label_and_builds(
    alice, benchmark, sent, made, key
) -> None:
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    dockerfile = (
        "# escape=\\\n"
        "# comments and an ARG before the first FROM\n"
        f"ARG BASE={BASE}\n"
        f"from --platform=linux/{arch} ${{BASE}} \\\n"
        "  # a comment inside the FROM line\n"
        "  AS build\n"
        "RUN echo built > /out\n"
        "From build AS again\n"
        "RUN cat /out\n"
        "FROM ${BASE}\n"
        "COPY --from=again /out /out\n"
    )
    environment, log = build(alice, benchmark, dockerfile)

    salt = build_cache_salt(key, alice.pk)
    assert log.count(f'LABEL podium.cache="{salt}"') == 3
    assert image_config(environment.image_tag)["Labels"]["podium.cache"] == salt
