"""Fixtures of the metered-estimation tests: a tiny suite baked once per session, the
grader image (made by scripts/base-images when missing or stale), and submissions written
as `whest package` lays them out (manifest.json naming estimator.Estimator)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from portal.estimation.rules import derive_seeds
from scoring.estimation.grade import Limits, make_suite

REPO = Path(__file__).resolve().parents[2]
# The suite: a handful of small MLPs, baked in about a second.
WIDTH = 32
DEPTH = 4
N_MLPS = 3
N_SAMPLES = 20_000
# A budget both reference estimators stay under a tenth of at this shape (covariance
# propagation uses about 1.1e6 FLOPs), so each is scored at whestbench's 0.1 floor.
BUDGET = 20_000_000


def limits(**changes: object) -> Limits:
    """The tests' limits: the gated rule (0.4 s residual cap), 256 MiB, 64 PIDs."""
    values: dict[str, object] = {
        "flop_budget": BUDGET,
        "wall_cap_s": 10.0,
        "residual_cap_s": 0.4,
        "lambda_flops_per_second": 0.0,
        "memory_bytes": 256 << 20,
        "pids_limit": 64,
    }
    values.update(changes)
    return Limits(**values)


def write_submission(folder: Path, source: str) -> Path:
    """An unpacked submission: ``estimator.py`` holding ``source`` and the manifest."""
    folder.mkdir(parents=True)
    (folder / "estimator.py").write_text(textwrap.dedent(source))
    manifest = {"entrypoint": {"module": "estimator", "class": "Estimator"}, "files": []}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


MEAN = """
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    pass
"""

COVARIANCE = """
from whestbench.estimators import CovariancePropagationEstimator


class Estimator(CovariancePropagationEstimator):
    pass
"""


@pytest.fixture(scope="session")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("suite") / "suite"
    return make_suite(
        out,
        n_mlps=N_MLPS,
        width=WIDTH,
        depth=DEPTH,
        n_samples=N_SAMPLES,
        mlp_seeds=derive_seeds("tests", "public", N_MLPS),
    )


@pytest.fixture(scope="session")
def mean_submission(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_submission(tmp_path_factory.mktemp("mean") / "mean", MEAN)


@pytest.fixture(scope="session")
def covariance_submission(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_submission(tmp_path_factory.mktemp("cov") / "cov", COVARIANCE)
