"""Environment builds leave nothing behind, and refuse base images that declare VOLUME.

On the real Docker Engine (the classic builder), FROM the local
``localhost/podium/busybox:1``. Every image a build makes is found afterwards by the
marker its ``RUN`` line echoes (image history keeps each step's command), so other
test runs sharing the engine neither hide a leftover nor pass for one.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import docker.errors
import pytest

from portal.core import storage
from portal.environments.models import Environment
from scoring import engine
from scoring.build import builds
from tests.scoring.images import build_dockerfile
from tests.scoring.test_builds import new_environment

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]

BASE = "localhost/podium/busybox:1"
STEP_IMAGE = re.compile(r"^ ---> ([0-9a-f]{12})$", re.M)


def images_with(marker: str) -> set[str]:
    """Every image (named or not) one of whose steps ran a command naming ``marker``."""
    found = set()
    for image in engine.client().api.images(all=True):
        if any(marker in str(step.get("CreatedBy") or "") for step in history(image["Id"])):
            found.add(str(image["Id"]))
    return found


def history(image_id: str) -> list[dict[str, object]]:
    """The image's steps; none for one another run removed meanwhile."""
    try:
        return list(engine.client().api.history(image_id))
    except docker.errors.NotFound:
        return []


def chain(ref: str) -> set[str]:
    """``ref``'s image and every parent image the engine keeps for it."""
    ids = set()
    current = engine.image_info(ref).id
    while current:
        ids.add(current)
        current = str(engine.client().api.inspect_image(current).get("Parent") or "")
    return ids


def build_log(environment: Environment) -> str:
    return (storage.environment_dir(environment.pk) / "build.log").read_text()


@pytest.fixture
def volumed() -> Iterator[str]:
    """A base image under the benchmark's allowed prefix that declares ``VOLUME /data``."""
    tag = f"localhost/podium/volumed-{uuid.uuid4().hex[:8]}:1"
    build_dockerfile(tag, f"FROM {BASE}\nVOLUME /data\n")
    assert engine.image_volumes(tag) == ["/data"]
    yield tag
    engine.remove_image(tag)


# Nothing left behind -------------------------------------------------------------------


def build_after_a_committed_step(alice: Any, benchmark: Any, last_step: str) -> tuple[Any, str]:
    """Build an environment whose first step writes 32 MiB and is committed, then runs
    ``last_step``; the environment (refreshed) and the marker its first step printed."""
    marker = f"leftover-{uuid.uuid4().hex}"
    environment = new_environment(
        alice,
        benchmark,
        f"FROM {BASE}\nRUN dd if=/dev/zero of=/f bs=1M count=32 && echo {marker}\n{last_step}\n",
    )
    builds.build_environment(environment.pk)
    environment.refresh_from_db()
    return environment, marker


def test_a_failed_build_leaves_no_image_of_its_steps(alice, benchmark, sent, made):
    environment, marker = build_after_a_committed_step(alice, benchmark, "RUN false")

    assert environment.status == Environment.FAILED
    assert "returned a non-zero code: 1" in environment.failure_reason
    log = build_log(environment)
    assert marker in log  # the 32 MiB step ran and was committed...
    committed = STEP_IMAGE.findall(log.split(marker, 1)[1])
    assert committed, log
    assert not any(engine.image_exists(image) for image in committed)  # ...and is gone
    assert images_with(marker) == set()
    assert engine.image_exists(BASE)  # the base image stays


def test_a_build_past_the_cap_leaves_no_image_of_its_steps(alice, benchmark, sent, made):
    benchmark.build_timeout_s = 8
    benchmark.save(update_fields=["build_timeout_s"])

    environment, marker = build_after_a_committed_step(alice, benchmark, "RUN sleep 60")

    assert environment.status == Environment.TIMED_OUT
    log = build_log(environment)
    assert STEP_IMAGE.findall(log.split(marker, 1)[1]), log  # the 32 MiB step was committed
    assert images_with(marker) == set()


def test_a_successful_build_keeps_exactly_its_tagged_image(alice, benchmark, sent, made):
    kept, dropped = f"kept-{uuid.uuid4().hex}", f"dropped-{uuid.uuid4().hex}"
    environment = new_environment(
        alice,
        benchmark,
        f"FROM {BASE} AS scratchpad\nRUN dd if=/dev/zero of=/f bs=1M count=32 && echo {dropped}\n"
        f"FROM {BASE}\nRUN echo {kept} > /kept\n",
    )

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.READY, environment.failure_reason
    assert engine.image_info(environment.image_tag).id == environment.image_digest
    # The first stage's 32 MiB image is no parent of the result: removed.
    assert images_with(dropped) == set()
    # What holds the marker is the tagged image and the parents it is made of, nothing else.
    assert environment.image_digest in images_with(kept)
    assert images_with(kept) <= chain(environment.image_tag)


# VOLUME refused ------------------------------------------------------------------------


def test_a_base_image_that_declares_volume_is_refused_before_building(
    alice, benchmark, sent, made, volumed
):
    marker = f"volume-{uuid.uuid4().hex}"
    environment = new_environment(
        alice, benchmark, f"FROM {volumed}\nRUN echo {marker} > /data/x\n"
    )

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.FAILED
    assert environment.failure_reason == (
        f"The base image {volumed} declares VOLUME (/data): files written to a volume "
        "escape the build's disk cap and the scored run's read-only root, so it cannot "
        "be built on; use a base image without volumes."
    )
    assert environment.failure_reason in build_log(environment)
    assert made["tags"] == [volumed]  # the fixture's own build: nothing of the Dockerfile ran
    assert images_with(marker) == set()


def test_a_volume_in_an_earlier_stage_base_is_refused_too(alice, benchmark, sent, made, volumed):
    environment = new_environment(
        alice, benchmark, f"FROM {volumed} AS tools\nRUN true\nFROM {BASE}\nRUN true\n"
    )

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.FAILED
    assert environment.failure_reason.startswith(f"The base image {volumed} declares VOLUME")
    assert made["tags"] == [volumed]


def test_a_missing_base_image_fails_with_a_sentence(alice, benchmark, sent, made):
    missing = f"localhost/podium/missing-{uuid.uuid4().hex[:8]}:1"
    environment = new_environment(alice, benchmark, f"FROM {missing}\nRUN true\n")

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.FAILED
    assert environment.failure_reason
    assert made["tags"] == []  # refused before the build: nothing ran
