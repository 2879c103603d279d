"""Staff-tool tests: accepted uploads, a broker recorder, and a scored run with evidence."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from portal.contests.models import Cohort, CohortItem
from portal.core import storage
from portal.submissions.models import Run, Submission
from tests import factories
from tests.api.conftest import accepted, make_archive, ready_environment

__all__ = ["accepted", "make_archive", "ready_environment"]


@pytest.fixture
def submission(benchmark, alice, ready_environment, accepted) -> Submission:
    return accepted(alice, ready_environment(alice, benchmark))


@pytest.fixture
def official(benchmark) -> Cohort:
    (cohort,) = factories.cohorts(benchmark, Cohort.OFFICIAL)
    for position, (name, answer) in enumerate([("cats/a.jpg", 281), ("dogs/b.jpg", 207)]):
        CohortItem.objects.create(
            cohort=cohort,
            position=position,
            canonical_name=name,
            sha256=f"{position}" * 64,
            reference_class=answer,
        )
    return cohort


@pytest.fixture
def scored(submission, official) -> Run:
    """A passed run of Alice's submission, with the files a real run keeps for review."""
    Submission.objects.filter(pk=submission.pk).update(
        status=Submission.PASSED, image_digest="sha256:" + "5" * 64
    )
    run = Run.objects.create(
        submission=submission,
        cohort=official,
        status=Run.FINISHED,
        verdict="passed",
        passed=True,
        wall_time_ns=1_234_567,
        matches=2,
        total=2,
        output_sha256="6" * 64,
        supervisor_sha256="7" * 64,
        readings={"cpu_idle": 0.97, "temperature_c": 41},
        resources={
            "cgroup_version": 2,
            "cpu_user_s": 1.5,
            "cpu_system_s": 0.25,
            "cpu_per_wall": 1.4,
            "memory_peak_bytes": 3 << 20,
            "pids_peak": 9,
            "io_read_bytes": 0,
            "io_write_bytes": 4096,
            "oom_events": 0,
            "meter_ms": 0.4,
        },
        finished_at=timezone.now(),
    )
    private = storage.ensure_dir(storage.run_private_dir(run.pk))
    files: dict[Any, bytes] = {
        private / storage.RUN_MANIFEST: b"r1\tx1.jpg\nr2\tx2.jpg\n",
        private / storage.RUN_MAPPING: b"0\tr1\tx1.jpg\tcats/a.jpg\n1\tr2\tx2.jpg\tdogs/b.jpg\n",
        private / storage.RUN_OUTPUT: b"\x19\x01\x00\x00\xcf\x00\x00\x00",
        private / storage.RUN_SUPERVISOR: b'{"podium_supervisor": 1, "wall_ns": 1234567}\n',
        storage.run_log(run.pk): b"== stdout ==\nscored 2 rows\n",
    }
    for path, data in files.items():
        path.write_bytes(data)
    return run
