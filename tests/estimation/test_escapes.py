"""Seed 004's escapes, each written here as an entrant would write it: none reaches the
data unmetered, none spends compute off the meter, and each gets whestbench's fallback
(the zero prediction, no compute discount) on the MLPs where it tried, with the reason in
that MLP's entry. None scores better than mean propagation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scoring.estimation.grade import grade
from tests.estimation.conftest import BUDGET, DEPTH, N_MLPS, WIDTH, limits, write_submission

pytestmark = pytest.mark.docker

IMPORTS_NUMPY = """
import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        import numpy as np  # the harness's image has none

        return fnp.asarray(np.zeros((mlp.depth, mlp.width)))
"""

# Every route from a flopscope array to a plain one, tried in turn: each must fail.
PLAIN_ARRAY = """
import json
import flopscope.numpy as fnp
from whestbench import BaseEstimator


def attempt(route):
    try:
        got = route()
    except BaseException as exc:
        return type(exc).__name__
    return "DATA: " + repr(got)[:40]


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        w = mlp.weights[0]

        def view():
            import numpy as np

            return w.view(np.ndarray)

        def numpy_asarray():
            import numpy

            return numpy.asarray(w)

        outcomes = {
            "view(np.ndarray)": attempt(view),
            "numpy.asarray": attempt(numpy_asarray),
            "memoryview": attempt(lambda: memoryview(w)),
            "bytes": attempt(lambda: bytes(w)),
            "__array__": attempt(lambda: w.__array__()),
            "__buffer__": attempt(lambda: w.__buffer__(0)),
            "array.frombytes": attempt(lambda: __import__("array").array("f", w)),
        }
        raise RuntimeError("routes " + json.dumps(outcomes))
"""

# The one route that yields the data, tolist(): a fetch whose time is the entrant's. Mean
# propagation in plain Python on it, as heavy as it would be on a large MLP (repeated).
PURE_PYTHON = """
import math
import time
import flopscope.numpy as fnp
from whestbench import BaseEstimator


def propagate(weights, width):
    mu, var, rows = [0.0] * width, [1.0] * width, []
    for w in weights:
        pre = [sum(w[i][j] * mu[i] for i in range(width)) for j in range(width)]
        pvar = [max(sum(w[i][j] ** 2 * var[i] for i in range(width)), 1e-12) for j in range(width)]
        mu, var = [], []
        for m, v in zip(pre, pvar):
            s = math.sqrt(v)
            a = m / s
            cdf = 0.5 * (1 + math.erf(a / math.sqrt(2)))
            pdf = math.exp(-a * a / 2) / math.sqrt(2 * math.pi)
            mean = m * cdf + s * pdf
            mu.append(mean)
            var.append(max((m * m + v) * cdf + m * s * pdf - mean * mean, 0.0))
        rows.append(mu)
    return rows


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        weights = [w.tolist() for w in mlp.weights]
        started = time.perf_counter()
        rows = propagate(weights, mlp.width)
        while time.perf_counter() - started < 1.0:
            rows = propagate(weights, mlp.width)
        return fnp.array(rows)
"""

SPINS = """
import time
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    def predict(self, mlp, budget):
        started = time.perf_counter()
        n = 0
        while time.perf_counter() - started < 1.0:
            n += 1
        return super().predict(mlp, budget)
"""

# Twice the budget: covariance-sized work, over and over.
OVERSPENDS = """
import flopscope.numpy as fnp
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    def predict(self, mlp, budget):
        w = mlp.weights[0]
        spent = 0
        while spent < 2 * budget:
            w = fnp.tanh(w @ mlp.weights[0])
            spent += 2 * mlp.width ** 3
        return super().predict(mlp, budget)
"""

CATCHES = """
import flopscope as flops
import flopscope.numpy as fnp
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    def predict(self, mlp, budget):
        try:
            w = mlp.weights[0]
            while True:
                w = fnp.tanh(w @ mlp.weights[0])
        except flops.BudgetExhaustedError:
            pass
        return super().predict(mlp, budget)
"""

# Past the memory limit on the second MLP only.
MEMORY = """
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    calls = 0

    def predict(self, mlp, budget):
        Estimator.calls += 1
        if mlp.name == MEMORY_MLP:
            hoard = []
            while True:
                hoard.append(b"x" * (16 << 20))
        return super().predict(mlp, budget)
"""

# Sleeps past the wall cap on the second MLP only.
SLEEPS = """
import time
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    def predict(self, mlp, budget):
        if mlp.name == SLOW_MLP:
            time.sleep(30)
        return super().predict(mlp, budget)
"""

# A thread started in setup that computes whenever it can, between predicts included.
BACKGROUND = """
import threading
import flopscope.numpy as fnp
from whestbench.estimators import MeanPropagationEstimator


def churn():
    a = None
    while True:
        try:
            if a is None:
                a = fnp.ones(64)
            a = fnp.add(a, a) * 0.5
        except Exception:
            a = None


class Estimator(MeanPropagationEstimator):
    def setup(self, context):
        threading.Thread(target=churn, daemon=True).start()
"""


# The same, careful to use a connection of its own, so that its operations reach the
# meter beside the harness's instead of tangling with them on one socket.
BACKGROUND_OWN_CONNECTION = """
import threading
from flopscope._connection import Connection
from flopscope._protocol import encode_create_from_data, encode_request
from whestbench.estimators import MeanPropagationEstimator


def churn():
    conn, handle = Connection(), None
    while True:
        try:
            if handle is None:
                made = conn.send_recv(encode_create_from_data(bytes(256), [64], "float32"))
                handle = {"__handle__": made["result"]["id"]}
            conn.send_recv(encode_request("add", args=[handle, handle]))
        except Exception:
            pass


class Estimator(MeanPropagationEstimator):
    def setup(self, context):
        threading.Thread(target=churn, daemon=True).start()
"""


def graded(tmp_path: Path, image: str, suite: Path, name: str, source: str, **change: Any):
    submission = write_submission(tmp_path / name, source)
    return grade(submission, suite, limits(**change), image=image)


@pytest.fixture(scope="module")
def mean_score(grader_image: str, suite: Path, mean_submission: Path) -> float:
    result = grade(mean_submission, suite, limits(), image=grader_image)
    assert result["n_failed_mlps"] == 0
    return float(result["adjusted_final_layer_score"])


def zero_fallback(entry: dict[str, Any]) -> None:
    """whestbench's failure entry: the zero prediction, multiplier 1 (score == MSE)."""
    assert entry["adjusted_final_layer_score"] == entry["final_layer_mse"]


def not_better(result: dict[str, Any], mean_score: float) -> None:
    assert result["adjusted_final_layer_score"] >= mean_score


def test_importing_numpy_fails(grader_image, suite, tmp_path, mean_score) -> None:
    result = graded(tmp_path, grader_image, suite, "numpy", IMPORTS_NUMPY)
    assert result["n_failed_mlps"] == N_MLPS
    for entry in result["per_mlp"]:
        assert entry["error_code"] == "PREDICT_ERROR"
        assert "ModuleNotFoundError" in str(entry["error"])
        assert "numpy" in str(entry["error"])
        zero_fallback(entry)
    not_better(result, mean_score)


def test_no_route_turns_a_flopscope_array_into_a_plain_one(
    grader_image, suite, tmp_path, mean_score
) -> None:
    result = graded(tmp_path, grader_image, suite, "plain", PLAIN_ARRAY)
    for entry in result["per_mlp"]:
        assert entry["error_code"] == "PREDICT_ERROR"
        message = str(entry["error"])
        routes = json.loads(message[message.index("{") : message.rindex("}") + 1])
        assert len(routes) == 7
        assert not [route for route, outcome in routes.items() if outcome.startswith("DATA")]
        assert routes["numpy.asarray"] == "ModuleNotFoundError"
        assert routes["memoryview"] == "TypeError"
        zero_fallback(entry)
    not_better(result, mean_score)


def test_fetched_data_computed_on_in_plain_python_costs_residual_time(
    grader_image, suite, tmp_path, mean_score
) -> None:
    result = graded(tmp_path, grader_image, suite, "python", PURE_PYTHON)
    for entry in result["per_mlp"]:
        # Nothing of the propagation was metered as FLOPs (only the cast of the answer) ...
        assert entry["flops_used"] <= 2 * DEPTH * WIDTH
        assert entry["residual_wall_time_s"] > 1.0  # ... and all of it as residual time
        assert entry["residual_wall_time_exhausted"] is True
        zero_fallback(entry)
    assert result["failure_breakdown"]["residual_wall_time_exhausted"] == N_MLPS
    not_better(result, mean_score)


def test_a_second_of_plain_python_passes_the_residual_cap(
    grader_image, suite, tmp_path, mean_score
) -> None:
    result = graded(tmp_path, grader_image, suite, "spin", SPINS)
    for entry in result["per_mlp"]:
        assert entry["residual_wall_time_s"] > 0.9
        assert entry["residual_wall_time_exhausted"] is True
        zero_fallback(entry)
    not_better(result, mean_score)


@pytest.mark.parametrize("source", [OVERSPENDS, CATCHES], ids=["overspends", "catches"])
def test_spending_past_the_budget_fails_even_when_caught(
    grader_image, suite, tmp_path, mean_score, source: str
) -> None:
    result = graded(tmp_path, grader_image, suite, "spend", source)
    assert result["failure_breakdown"]["budget_exhausted"] == N_MLPS
    for entry in result["per_mlp"]:
        assert entry["budget_exhausted"] is True
        assert entry["flops_used"] <= BUDGET  # the meter refused the rest
        assert "refused" in entry["traceback"]
        zero_fallback(entry)
    not_better(result, mean_score)


def test_passing_the_memory_limit_fails_that_mlp_only(
    grader_image, suite, tmp_path, mean_score, mean_submission
) -> None:
    names = [
        e["mlp_name"]
        for e in grade(mean_submission, suite, limits(), image=grader_image)["per_mlp"]
    ]
    source = MEMORY.replace("MEMORY_MLP", repr(names[1]))
    result = graded(tmp_path, grader_image, suite, "memory", source)
    first, second, third = result["per_mlp"]
    assert second["error_code"] == "MEMORY_EXHAUSTED"
    assert "memory" in str(second["error"])
    zero_fallback(second)
    assert first.get("error_code") is None and third.get("error_code") is None
    assert result["grader"]["restarts"] == 1
    not_better(result, mean_score)


def test_sleeping_past_the_wall_cap_is_stopped(
    grader_image, suite, tmp_path, mean_score, mean_submission
) -> None:
    names = [
        e["mlp_name"]
        for e in grade(mean_submission, suite, limits(), image=grader_image)["per_mlp"]
    ]
    source = SLEEPS.replace("SLOW_MLP", repr(names[1]))
    result = graded(tmp_path, grader_image, suite, "sleeps", source, wall_cap_s=1.0)
    first, second, third = result["per_mlp"]
    assert second["time_exhausted"] is True
    assert "stopped" in second["traceback"]
    zero_fallback(second)
    assert result["failure_breakdown"]["time_exhausted"] == 1
    assert first.get("error_code") is None and third.get("error_code") is None
    assert not first["time_exhausted"] and not third["time_exhausted"]
    assert result["grader"]["restarts"] == 1
    # Stopped a grace period after the cap, not after the 30 s sleep.
    assert result["grader"]["seconds"] < 25
    not_better(result, mean_score)


def test_a_background_thread_gets_no_compute_off_the_meter(
    grader_image, suite, tmp_path, mean_score
) -> None:
    # On the harness's own connection the thread's requests tangle with the harness's:
    # which MLP fails, and how, depends on the timing (the meter refuses the thread's
    # work off the clock, the tangled socket fails a load or a predict, or kills the
    # entrant's own process: WORKER_EOF). Each way, that MLP gets the zero prediction.
    result = graded(tmp_path, grader_image, suite, "thread", BACKGROUND)
    failed = [e for e in result["per_mlp"] if e.get("error_code")]
    assert failed, result["per_mlp"]
    for entry in failed:
        assert entry["error_code"] in {
            "OFF_CLOCK_COMPUTE",
            "LOAD_ERROR",
            "PREDICT_ERROR",
            "WORKER_EOF",
        }
        zero_fallback(entry)
    not_better(result, mean_score)
    # On its own, the meter refuses it while an MLP is loaded: that MLP fails.
    result = graded(tmp_path, grader_image, suite, "own", BACKGROUND_OWN_CONNECTION)
    failed = [e for e in result["per_mlp"] if e.get("error_code")]
    assert failed, result["per_mlp"]
    for entry in failed:
        assert entry["error_code"] == "OFF_CLOCK_COMPUTE"
        assert "outside predict" in str(entry["error"])
        zero_fallback(entry)
    not_better(result, mean_score)
