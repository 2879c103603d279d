"""The whole pipeline on real parts, driven the way an entrant's REST client drives it.

Real HTTP (live server), real Celery worker processes on the builds and scoring queues,
the real Docker Engine, the real supervisor and the real starter kit on a tiny demo
cohort; verdict mail through a real SMTP server.
"""

from __future__ import annotations

import datetime as dt
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.utils import timezone

from podium_cli.watch import FINAL
from portal.contests.cohorts import cohort_import
from portal.contests.democohort import generate
from portal.contests.models import CohortItem
from tests import factories, smtp
from tests.e2e.conftest import REPO, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

STARTER_KIT = REPO / "examples" / "starter-kit"
COHORT_SIZE = 24
SITE = "https://podium.example.org"


def starter_kit_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(STARTER_KIT.iterdir()):
            tar.add(path, arcname=path.name)
    return buffer.getvalue()


def archive(files: dict[str, tuple[str, int]]) -> bytes:
    """A .tar.gz with ``{name: (text, mode)}`` at its top level."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, (text, mode) in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class Entrant:
    """A REST client holding a token, as an entrant's script would."""

    def __init__(self, base_url: str, username: str, password: str) -> None:
        self.base = base_url + "/api/v1"
        response = requests.post(
            f"{self.base}/tokens/", data={"username": username, "password": password}, timeout=30
        )
        assert response.status_code == 201, response.text
        self.headers = {"Authorization": f"Token {response.json()['token']}"}

    def get(self, path: str, **kw: Any) -> requests.Response:
        return requests.get(self.base + path, headers=self.headers, timeout=30, **kw)

    def post(self, path: str, **kw: Any) -> requests.Response:
        return requests.post(self.base + path, headers=self.headers, timeout=60, **kw)

    def create_environment(self, slug: str, name: str, dockerfile: bytes) -> dict[str, Any]:
        response = self.post(
            f"/benchmarks/{slug}/environments/",
            data={"name": name},
            files={"dockerfile": ("Dockerfile", dockerfile)},
        )
        assert response.status_code == 201, response.text
        return response.json()

    def wait_environment(self, env_id: int, timeout_s: float = 600) -> dict[str, Any]:
        return wait_for(
            lambda: self.get(f"/environments/{env_id}/").json(),
            lambda env: env["status"] not in ("queued", "building"),
            timeout_s,
        )

    def submit(self, slug: str, env_id: int, source: bytes, kind: str = "official") -> int:
        response = self.post(
            f"/benchmarks/{slug}/submissions/",
            data={"environment": env_id, "kind": kind},
            files={"source": ("source.tar.gz", source)},
        )
        assert response.status_code == 201, response.text
        return int(response.json()["id"])

    def wait_submission(self, sub_id: int, timeout_s: float = 600) -> dict[str, Any]:
        return wait_for(
            lambda: self.get(f"/submissions/{sub_id}/").json(),
            lambda sub: sub["status"] in FINAL,
            timeout_s,
        )


@pytest.fixture
def collector() -> Iterator[smtp.Collector]:
    with smtp.smtp_server() as server:
        yield server


@pytest.fixture
def worker_env(collector: smtp.Collector) -> dict[str, str]:
    """The workers mail verdicts to the SMTP server started here."""
    return {"EMAIL_URL": f"smtp://127.0.0.1:{collector.port}", "PODIUM_SITE_URL": SITE}


@pytest.fixture
def demo(transactional_db, data_dir: Path, tmp_path: Path):
    """An open benchmark with a tiny generated official cohort."""
    now = timezone.now()
    benchmark = factories.BenchmarkFactory(
        slug="demo-e2e",
        opens_at=now - dt.timedelta(minutes=1),
        closes_at=now + dt.timedelta(days=1),
        cohort_size=COHORT_SIZE,
        pass_min_matches=COHORT_SIZE - 1,
        attempts_per_day=10,
        build_timeout_s=300,
        score_timeout_s=120,
        # Every new best is verified before it ranks; the tolerance is wide because a
        # 24-image run on a busy test machine is noisy (the rule's decisions are tested
        # in tests/submissions/test_verification.py).
        verify_top=20,
        verify_tolerance_pct=1000,
    )
    images = tmp_path / "cohort"
    answers = generate(images, COHORT_SIZE, seed=7)
    cohort_import(benchmark=benchmark, kind="official", images_dir=images, answers=answers)
    return benchmark


def test_starter_kit_goes_from_upload_to_the_leaderboard(
    celery_workers, live_server, demo, collector
):
    factories.UserFactory(username="alice")
    alice = Entrant(live_server.url, "alice", "correct horse battery")

    env = alice.create_environment(demo.slug, "starter", (STARTER_KIT / "Dockerfile").read_bytes())
    env = alice.wait_environment(env["id"])
    assert env["status"] == "ready", env
    assert env["image_digest"].startswith("sha256:")
    assert [event["status"] for event in env["timeline"]] == ["queued", "building", "ready"]
    log = alice.get(f"/environments/{env['id']}/build-log", params={"tail": 50})
    assert log.status_code == 200 and log.text.strip()

    sub_id = alice.submit(demo.slug, env["id"], starter_kit_archive())
    sub = alice.wait_submission(sub_id)

    assert sub["status"] == "passed", sub
    assert [event["status"] for event in sub["timeline"]] == [
        "accepted",
        "building",
        "queued",
        "staging",
        "running",
        "verifying",
        "passed",
    ]
    # The first passing run is a new best in the top 20: it ranked only once one more
    # run, shuffled and rewritten, confirmed it.
    verification = sub["verification"]
    assert verification["status"] == "finished" and verification["passed"], verification
    assert verification["matches"] == COHORT_SIZE
    assert sub["runs"] == 2
    # The meter's readings of the scored run.
    resources = sub["resources"]
    assert resources["cpu_user_s"] + resources["cpu_system_s"] > 0, resources
    assert resources["memory_peak_bytes"] > 1 << 20, resources
    assert resources["oom_events"] == 0, resources
    assert sub["matches"] == sub["total"] == COHORT_SIZE
    assert sub["wall_time_ns"] > 0
    host_start, host_end = sub["host_interval_ns"]
    trusted_start, trusted_end = sub["trusted_interval_ns"]
    assert host_start <= trusted_start <= trusted_end <= host_end
    assert trusted_end - trusted_start == sub["wall_time_ns"]
    digests = sub["digests"]
    for name in ("source", "environment_image", "submission_image", "output"):
        assert digests[name].startswith("sha256:"), (name, digests)
    assert digests["environment_image"] == env["image_digest"]
    assert sub["attempt"] == {"charged": True, "refunded": False}

    board = requests.get(f"{alice.base}/benchmarks/{demo.slug}/leaderboard/", timeout=30).json()
    assert [(row["rank"], row["entrant"], row["submission_id"]) for row in board["rows"]] == [
        (1, "alice", sub_id)
    ]
    assert board["rows"][0]["wall_time_ns"] == sub["wall_time_ns"]
    assert board["rows"][0]["cpu_per_wall"] > 0
    assert board["verifying"] == []
    # The verdict mail, queued by the scoring worker and sent by the build worker.
    ((recipients, message),) = wait_for(lambda: list(collector.messages), bool, 60)
    assert recipients == ["alice@example.com"]
    assert message["Subject"] == f"[Podium] {demo.slug}: submission {sub_id} passed"
    assert f"{SITE}/submissions/{sub_id}/" in message.get_content()

    # The replay: an archive that writes back the answers in the cohort's order of
    # positions fails: every run sees the images in a fresh random order. It never
    # ranks; the attempt counts.
    replay_id = alice.submit(demo.slug, env["id"], replay_archive(demo))
    replay = alice.wait_submission(replay_id)
    assert replay["status"] == "failed", replay
    assert replay["passed"] is False
    assert replay["attempt"] == {"charged": True, "refunded": False}
    board = requests.get(f"{alice.base}/benchmarks/{demo.slug}/leaderboard/", timeout=30).json()
    assert [row["submission_id"] for row in board["rows"]] == [sub_id]


def replay_archive(benchmark: Any) -> bytes:
    """A submission that prints the official answers in cohort order, learned elsewhere."""
    classes = CohortItem.objects.filter(
        cohort__benchmark=benchmark, cohort__kind="official"
    ).order_by("position")
    data = b"".join(item.reference_class.to_bytes(4, "little") for item in classes)
    octal = "".join(f"\\{byte:03o}" for byte in data)
    return archive({"run": (f"#!/bin/sh\nprintf '{octal}' > \"$3\"\n", 0o755)})


def test_failures_end_in_the_right_status_and_charge(celery_workers, live_server, demo):
    factories.UserFactory(username="bob")
    bob = Entrant(live_server.url, "bob", "correct horse battery")

    broken = bob.create_environment(
        demo.slug, "broken", b"FROM localhost/podium/busybox:1\nRUN exit 7\n"
    )
    env = bob.create_environment(demo.slug, "kit", (STARTER_KIT / "Dockerfile").read_bytes())
    broken = bob.wait_environment(broken["id"])
    assert broken["status"] == "failed"
    assert broken["failure_reason"]
    retry = bob.post(f"/environments/{broken['id']}/rebuild/")
    assert retry.status_code == 202, retry.text
    assert bob.wait_environment(broken["id"])["status"] == "failed"
    assert [
        event["status"] for event in bob.get(f"/environments/{broken['id']}/").json()["timeline"]
    ] == ["queued", "building", "failed", "queued", "building", "failed"]
    quota = bob.get(f"/benchmarks/{demo.slug}/quota/").json()
    assert quota["used_today"] == 0  # environments are attempt-free

    env = bob.wait_environment(env["id"])
    assert env["status"] == "ready", env
    run_script = "#!/bin/sh\n"
    variants = {
        "build_failed": archive(
            {"build.sh": ("echo compiling; exit 4\n", 0o644), "run": (run_script, 0o755)}
        ),
        "no_run": archive({"build.sh": ("echo nothing to build\n", 0o644)}),
        "wrong_size": archive({"run": (run_script + 'printf abc > "$3"\n', 0o755)}),
        "below_gate": archive(
            {"run": (run_script + 'head -c $((4 * $(wc -l < "$1"))) /dev/zero > "$3"\n', 0o755)}
        ),
    }
    ids: dict[str, int] = {}
    results: dict[str, dict[str, Any]] = {}
    names = list(variants)
    for pair in (names[:2], names[2:]):  # an entrant has at most two builds in flight
        batch = {name: bob.submit(demo.slug, env["id"], variants[name]) for name in pair}
        ids.update(batch)
        results.update({name: bob.wait_submission(sub_id) for name, sub_id in batch.items()})

    assert results["build_failed"]["status"] == "build_failed"
    assert "status 4" in results["build_failed"]["failure_reason"]
    build_log = bob.get(f"/submissions/{ids['build_failed']}/build-log").text
    assert "compiling" in build_log
    assert results["no_run"]["status"] == "build_failed"
    assert "/submission/run" in results["no_run"]["failure_reason"]
    assert results["wrong_size"]["status"] == "errored"
    assert "bytes" in results["wrong_size"]["failure_reason"]
    assert results["below_gate"]["status"] == "failed"
    assert results["below_gate"]["matches"] < COHORT_SIZE - 1
    for result in results.values():
        assert result["attempt"] == {"charged": True, "refunded": False}, result
    quota = bob.get(f"/benchmarks/{demo.slug}/quota/").json()
    assert quota["used_today"] == len(variants)
    board = requests.get(f"{bob.base}/benchmarks/{demo.slug}/leaderboard/", timeout=30).json()
    assert board["rows"] == []
