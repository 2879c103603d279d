"""Grading an estimator on this machine, off the portal: the program behind ``podium run
--local`` on a metered-estimation phase (docs/api.md, "Metered estimation").

    python -m scoring.estimation.local --archive submission.tar.gz --suite DIR --rules FILE

``--archive`` is the tarball ``whest package`` makes, ``--suite`` a whestbench dataset
folder (the phase's public suite, ``podium suite``), ``--rules`` the phase's rules as the
API gives them (``GET /benchmarks/{slug}/estimation/``'s ``rules``). The archive is
unpacked as a scoring host unpacks an accepted one and graded by :func:`grade.grade`, the
scoring host's own grader: the grader image (``make base-images``), the trusted meter
outside it, whestbench's scoring. What it prints on standard output is one JSON object,
the grade as the entry page shows it (``mlps``: the per-MLP rows; ``score``, ``mse``,
``mean_flops``, ``mean_effective_compute``, ``ratio``, ``fallbacks``, ``grader``); progress
and problems go to standard error. Exit status 0 when graded, 2 when it could not be
(no Docker Engine, no grader image, an archive or suite it cannot read).

On this machine the entrant's code, and the meter computing for it, get the first
``entrant_cores`` CPUs this process may use, where it may use more (the rest stay free
for everything else); on fewer they share them all, as on a scoring host too small to
split.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from portal.core import cpus
from portal.estimation import rules
from scoring import engine
from scoring.estimation import grade as grader
from scoring.estimation.meter import MeterError
from scoring.estimation.runner import GraderFault

EXIT_GRADED = 0
EXIT_NOT_GRADED = 2


def local_cpuset(cores: int, available: Sequence[int]) -> str | None:
    """The entrant's CPUs here (its container's and the meter's): the first ``cores`` of
    ``available`` when there are more, else None (shared)."""
    chosen = sorted(available)
    if cores < 1 or len(chosen) <= cores:
        return None
    return cpus.format_cpu_list(chosen[:cores])


def limits_of(phase: Mapping[str, Any], cpuset: str | None) -> grader.Limits:
    """The grader's limits from the phase's rules as the API words them."""
    return grader.phase_limits(
        flop_budget=int(phase["flop_budget"]),
        wall_cap_s=float(phase["wall_cap_s"]),
        residual_cap_ms=phase["residual_cap_ms"] if phase["residual_rule"] == "capped" else None,
        lambda_flops_per_second=float(phase["lambda_flops_per_second"]),
        memory_bytes=int(phase["memory_bytes"]),
        pids_limit=int(phase["pids_limit"]),
        cpuset=cpuset,
    )


def report(grade: Mapping[str, Any], lambda_flops_per_second: float) -> dict[str, Any]:
    """The grade as the entry page shows it, every MLP counted (a local suite has no
    withheld half)."""
    rows = rules.mlp_rows(grade)
    figures = rules.grade_figures(rows, lambda_flops_per_second)
    return {
        "mlps": [row.as_dict() for row in rows],
        "score": figures.score,
        "mse": figures.mse,
        "mean_flops": figures.mean_flops,
        "mean_effective_compute": figures.mean_effective_compute,
        "ratio": figures.ratio,
        "fallbacks": figures.fallbacks,
        "grader": dict(grade.get("grader") or {}),
    }


def _progress(done: int, total: int) -> None:
    print(f"graded MLP {done} of {total}", file=sys.stderr, flush=True)


def run(archive: Path, suite: Path, phase: Mapping[str, Any]) -> dict[str, Any]:
    """Unpack ``archive`` and grade it on ``suite`` under ``phase``'s rules."""
    cpuset = local_cpuset(int(phase["entrant_cores"]), sorted(os.sched_getaffinity(0)))
    limits = limits_of(phase, cpuset)
    with tempfile.TemporaryDirectory(prefix="podium-local-entry-") as work:
        folder = grader.unpack(archive, Path(work) / "submission")
        grade = grader.grade(folder, suite, limits, on_mlp=_progress)
    return report(grade, float(phase["lambda_flops_per_second"]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scoring.estimation.local", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--archive", type=Path, required=True)
    parser.add_argument("--suite", type=Path, required=True)
    parser.add_argument("--rules", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        phase = json.loads(args.rules.read_text())
        result = run(args.archive, args.suite, phase)
    except grader.StaleImage as exc:
        print(
            f"The grader image is not here ({exc}); make it with `make base-images` in "
            "Podium's source.",
            file=sys.stderr,
        )
        return EXIT_NOT_GRADED
    except engine.EngineError as exc:
        print(f"The Docker Engine could not be used: {exc}", file=sys.stderr)
        return EXIT_NOT_GRADED
    except (GraderFault, MeterError) as exc:
        print(f"The grader failed ({type(exc).__name__}): {exc}", file=sys.stderr)
        return EXIT_NOT_GRADED
    except (OSError, ValueError, KeyError, tarfile.TarError) as exc:
        print(f"Not graded: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_NOT_GRADED
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return EXIT_GRADED


if __name__ == "__main__":
    sys.exit(main())
