"""Race-free charging: with one attempt left, 50 simultaneous uploads charge exactly once.

Real concurrent HTTP requests against a live server (``crowd_server``), on whichever
database the suite runs on (PostgreSQL in CI, the embedded SQLite by default).
"""

from __future__ import annotations

import io
import tarfile
from concurrent.futures import ThreadPoolExecutor

import requests

from portal.accounts.models import ApiToken
from portal.submissions.models import AttemptLedger, Submission
from tests import factories

UPLOADS = 50


def source_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = b"#!/bin/sh\nexit 0\n"
        info = tarfile.TarInfo("run")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_fifty_simultaneous_uploads_with_one_attempt_left_charge_once(
    crowd_server, data_dir, monkeypatch, settings
):
    # The upload throttle would refuse most of the 50 first: this test is about the quota.
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"tokens": "1000/min", "uploads": "1000/min"},
    }
    sent: list[tuple[str, tuple]] = []
    monkeypatch.setattr(
        "portal.core.jobs.app.send_task", lambda name, args, **kw: sent.append((name, args))
    )
    alice = factories.UserFactory(username="alice")
    benchmark = factories.BenchmarkFactory(attempts_per_day=1)
    factories.cohorts(benchmark)
    environment = factories.EnvironmentFactory(owner=alice, benchmark=benchmark)
    token = ApiToken.objects.create(user=alice).key
    source = source_archive()

    def upload(_: int) -> requests.Response:
        return requests.post(
            f"{crowd_server}/api/v1/benchmarks/{benchmark.slug}/submissions/",
            headers={"Authorization": f"Token {token}"},
            data={"environment": environment.pk, "kind": "official"},
            files={"source": ("kit.tar.gz", source)},
            timeout=120,
        )

    with ThreadPoolExecutor(max_workers=UPLOADS) as pool:
        responses = list(pool.map(upload, range(UPLOADS)))

    codes = sorted(response.status_code for response in responses)
    assert codes.count(201) == 1, [r.text for r in responses if r.status_code != 429][:3]
    refused = [response.json() for response in responses if response.status_code != 201]
    assert len(refused) == UPLOADS - 1
    assert {error["code"] for error in refused} == {"quota_exhausted"}
    assert Submission.objects.count() == 1
    assert list(AttemptLedger.objects.values_list("delta", flat=True)) == [1]
    stored = [path for path in (data_dir / "submissions").rglob("*") if path.is_file()]
    assert len(stored) == 1
    assert [name for name, _args in sent] == ["scoring.build_submission"]
