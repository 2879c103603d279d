"""The entrant's other failures each give whestbench's fallback with the reason in the
MLP's entry: a bad shape, values that are not finite, and a setup that raises or passes
its timeout (every MLP then fails with it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scoring.estimation.grade import grade
from tests.estimation.conftest import N_MLPS, limits, write_submission

pytestmark = pytest.mark.docker

TRANSPOSED = """
import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        return fnp.zeros((mlp.width, mlp.depth))
"""

NOT_FINITE = """
import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        return fnp.zeros((mlp.depth, mlp.width)) / 0.0
"""

SETUP_RAISES = """
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    def setup(self, context):
        raise RuntimeError("no weights shipped")
"""

SETUP_SLEEPS = """
import time
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    def setup(self, context):
        time.sleep(30)
"""


@pytest.mark.parametrize(
    ("source", "words"),
    [(TRANSPOSED, "transposed"), (NOT_FINITE, "finite")],
    ids=["shape", "not-finite"],
)
def test_bad_predictions_fall_back(grader_image, suite, tmp_path: Path, source, words) -> None:
    result = grade(write_submission(tmp_path / "s", source), suite, limits(), image=grader_image)
    assert result["failure_breakdown"]["error"] == N_MLPS
    for entry in result["per_mlp"]:
        assert entry["error_code"] == "ValueError"
        assert words in str(entry["error"])


@pytest.mark.parametrize(
    ("source", "code"),
    [(SETUP_RAISES, "SETUP_ERROR"), (SETUP_SLEEPS, "SETUP_TIMEOUT")],
    ids=["raises", "timeout"],
)
def test_a_failed_setup_fails_every_mlp(grader_image, suite, tmp_path: Path, source, code) -> None:
    result = grade(write_submission(tmp_path / "s", source), suite, limits(), image=grader_image)
    assert result["n_failed_mlps"] == N_MLPS
    assert {e["error_code"] for e in result["per_mlp"]} == {code}
    # Once: the setup is not tried again for each MLP.
    assert result["grader"]["seconds"] < 20
