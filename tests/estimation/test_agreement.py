"""Agreement with whestbench's own grading: the reference estimators score on Podium's
grader as `whest run --runner subprocess` scores them on the same MLPs and budget."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scoring.estimation.grade import FLOPSCOPE_VERSION, WHESTBENCH_VERSION, grade
from tests.estimation.conftest import BUDGET, N_MLPS, REPO, limits

pytestmark = pytest.mark.docker


# A budget at which covariance propagation's FLOPs (about 1.1e6 at this shape) count in
# its score: above whestbench's 0.1 floor, so a FLOP metered differently shows.
COUNTING_BUDGET = 4_000_000


def whest_run(submission: Path, suite: Path, budget: int = BUDGET) -> dict[str, Any]:
    """``whest run`` of the venv on the submission's estimator.py, as an entrant runs it."""
    done = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "whest"),
            "run",
            "--estimator",
            str(submission / "estimator.py"),
            "--dataset",
            str(suite),
            "--runner",
            "subprocess",
            "--json",
            "--flop-budget",
            str(budget),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    results: dict[str, Any] = json.loads(done.stdout)["results"]
    return results


def test_reference_estimators_score_as_whest_run_scores_them(
    grader_image: str, suite: Path, mean_submission: Path, covariance_submission: Path
) -> None:
    means: dict[str, float] = {}
    for name, submission in (("mean", mean_submission), ("covariance", covariance_submission)):
        ours = grade(submission, suite, limits(), image=grader_image)
        theirs = whest_run(submission, suite)
        assert ours["n_failed_mlps"] == theirs["n_failed_mlps"] == 0
        assert len(ours["per_mlp"]) == len(theirs["per_mlp"]) == N_MLPS
        for mine, reference in zip(ours["per_mlp"], theirs["per_mlp"], strict=True):
            assert mine["mlp_name"] == reference["mlp_name"]
            assert mine["final_layer_mse"] == reference["final_layer_mse"]
            assert math.isclose(
                mine["adjusted_final_layer_score"],
                reference["adjusted_final_layer_score"],
                rel_tol=0,
                abs_tol=1e-9,
            )
            # The meter's count of the same operations (fnp.array of a flopscope array
            # copies and is charged, as in flopscope: the harness's copying_array).
            assert mine["flops_used"] == reference["flops_used"] > 0
            assert mine["wall_time_s"] > 0
        means[name] = ours["adjusted_final_layer_score"]
        assert ours["grader"]["flopscope"] == FLOPSCOPE_VERSION == "0.12.4"
        assert ours["grader"]["whestbench"] == WHESTBENCH_VERSION == "0.16.2"
        assert ours["grader"]["image"] == grader_image
        assert ours["grader"]["seconds"] > 0
        assert [e["suite_index"] for e in ours["per_mlp"]] == list(range(N_MLPS))
    assert means["covariance"] < means["mean"]


def test_where_flops_count_the_scores_are_whest_runs_to_1e_9(
    grader_image: str, suite: Path, covariance_submission: Path
) -> None:
    ours = grade(
        covariance_submission, suite, limits(flop_budget=COUNTING_BUDGET), image=grader_image
    )
    theirs = whest_run(covariance_submission, suite, COUNTING_BUDGET)
    for mine, reference in zip(ours["per_mlp"], theirs["per_mlp"], strict=True):
        assert mine["flops_used"] == reference["flops_used"]
        assert mine["flops_used"] / COUNTING_BUDGET > 0.1  # the FLOPs are in the score
        assert math.isclose(
            mine["adjusted_final_layer_score"],
            reference["adjusted_final_layer_score"],
            rel_tol=0,
            abs_tol=1e-9,
        )


def test_a_subset_of_the_suite_in_suite_order(
    grader_image: str, suite: Path, mean_submission: Path
) -> None:
    whole = grade(mean_submission, suite, limits(), image=grader_image)
    seen: list[tuple[int, int]] = []
    part = grade(
        mean_submission,
        suite,
        limits(),
        indices=[2, 0],
        image=grader_image,
        on_mlp=lambda done, total: seen.append((done, total)),
    )
    assert seen == [(1, 2), (2, 2)]
    assert [e["suite_index"] for e in part["per_mlp"]] == [2, 0]
    for entry in part["per_mlp"]:
        same = whole["per_mlp"][entry["suite_index"]]
        assert entry["mlp_name"] == same["mlp_name"]
        assert entry["adjusted_final_layer_score"] == same["adjusted_final_layer_score"]
    with pytest.raises(ValueError, match="indices"):
        grade(mean_submission, suite, limits(), indices=[N_MLPS], image=grader_image)
