"""Honest under noise: mean propagation gets no fallback while another process keeps a CPU
busy, run after run (its residual time is its own, not the neighbour's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scoring.estimation.grade import grade
from tests.estimation.conftest import limits

pytestmark = [pytest.mark.docker, pytest.mark.serial]

RUNS = 3
# Each busy process stops by itself after this long, whatever happens to the test.
BUSY_FOR_S = 300


def test_mean_propagation_never_falls_back_on_a_busy_machine(
    grader_image: str, suite: Path, mean_submission: Path
) -> None:
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import time\nend = time.time() + {BUSY_FOR_S}\nwhile time.time() < end:\n    pass",
        ]
    )
    try:
        for _ in range(RUNS):
            result = grade(mean_submission, suite, limits(), image=grader_image)
            residuals = [e["residual_wall_time_s"] for e in result["per_mlp"]]
            assert result["n_failed_mlps"] == 0, (result["failure_breakdown"], residuals)
            for entry in result["per_mlp"]:
                assert entry["residual_wall_time_s"] < limits().residual_cap_s
    finally:
        busy.kill()
        busy.wait()
