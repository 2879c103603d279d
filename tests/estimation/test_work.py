"""The scoring host's side end to end (a real grader container and meter): a requested
suite generated with its progress and variances, an accepted entry graded holding the
machine and recorded, an entry that imports NumPy ranked below it with every MLP's
fallback said, and the final rerun graded on the final suite."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from portal.contests.models import Benchmark
from portal.estimation import selectors, services
from portal.estimation.models import Entry, FinalScore, PhaseRules, Suite
from portal.estimation.rules import derive_seeds
from scoring.estimation import work
from tests import factories
from tests.whest import whest_package

pytestmark = [pytest.mark.docker]

NUMPY = """\
import numpy

from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        return numpy.zeros((mlp.depth, mlp.width))
"""


def _generate(phase: Benchmark, role: str, n: int) -> Suite:
    suite = Suite.objects.create(
        benchmark=phase,
        role=role,
        origin=Suite.GENERATED,
        n_mlps=n,
        width=16,
        depth=3,
        n_samples=5000,
        progress_total=n,
    )
    work.generate_suite(suite.pk, derive_seeds("work-tests", role, n))
    suite.refresh_from_db()
    return suite


@pytest.fixture
def phase(db: None, grader_image: str) -> Benchmark:
    now = timezone.now()
    benchmark = factories.BenchmarkFactory(
        kind=Benchmark.ESTIMATION,
        opens_at=now - dt.timedelta(days=1),
        closes_at=now + dt.timedelta(days=1),
        attempts_per_day=5,
        attempt_timezone="UTC",
        run_memory_bytes=512 << 20,
        run_pids_limit=64,
    )
    PhaseRules.objects.create(
        benchmark=benchmark,
        width=16,
        depth=3,
        flop_budget=1_000_000,
        wall_cap_s=20,
        public_mlps=3,
        withheld_mlps=1,
        final_mlps=2,
        reference_samples=5000,
    )
    return benchmark


def test_a_suite_is_generated_then_entries_are_graded_ranked_and_rerun(
    phase: Benchmark, alice: Any, bob: Any, tmp_path: Path, sent: list
) -> None:
    suite = _generate(phase, Suite.PHASE, 4)
    assert suite.status == Suite.READY, suite.note
    assert suite.progress_done == 4 and len(suite.dataset_sha256) == 64
    assert len(suite.stats["avg_variances"]) == 4

    honest = services.entry_accept(
        entrant=alice,
        benchmark=phase,
        archive_file=whest_package(tmp_path / "m"),
        archive_name="m.tar.gz",
    )
    cheat = services.entry_accept(
        entrant=bob,
        benchmark=phase,
        archive_file=whest_package(tmp_path / "n", NUMPY),
        archive_name="n.tar.gz",
    )
    work.grade_entry(honest.pk)
    work.grade_entry(cheat.pk)
    work.grade_entry(honest.pk)  # a redelivered message: claimed once, graded once
    honest.refresh_from_db()
    cheat.refresh_from_db()
    assert honest.status == Entry.GRADED, honest.failure_reason
    assert honest.fallbacks == 0 and honest.public_score is not None
    assert honest.mean_flops and honest.mean_flops > 0
    mlps = honest.results["mlps"]
    assert len(mlps) == 4 and all(m["flops_used"] > 0 for m in mlps)
    assert cheat.status == Entry.GRADED and cheat.fallbacks == 4
    assert all("numpy" in m["reason"] for m in cheat.results["mlps"])
    board = selectors.board(phase)
    assert [r.entry_id for r in board] == [honest.pk, cheat.pk]

    final_suite = _generate(phase, Suite.FINAL, 2)
    assert final_suite.status == Suite.READY
    after = phase.closes_at + dt.timedelta(minutes=1)
    finals = services.final_start(benchmark=phase, user=None, now=after)
    for final in finals:
        work.grade_final(final.pk)
    scores = {f.entry_id: f for f in FinalScore.objects.all()}
    assert scores[honest.pk].status == Entry.GRADED and scores[honest.pk].fallbacks == 0
    assert len(scores[honest.pk].results["mlps"]) == 2
    standings = selectors.final_standings(phase)
    assert standings[0].entry_id == honest.pk and standings[0].rank == 1


def test_an_archive_damaged_after_acceptance_fails_refunded(
    phase: Benchmark, alice: Any, tmp_path: Path, sent: list
) -> None:
    _generate(phase, Suite.PHASE, 4)
    entry = services.entry_accept(
        entrant=alice,
        benchmark=phase,
        archive_file=whest_package(tmp_path / "m"),
        archive_name="m.tar.gz",
    )
    # The stored archive is damaged after acceptance: the grader's fault, refunded.
    services.archive_path(entry).write_bytes(b"not a tarball")
    work.grade_entry(entry.pk)
    entry.refresh_from_db()
    assert entry.status == Entry.FAILED and entry.refunded
    assert "Platform error" in entry.failure_reason
