"""Practice runs on real parts: the same build and timed run, on the public practice cohort.

Real HTTP (live server), real Celery workers, the real Docker Engine and the starter
kit, on a benchmark that has only a small generated practice cohort (no official one).
A practice run is scored against the published answers, uses the practice allowance
and never reaches the leaderboard; the published answers and images are downloadable.
"""

from __future__ import annotations

import datetime as dt
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from django.utils import timezone

from portal.contests.cohorts import cohort_import
from portal.contests.democohort import generate
from tests import factories
from tests.e2e.test_pipeline import STARTER_KIT, Entrant, starter_kit_archive

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

PRACTICE_SIZE = 24


def kit_wrong_below_500() -> bytes:
    """The starter kit, changed to answer class + 1 for every image whose class is < 500."""
    predict = (STARTER_KIT / "predict.py").read_text()
    honest = "    return class_id\n\n\ndef predict_one"
    assert honest in predict
    predict = predict.replace(
        honest,
        "    if class_id < 500:\n        class_id += 1\n" + honest,
    )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(STARTER_KIT.iterdir()):
            if path.name == "predict.py":
                data = predict.encode()
                info = tarfile.TarInfo("predict.py")
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.add(path, arcname=path.name)
    return buffer.getvalue()


@dataclass(frozen=True)
class PracticeOnly:
    slug: str
    images: Path
    answers: list[tuple[str, int]]


@pytest.fixture
def practice_only(transactional_db: Any, data_dir: Path, tmp_path: Path) -> PracticeOnly:
    """An open benchmark with a generated practice cohort and no official one."""
    now = timezone.now()
    benchmark = factories.BenchmarkFactory(
        slug="practice-e2e",
        opens_at=now - dt.timedelta(minutes=1),
        closes_at=now + dt.timedelta(days=1),
        practice_per_day=2,
        build_timeout_s=300,
        score_timeout_s=120,
    )
    images = tmp_path / "practice"
    answers = generate(images, PRACTICE_SIZE, seed=11)
    cohort_import(benchmark=benchmark, kind="practice", images_dir=images, answers=answers)
    return PracticeOnly(slug=benchmark.slug, images=images, answers=answers)


def test_a_practice_run_is_scored_against_the_published_answers_off_the_board(
    celery_workers, live_server, practice_only
):
    slug, images = practice_only.slug, practice_only.images
    factories.UserFactory(username="alice")
    alice = Entrant(live_server.url, "alice", "correct horse battery")

    # The published answers and images, through the API.
    published = alice.get(f"/benchmarks/{slug}/practice/")
    assert published.status_code == 200, published.text
    answers = {row["path"]: row["class"] for row in published.json()["answers"]}
    assert answers == dict(practice_only.answers)
    download = requests.get(published.json()["download_url"], headers=alice.headers, timeout=60)
    assert download.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(download.content), mode="r:gz") as archive:
        listed = archive.extractfile("answers.tsv").read().decode()
        assert {
            line.split("\t")[0]: int(line.split("\t")[1]) for line in listed.splitlines()
        } == answers
        for path in answers:
            assert archive.extractfile(f"images/{path}").read() == (images / path).read_bytes()

    env = alice.create_environment(slug, "kit", (STARTER_KIT / "Dockerfile").read_bytes())
    assert alice.wait_environment(env["id"])["status"] == "ready"

    honest_id = alice.submit(slug, env["id"], starter_kit_archive(), kind="practice")
    wrong_id = alice.submit(slug, env["id"], kit_wrong_below_500(), kind="practice")
    honest = alice.wait_submission(honest_id)
    wrong = alice.wait_submission(wrong_id)

    assert honest["kind"] == "practice"
    assert honest["status"] == "passed", honest
    assert honest["matches"] == honest["total"] == PRACTICE_SIZE
    assert honest["wall_time_ns"] > 0
    statuses = [event["status"] for event in honest["timeline"]]
    # A busy scoring machine adds "queued" events (waiting for it): count each step once.
    steps = [status for i, status in enumerate(statuses) if i == 0 or statuses[i - 1] != status]
    assert steps == [
        "accepted",
        "building",
        "queued",
        "staging",
        "running",
        "passed",
    ]
    # Agreement is counted against the published answers: exactly the images the
    # changed kit leaves alone (published class 500 or more) match.
    assert wrong["status"] == "failed", wrong
    assert wrong["total"] == PRACTICE_SIZE
    assert wrong["matches"] == sum(1 for klass in answers.values() if klass >= 500)
    assert 0 < wrong["matches"] < PRACTICE_SIZE
    for submission in (honest, wrong):
        assert submission["attempt"] == {"charged": True, "refunded": False}

    # The practice allowance (2 a day) is used up; the official one is untouched.
    quota = alice.get(f"/benchmarks/{slug}/quota/").json()
    assert (quota["practice"]["used_today"], quota["practice"]["remaining_today"]) == (2, 0)
    assert (quota["official"]["used_today"], quota["official"]["remaining_today"]) == (0, 2)
    third = alice.post(
        f"/benchmarks/{slug}/submissions/",
        data={"environment": env["id"], "kind": "practice"},
        files={"source": ("source.tar.gz", starter_kit_archive())},
    )
    assert third.status_code == 429
    assert third.json()["code"] == "quota_exhausted"

    # Never on the leaderboard.
    board = requests.get(f"{alice.base}/benchmarks/{slug}/leaderboard/", timeout=30).json()
    assert board["rows"] == []


def test_the_practice_cohort_needs_a_signed_in_entrant(live_server, practice_only):
    base = f"{live_server.url}/api/v1/benchmarks/{practice_only.slug}"

    listing = requests.get(f"{base}/practice/", timeout=30)
    download = requests.get(f"{base}/practice/download", timeout=30)

    assert listing.status_code == download.status_code == 401
    assert listing.json()["code"] == download.json()["code"] == "not_authenticated"
