"""The sandbox the portal publishes is the one the runner creates: one spec, two readers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.test import Client

from portal.contests import sandbox
from portal.contests.models import Cohort, CohortItem
from scoring.cohort import staging
from scoring.run import runner
from tests import factories
from tests.scoring.test_runner import staged  # noqa: F401


def test_the_published_container_is_the_runners_own(
    staged: staging.StagedRun,  # noqa: F811
    alice: Any,
    client: Client,
    settings: Any,
) -> None:
    settings.PODIUM_SCORING_CPUS = ""
    benchmark = factories.BenchmarkFactory(run_pids_limit=77, score_timeout_s=33)
    (practice,) = factories.cohorts(benchmark, Cohort.PRACTICE)
    for position in range(staged.rows):
        CohortItem.objects.create(
            cohort=practice,
            position=position,
            canonical_name=f"{position}.jpg",
            sha256="0" * 64,
            reference_class=1,
        )
    client.force_login(alice)

    published = client.get(f"/api/v1/benchmarks/{benchmark.slug}/sandbox/").json()
    scored = runner.container_spec(
        image="{image}",
        staged=staged,
        benchmark=benchmark,
        supervisor=Path("/opt/podium/supervise"),
        expect_bytes=4 * staged.rows,
        scoring_cpus="",
    )

    local = published["container"]
    for mount in scored["mounts"]:
        mount["Source"] = {"/opt/podium/supervise": "{supervisor}"}.get(mount["Source"], "{input}")
    scored["labels"] = {}
    assert local == scored


def test_the_staged_names_are_the_sandboxs() -> None:
    assert staging.MANIFEST == sandbox.MANIFEST_NAME
    assert staging.IMAGES == sandbox.IMAGES_NAME
