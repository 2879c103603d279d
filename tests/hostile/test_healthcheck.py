"""An image's HEALTHCHECK: commands the engine would run in the scored container itself.

A health check runs beside PID 1, outside the supervisor's process tree and its seccomp
filter: it could renice or re-limit the supervisor and do work off the clock. Podium
turns health checks off for every container that runs entrant code (scored runs and
build.sh).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from scoring import engine
from scoring.build import builds
from tests.hostile.conftest import SECOND, Hostile, script

NO_HEALTHCHECK = {"test": ["NONE"]}

# The check would renice PID 1 and leave a mark in /tmp, every second from the start.
HEALTH_MARK = "/tmp/health-check-ran"
IMAGE_CONFIG = {
    "declares_a_healthcheck": {
        "Healthcheck": {
            "Test": ["CMD-SHELL", f"renice -n 19 -p 1; touch {HEALTH_MARK}"],
            "Interval": SECOND,
            "Timeout": SECOND,
            "Retries": 1,
        }
    }
}
SCRIPTS = {
    # Waits three seconds (three health checks' worth) for the mark, then answers.
    "declares_a_healthcheck": script(
        f"""
        i=0; while [ $i -lt 30 ] && [ ! -e {HEALTH_MARK} ]; do sleep 0.1; i=$((i+1)); done
        [ -e {HEALTH_MARK} ] && echo "health check: ran" || echo "health check: never ran"
        echo "pid1 nice: $(cut -d' ' -f19 /proc/1/stat)"
        exec answer
        """
    ),
}


@pytest.mark.docker
def test_an_images_healthcheck_never_runs_in_a_scored_container(
    hostile: Hostile, monkeypatch
) -> None:
    seen: dict[str, dict[str, Any]] = {}
    remove = engine.remove_container

    def inspect_then_remove(container_id: str, *args: Any, **kwargs: Any) -> None:
        seen.setdefault(container_id, engine.client().api.inspect_container(container_id))
        remove(container_id, *args, **kwargs)

    monkeypatch.setattr(engine, "remove_container", inspect_then_remove)

    outcome = hostile.score("declares_a_healthcheck")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw("health check: never ran", "pid1 nice: 0")
    assert outcome.wall_s >= 3  # it did wait for three checks' worth
    inspected = seen[outcome.run.container_id]
    assert "Health" not in inspected["State"]  # the engine never ran (or planned) a check
    assert inspected["Config"]["Healthcheck"]["Test"] == ["NONE"]  # the image's, switched off


def test_build_sh_containers_run_no_healthcheck(monkeypatch, tmp_path: Path) -> None:
    """The build.sh container runs the environment image, which may declare a check too."""
    created: list[dict[str, Any]] = []

    class Stop(Exception):
        pass

    def create_container(**spec: Any) -> str:
        created.append(spec)
        raise Stop

    @contextlib.contextmanager
    def sandbox(**_kwargs: Any) -> Iterator[SimpleNamespace]:
        # The box creates the build's containers (with its bounds and disk quota).
        yield SimpleNamespace(
            bounds=engine.BuildBounds("podium-build", "/podium", 1, 1, 1.0),
            create_container=create_container,
        )

    monkeypatch.setattr(builds.buildbox, "sandbox", sandbox)
    monkeypatch.setattr(builds.machine, "scoring_host", lambda: "host-a")
    submission = SimpleNamespace(
        pk=7,
        benchmark=SimpleNamespace(build_timeout_s=60, max_image_bytes=1 << 30),
        environment=SimpleNamespace(image_tag="podium-entrant/env-1:abc"),
    )

    with pytest.raises(Stop):
        builds._build_submission_image(submission, tmp_path, SimpleNamespace(write=print))

    [spec] = created
    assert spec["command"][-1] == builds.BUILD_SCRIPT
    assert spec["healthcheck"] == NO_HEALTHCHECK
