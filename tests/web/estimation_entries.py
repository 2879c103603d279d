"""Rows for the metered-estimation page tests: entries, accepted as the upload service
leaves them and graded through the scoring host's services with a whestbench-shaped
grade; a ready phase suite (its folder made by ``tests.whest.whest_bake``)."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.utils import timezone

from portal.contests.models import Benchmark
from portal.core import storage
from portal.estimation import services
from portal.estimation.models import Entry, Suite
from portal.teams.selectors import identity_of
from tests import factories


def ready_suite(benchmark: Benchmark, dataset: Path | None = None, **fields: Any) -> Suite:
    """The phase's ready suite; with ``dataset``, its folder copied where the grader reads it."""
    suite = factories.SuiteFactory(benchmark=benchmark, **fields)
    if dataset is not None:
        shutil.copytree(dataset, storage.suite_dir(suite.pk))
    return suite


def accepted(benchmark: Benchmark, entrant: Any, *, at: dt.datetime | None = None) -> Entry:
    """An entry as ``entry_accept`` leaves it (charged to the entrant's team, if any)."""
    team_id = identity_of(benchmark.pk, entrant.pk).team_id
    return Entry.objects.create(
        benchmark=benchmark,
        entrant=entrant,
        team_id=team_id,
        submitted_at=at or timezone.now(),
        archive_name="sub.tar.gz",
        archive_sha256="a" * 64,
        archive_bytes=574,
        estimator_class="estimator.Estimator",
    )


def mlp(
    index: int,
    *,
    mse: float,
    flops: int = 500_000,
    residual_s: float = 0.002,
    budget: int = 1_000_000,
    lambda_flops_per_second: float = 0.0,
    failed: str = "",
) -> dict[str, Any]:
    """One of whestbench's ``per_mlp`` entries; ``failed`` names the flag it sets (or
    "error" for an exception): the zero prediction, scored with the factor 1."""
    effective = flops + lambda_flops_per_second * residual_s
    entry: dict[str, Any] = {
        "mlp_index": index,
        "mlp_name": f"mlp-{index:02d}",
        "final_layer_mse": mse,
        "all_layers_mse": mse,
        "per_layer_mse": [mse, mse],
        "adjusted_final_layer_score": mse * (1.0 if failed else max(0.1, effective / budget)),
        "flops_used": 0 if failed == "error" else flops,
        "effective_compute": 0.0 if failed == "error" else effective,
        "budget_exhausted": failed == "budget_exhausted",
        "time_exhausted": failed == "time_exhausted",
        "residual_wall_time_exhausted": failed == "residual_wall_time_exhausted",
        "combined_budget_exhausted": False,
        "wall_time_s": residual_s + 0.01,
        "flopscope_backend_time_s": 0.005,
        "flopscope_overhead_time_s": 0.001,
        "residual_wall_time_s": 0.0 if failed == "error" else residual_s,
        "breakdowns": {"estimator": None},
    }
    if failed == "error":
        entry.update({"error": "shape (3, 8) is not (2, 8)", "error_code": "ValueError"})
    return entry


def grade(mlps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A whestbench grade: its per-MLP entries and the grader's own facts."""
    return {"per_mlp": list(mlps), "grader": {"whestbench": "0.16.2", "host": "test"}}


def graded(
    benchmark: Benchmark,
    entrant: Any,
    mses: Sequence[float],
    *,
    at: dt.datetime | None = None,
    **mlp_fields: Any,
) -> Entry:
    """An entry graded on the phase suite with one MLP per value of ``mses`` (claimed and
    recorded as the scoring host does)."""
    entry = accepted(benchmark, entrant, at=at)
    claimed = services.entry_claim(entry.pk, "test-host")
    assert claimed is not None
    return services.entry_record(
        entry.pk, grade([mlp(i, mse=m, **mlp_fields) for i, m in enumerate(mses)])
    )
