"""``podium run --local`` on the real Docker Engine against a live server, next to the
portal's own practice runs of the same entries (real Celery workers).

The starter kit passes locally with every practice answer matched and a wall time; and
three hostile entries (one that needs the network, one that writes outside its output,
one that must run as root) fail locally with the very reason the portal gives their
practice submissions. Images are built without the default bridge (``--build-network
none``): another test removes docker0.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from portal.contests.cohorts import cohort_import
from portal.contests.democohort import generate
from tests import factories
from tests.cli.conftest import PASSWORD, Podium, Result
from tests.cli.test_end_to_end import environment_status
from tests.e2e.conftest import wait_for
from tests.e2e.test_pipeline import STARTER_KIT

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

PRACTICE = 12
HOSTILE = {
    # Sockets other than AF_UNIX are refused in the sandbox (and there is no network).
    "network": "exec python3 -c \"import socket; socket.create_connection(('192.0.2.1', 80))\"\n",
    # The root filesystem is read-only: only /tmp and the output's folder are writable.
    "writes-outside": "echo hello > /submission/written || exit 5\n",
    # The scored user is never root.
    "root": '[ "$(id -u)" = 0 ] || { echo "uid $(id -u), not root" >&2; exit 4; }\n',
}


@pytest.fixture
def ladder(transactional_db: Any, data_dir: Path, tmp_path: Path) -> Any:
    """An open benchmark with a generated practice cohort."""
    now = timezone.now()
    benchmark = factories.BenchmarkFactory(
        slug="ladder",
        opens_at=now - dt.timedelta(minutes=1),
        closes_at=now + dt.timedelta(days=1),
        cohort_size=PRACTICE,
        pass_min_matches=PRACTICE - 1,
        practice_per_day=10,
        build_timeout_s=300,
        score_timeout_s=60,
    )
    images = tmp_path / "practice"
    answers = generate(images, PRACTICE, seed=11)
    cohort_import(benchmark=benchmark, kind="practice", images_dir=images, answers=answers)
    return benchmark


def hostile_entry(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(STARTER_KIT, folder)
    (folder / "run").write_text("#!/bin/sh\n" + HOSTILE[name])
    (folder / "run").chmod(0o755)
    return folder


def reason(result: Result) -> str:
    match = re.search(r"^Reason: (.*)$", result.out, re.MULTILINE)
    assert match, result.out + result.err
    return match.group(1)


def run_local(podium: Podium, slug: str, folder: Path) -> Result:
    return podium("run", "--local", slug, str(folder), "--build-network", "none")


def test_local_runs_agree_with_the_portals_practice_runs(
    celery_workers: None, live_server: Any, ladder: Any, podium: Podium,
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:  # fmt: skip
    factories.UserFactory(username="alice")
    monkeypatch.setenv("PODIUM_PASSWORD", PASSWORD)
    assert podium("login", live_server.url, "--username", "alice").code == 0

    good = run_local(podium, ladder.slug, STARTER_KIT)

    assert good.code == 0, good.out + good.err
    verdict = re.search(r"Verdict: passed, (\d+)/(\d+) matches, wall time ([\d.]+) ms", good.out)
    assert verdict, good.out
    assert verdict.group(1) == verdict.group(2) == str(PRACTICE)
    assert float(verdict.group(3)) > 0
    assert "build.sh: ready" not in good.err  # the build's log went to the terminal
    assert "Where this machine differs from a scoring host:" in good.out

    local = {
        name: run_local(podium, ladder.slug, hostile_entry(tmp_path, name)) for name in HOSTILE
    }
    for name, result in local.items():
        assert result.code == 1, (name, result.out, result.err)
        assert "Verdict: errored" in result.out, (name, result.out)
    assert "uid 65534, not root" in local["root"].out

    created = podium("env", "create", ladder.slug, str(STARTER_KIT / "Dockerfile"), "--name", "kit")
    environment = re.match(r"Environment (\d+)", created.out)
    assert environment, created.out + created.err
    wait_for(
        lambda: podium("env", "list", ladder.slug),
        lambda listed: (
            environment_status(listed, int(environment.group(1))) not in ("queued", "building")
        ),
        timeout_s=600,
        interval_s=1,
    )
    for name, result in local.items():
        submitted = podium(
            "submit", ladder.slug, "--env", environment.group(1), "--practice",
            str(hostile_entry(tmp_path / "portal", name)),
        )  # fmt: skip
        submission = re.search(r"^Submission (\d+)", submitted.out, re.MULTILINE)
        assert submission, submitted.out + submitted.err
        watched = podium("watch", submission.group(1), "--interval", "1", "--no-logs")
        assert "Verdict: errored" in watched.out, (name, watched.out)
        assert reason(watched) == reason(result), name
