"""The client on real parts: live server, real Celery workers, the Docker Engine, the kit.

An entrant signs in, builds the starter kit's environment, waits for it with
``env list``, submits the kit's folder, watches it pass and finds themself on the board.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests import factories
from tests.cli.conftest import PASSWORD, Podium, Result
from tests.e2e.conftest import wait_for
from tests.e2e.test_pipeline import COHORT_SIZE, STARTER_KIT

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


def environment_status(result: Result, environment_id: int) -> str:
    for row in result.out.splitlines()[1:]:
        cells = row.split()
        if cells and cells[0] == str(environment_id):
            return cells[2]
    return "missing"


def test_the_starter_kit_goes_from_env_create_to_the_leaderboard(
    celery_workers: None,
    live_server: Any,
    demo: Any,
    podium: Podium,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    factories.UserFactory(username="alice")
    monkeypatch.setenv("PODIUM_PASSWORD", PASSWORD)
    assert podium("login", live_server.url, "--username", "alice").code == 0

    created = podium(
        "env", "create", demo.slug, str(STARTER_KIT / "Dockerfile"), "--name", "starter"
    )
    assert created.code == 0, created.err
    match = re.match(r"Environment (\d+) \(starter\): queued", created.out)
    assert match, created.out
    environment_id = int(match.group(1))

    listed = wait_for(
        lambda: podium("env", "list", demo.slug),
        lambda result: environment_status(result, environment_id) not in ("queued", "building"),
        timeout_s=600,
        interval_s=1,
    )
    assert environment_status(listed, environment_id) == "ready", listed.out
    assert "sha256:" in listed.out

    submitted = podium("submit", demo.slug, "--env", str(environment_id), str(STARTER_KIT))
    assert submitted.code == 0, submitted.err
    match = re.search(r"^Submission (\d+) \(official attempt", submitted.out, re.MULTILINE)
    assert match, submitted.out
    submission_id = int(match.group(1))

    watched = podium("watch", str(submission_id), "--interval", "1")

    assert watched.code == 0, watched.out + watched.err
    statuses = [line.split()[1] for line in watched.out.splitlines() if line[:2].isdigit()]
    assert statuses == [
        "accepted", "building", "queued", "staging", "running", "verifying", "passed",
    ]  # fmt: skip
    assert f"Verdict: passed, {COHORT_SIZE}/{COHORT_SIZE} matches, wall time " in watched.out

    board = podium("leaderboard", demo.slug)
    assert board.code == 0, board.err
    assert board.out.splitlines()[1].split()[:2] == ["1", "alice"]
