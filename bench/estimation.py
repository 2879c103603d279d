"""Benchmark: what Podium's grader of metered estimation costs over whestbench's own
(docs/architecture.md, "Metered estimation: the grader").

Three figures:

1. **Grading time.** Mean propagation (``whestbench.estimators``) graded on the same
   ``--n-mlps`` (20) MLPs by ``scoring.estimation.grade.grade`` (the grader container, the
   meter, whestbench's scoring) and by ``whest run --runner subprocess`` (the venv's CLI):
   seconds per MLP of each, end to end, and their ratio, the median of ``--repeats`` (3).
   Also the predict's own wall time per MLP, as each reports it.
2. **The meter's round trip.** ``--ops`` (2,000) tiny ``fnp.add`` calls through
   flopscope-client inside the grader image, in the grader's sandbox, against a metered
   session, over the same calls made in this process with flopscope itself: microseconds
   per operation of each. Each operation drops the last result, so its handle is freed
   on the next one's round trip, as an estimator's temporaries are.

3. **Agreement with the anchor.** Mean and covariance propagation graded on the same
   MLPs by the grader and by ``whest run --runner subprocess``: the largest per-MLP
   difference of their scores and of their FLOPs, each estimator's mean score, and which
   ranks better, on a suite of its own (``--n-mlps`` MLPs 32 wide and 4 deep, 20,000
   samples) at ``--agreement-budget`` (4e6 by default: covariance propagation spends about
   a quarter of it, so its FLOPs count in the score instead of sitting at whestbench's
   0.1 floor).

The suite (``--width`` 256, ``--depth`` 8, ``--samples`` 2,000: the shape of whestbench's
warm-up round, few samples since only the scores' cost is measured) is baked into a
temporary folder first. Exit status 0; 2 when Docker or the grader image is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from portal.estimation.rules import derive_seeds  # noqa: E402
from scoring import engine  # noqa: E402
from scoring.estimation.grade import (  # noqa: E402
    GRADER_IMAGE,
    Limits,
    StaleImage,
    check_image,
    grade,
    make_suite,
)
from scoring.estimation.meter import Meter  # noqa: E402
from scoring.estimation.runner import METER_DIR, Sandbox, container_spec  # noqa: E402

REPRODUCE = "make install base-images && .venv/bin/python bench/estimation.py"

ESTIMATOR = """from whestbench.estimators import {name}


class Estimator({name}):
    pass
"""


def write_submission(folder: Path, estimator: str) -> Path:
    folder.mkdir()
    (folder / "estimator.py").write_text(ESTIMATOR.format(name=estimator))
    manifest = {"entrypoint": {"module": "estimator", "class": "Estimator"}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


OPS_CODE = """
import time
import flopscope.numpy as fnp
a, b = fnp.zeros(4), fnp.ones(4)
c = fnp.add(a, b)
started = time.perf_counter()
for _ in range({ops}):
    c = fnp.add(a, b)
print((time.perf_counter() - started) / {ops} * 1e6)
"""


def limits(budget: int) -> Limits:
    return Limits(
        flop_budget=budget,
        wall_cap_s=60.0,
        residual_cap_s=0.4,
        lambda_flops_per_second=0.0,
        memory_bytes=2 << 30,
        pids_limit=64,
    )


def whest_run(submission: Path, suite: Path, budget: int) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
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
    )
    results: dict[str, Any] = json.loads(done.stdout)["results"]
    return time.monotonic() - started, results


def mean_wall(results: dict[str, Any]) -> float:
    return statistics.mean(float(e["wall_time_s"]) for e in results["per_mlp"])


def grading_figures(args: argparse.Namespace, work: Path, suite: Path) -> None:
    submission = write_submission(work / "mean", "MeanPropagationEstimator")
    ratios, ours_s, theirs_s, ours_wall, theirs_wall = [], [], [], [], []
    for _ in range(args.repeats):
        started = time.monotonic()
        ours = grade(submission, suite, limits(args.budget))
        ours_total = time.monotonic() - started
        theirs_total, theirs = whest_run(submission, suite, args.budget)
        if ours["n_failed_mlps"] or theirs["n_failed_mlps"]:
            print(
                f"failures: grader {ours['failure_breakdown']}, whest {theirs['failure_breakdown']}"
            )
        ours_s.append(ours_total / args.n_mlps)
        theirs_s.append(theirs_total / args.n_mlps)
        ratios.append(ours_total / theirs_total)
        ours_wall.append(mean_wall(ours))
        theirs_wall.append(mean_wall(theirs))
    print(f"suite: {args.n_mlps} MLPs of width {args.width}, depth {args.depth}; mean propagation")
    print(f"grader:                      {statistics.median(ours_s):.3f} s per MLP (end to end)")
    print(f"whest run --runner subprocess: {statistics.median(theirs_s):.3f} s per MLP")
    print(f"ratio (median of {args.repeats}):        {statistics.median(ratios):.2f}")
    print(
        f"predict wall per MLP: grader {statistics.median(ours_wall) * 1e3:.1f} ms, "
        f"whest run {statistics.median(theirs_wall) * 1e3:.1f} ms"
    )


def agreement_figures(args: argparse.Namespace, work: Path) -> None:
    budget = args.agreement_budget
    suite = make_suite(
        work / "agreement-suite",
        n_mlps=args.n_mlps,
        width=32,
        depth=4,
        n_samples=20_000,
        mlp_seeds=derive_seeds("bench", "agreement", args.n_mlps),
    )
    means = {}
    for name in ("MeanPropagationEstimator", "CovariancePropagationEstimator"):
        submission = write_submission(work / f"agree-{name}", name)
        ours = grade(submission, suite, limits(budget))["per_mlp"]
        theirs = whest_run(submission, suite, budget)[1]["per_mlp"]
        score_gap = max(
            abs(a["adjusted_final_layer_score"] - b["adjusted_final_layer_score"])
            for a, b in zip(ours, theirs, strict=True)
        )
        relative = max(
            abs(a["adjusted_final_layer_score"] - b["adjusted_final_layer_score"])
            / abs(b["adjusted_final_layer_score"])
            for a, b in zip(ours, theirs, strict=True)
        )
        flops_gap = max(
            abs(a["flops_used"] - b["flops_used"]) for a, b in zip(ours, theirs, strict=True)
        )
        means[name] = statistics.mean(a["adjusted_final_layer_score"] for a in ours)
        print(
            f"{name} at B={budget:.3g}: largest per-MLP score difference {score_gap:.3g} "
            f"(relative {relative:.3g}), largest FLOP difference {flops_gap:,}; "
            f"mean score {means[name]:.6g} (whest run "
            f"{statistics.mean(b['adjusted_final_layer_score'] for b in theirs):.6g})"
        )
    better = min(means, key=lambda n: means[n])
    print(f"ranks better: {better}")


def local_op_us(ops: int) -> float:
    import flopscope as flops
    import flopscope.numpy as fnp

    with flops.BudgetContext(flop_budget=10**12, quiet=True):
        a, b = fnp.zeros(4), fnp.ones(4)
        c = fnp.add(a, b)
        started = time.perf_counter()
        for _ in range(ops):
            c = fnp.add(a, b)
        del c
        return (time.perf_counter() - started) / ops * 1e6


def remote_op_us(ops: int, work: Path) -> tuple[float, dict[str, Any]]:
    meter = Meter.start(session_timeout_s=120.0)
    container_id = ""
    try:
        spec = container_spec(
            Sandbox(image=GRADER_IMAGE, memory_bytes=1 << 30, pids_limit=64),
            meter_dir=meter.folder,
            submission_dir=work,
            labels={"podium.bench": "estimation"},
        )
        spec["entrypoint"] = ["python3", "-s", "-c", OPS_CODE.format(ops=ops)]
        spec["command"] = []
        meter.open(10**12)
        container_id = engine.create_container(**spec)
        engine.start(container_id)
        code = engine.wait(container_id, 600.0)
        summary = meter.close()
        output = engine.logs(container_id, stdout=True, stderr=True).decode()
        if code != 0:
            raise RuntimeError(f"the client's loop failed ({code}): {output[-2000:]}")
        return float(output.strip().splitlines()[-1]), summary
    finally:
        if container_id:
            engine.remove_container(container_id)
        meter.stop()


def round_trip_figures(args: argparse.Namespace, work: Path) -> None:
    remote = []
    summary: dict[str, Any] = {}
    for _ in range(args.repeats):
        us, summary = remote_op_us(args.ops, work)
        remote.append(us)
    local = [local_op_us(args.ops) for _ in range(args.repeats)]
    breakdown = summary["budget_breakdown"]
    requests = int(summary["comms_summary"]["request_count"])
    print(
        f"fnp.add through the meter ({METER_DIR}, in the image): "
        f"{statistics.median(remote):.0f} us per op"
    )
    print(
        f"fnp.add in this process (flopscope):           {statistics.median(local):.1f} us per op"
    )
    print(f"ratio: {statistics.median(remote) / statistics.median(local):.0f}")
    print(
        f"the meter's session: {requests} requests for {args.ops + 3} ops (frees ride their "
        f"own round trips), residual {breakdown['residual_wall_time_s'] / args.ops * 1e6:.0f} "
        "us per op"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-mlps", type=int, default=20)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--samples", type=int, default=2_000)
    parser.add_argument("--budget", type=int, default=10**9)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ops", type=int, default=2_000)
    parser.add_argument("--agreement-budget", type=int, default=4_000_000)
    args = parser.parse_args()
    if not engine.available():
        print("no Docker Engine here", file=sys.stderr)
        return 2
    try:
        check_image()
    except StaleImage as exc:
        print(f"{exc} ({REPRODUCE})", file=sys.stderr)
        return 2
    print(f"host: {os.cpu_count()} CPUs; reproduce: {REPRODUCE}")
    with tempfile.TemporaryDirectory(prefix="podium-bench-") as folder:
        work = Path(folder)
        work.chmod(0o755)
        suite = make_suite(
            work / "suite",
            n_mlps=args.n_mlps,
            width=args.width,
            depth=args.depth,
            n_samples=args.samples,
            mlp_seeds=derive_seeds("bench", "public", args.n_mlps),
        )
        round_trip_figures(args, work)
        grading_figures(args, work, suite)
        agreement_figures(args, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
