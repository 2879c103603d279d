"""Metered estimation on real parts: real Celery workers (the scoring worker of this
machine's class), the real Docker Engine, the grader image and the meter. Staff ask for
the phase suite; the scoring worker generates it; an entrant's `whest package` tarball is
accepted, graded by the worker holding the machine, and ranked on the board."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from portal.contests.models import Benchmark
from portal.estimation import selectors, services
from portal.estimation.models import Entry, PhaseRules, Suite
from tests import factories
from tests.e2e.conftest import wait_for
from tests.whest import whest_package

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


def test_a_suite_is_generated_and_an_estimator_graded_by_the_workers(
    celery_workers: None, grader_image: str, tmp_path: Path
) -> None:
    now = timezone.now()
    phase = factories.BenchmarkFactory(
        kind=Benchmark.ESTIMATION,
        opens_at=now - dt.timedelta(days=1),
        closes_at=now + dt.timedelta(days=1),
        attempt_timezone="UTC",
        run_memory_bytes=512 << 20,
        run_pids_limit=64,
    )
    PhaseRules.objects.create(
        benchmark=phase, width=16, depth=3, flop_budget=1_000_000, wall_cap_s=20,
        public_mlps=2, withheld_mlps=1, reference_samples=5000,
    )  # fmt: skip
    staff = factories.UserFactory(username="staff", is_staff=True)
    suite = services.suite_generate(
        benchmark=phase, role=Suite.PHASE, private_seed="e2e seed", user=staff
    )
    suite = wait_for(
        lambda: Suite.objects.get(pk=suite.pk),
        lambda s: s.status != Suite.GENERATING,
        timeout_s=180,
    )
    assert suite.status == Suite.READY, suite.note
    assert suite.progress_done == 3 and len(suite.stats["avg_variances"]) == 3

    archive = whest_package(tmp_path / "estimator")
    alice: Any = factories.UserFactory(username="alice")
    entry = services.entry_accept(
        entrant=alice, benchmark=phase, archive_file=archive, archive_name=archive.name
    )
    entry = wait_for(
        lambda: Entry.objects.get(pk=entry.pk),
        lambda e: e.status in (Entry.GRADED, Entry.FAILED),
        timeout_s=300,
    )
    assert entry.status == Entry.GRADED, entry.failure_reason
    assert entry.fallbacks == 0 and entry.public_score is not None
    assert entry.host  # the scoring host that graded it
    board = selectors.board(phase)
    assert [row.entry_id for row in board] == [entry.pk]
