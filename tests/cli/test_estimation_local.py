"""`podium run --local BENCHMARK ARCHIVE` on a metered-estimation phase: the tarball is
checked as `podium validate` checks it, then graded here on the phase's public suite by
Podium's own grader (the grader image, the meter outside it), printing the entry page's
figures, with no entry made and nothing charged."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from portal.estimation.models import Entry
from scoring.estimation import grade
from scoring.estimation import local as grader_program
from scoring.estimation.meter import parse_cpuset
from tests.cli.conftest import Podium
from tests.whest import whest_package


@pytest.fixture
def entrant(server: str, alice: Any, sign_in: Callable[[Any], str]) -> Any:
    sign_in(alice)
    return alice


OVER_BUDGET = """\
import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    calls = 0

    def predict(self, mlp, budget):
        self.calls += 1
        if self.calls % 2:  # every other MLP
            block = fnp.ones((1000, 1000))
            for _ in range(4):  # each add is a million FLOPs: past the budget
                block = fnp.add(block, block)
        return fnp.zeros((mlp.depth, mlp.width))
"""


# A phase's rules as the API gives them (the capped rule).
RULES = {
    "flop_budget": 1_000_000, "wall_cap_s": 120, "residual_rule": "capped",
    "residual_cap_ms": 400, "lambda_flops_per_second": 1e11,
    "memory_bytes": 1 << 30, "pids_limit": 64, "entrant_cores": 1,
}  # fmt: skip


def _no_grader(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the grader was started")


# Docker-free: what is refused before the grader starts ----------------------------------


def test_a_hostile_archive_is_named_and_never_graded(
    entrant: Any,
    phase: Any,
    podium: Podium,
    hostile_tarball: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(subprocess, "run", _no_grader)
    archive = hostile_tarball("symlink_out")

    result = podium("run", "--local", phase.slug, str(archive))

    assert result.code == 1
    assert "out: a link to ../../etc, outside the archive" in result.out
    assert result.out.splitlines()[-1].startswith(f"{archive}: would be refused (")


def test_without_podiums_grader_it_says_how_to_get_it(
    entrant: Any,
    phase: Any,
    podium: Podium,
    whest_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    monkeypatch.setattr(subprocess, "run", _no_grader)

    result = podium("run", "--local", phase.slug, str(whest_tarball))

    assert result.code == 2
    assert "Podium's own grader, which is not installed here" in result.err
    assert "make base-images" in result.err


def test_a_folder_or_a_dockerfile_does_not_apply_to_an_estimation_phase(
    entrant: Any, phase: Any, podium: Podium, whest_tarball: Path, tmp_path: Path
) -> None:
    folder = podium("run", "--local", phase.slug, str(tmp_path))
    dockerfile = podium(
        "run", "--local", phase.slug, str(whest_tarball), "--dockerfile", "Dockerfile"
    )

    assert folder.code == 2 and "grades the tarball `whest package" in folder.err
    assert dockerfile.code == 2
    assert "has no environments: --dockerfile does not apply" in dockerfile.err


def test_a_suite_does_not_apply_to_a_timed_benchmark(
    entrant: Any, benchmark: Any, podium: Podium, tmp_path: Path
) -> None:
    result = podium("run", "--local", benchmark.slug, str(tmp_path), "--suite", str(tmp_path))

    assert result.code == 2
    assert "is not a metered-estimation phase: --suite does not apply" in result.err


def test_a_folder_that_is_no_suite_is_refused(
    entrant: Any, phase: Any, podium: Podium, whest_tarball: Path, tmp_path: Path
) -> None:
    result = podium("run", "--local", phase.slug, str(whest_tarball), "--suite", str(tmp_path))

    assert result.code == 2
    assert "is not a suite; `podium suite` downloads one" in result.err


def test_a_grader_that_stops_is_reported_not_printed_as_a_grade(
    entrant: Any,
    phase: Any,
    podium: Podium,
    whest_tarball: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[list[str]] = []

    def stopped(argv: list[str], **kwargs: Any) -> Any:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 2, stdout=b"")

    monkeypatch.setattr(subprocess, "run", stopped)

    result = podium("run", "--local", phase.slug, str(whest_tarball))

    assert result.code == 2
    assert "The local grade did not finish" in result.err
    assert "Score" not in result.out
    assert calls[0][1:3] == ["-m", "scoring.estimation.local"]


def test_the_entrants_cpus_are_the_first_where_there_are_more() -> None:
    assert grader_program.local_cpuset(1, [3, 1, 2, 0]) == "0"
    assert parse_cpuset(grader_program.local_cpuset(2, [0, 1, 2, 3]) or "") == {0, 1}
    assert grader_program.local_cpuset(2, [0, 1]) is None  # too few to split: shared
    assert grader_program.local_cpuset(1, [5]) is None


def test_an_archive_that_is_no_tarball_is_not_graded(tmp_path: Path, capsys: Any) -> None:
    archive = tmp_path / "sub.tar.gz"
    archive.write_bytes(b"not a tarball")
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES))

    code = grader_program.main(
        ["--archive", str(archive), "--suite", str(tmp_path), "--rules", str(rules)]
    )

    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no grade printed
    assert captured.err.startswith("Not graded: ReadError")


def test_without_the_grader_image_it_says_how_to_make_it(
    tmp_path: Path, whest_tarball: Path, baked_dataset: Path, capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    def missing(image: str) -> None:
        raise grade.StaleImage(f"{image} is not here")

    monkeypatch.setattr(grade, "check_image", missing)
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES))

    code = grader_program.main(
        ["--archive", str(whest_tarball), "--suite", str(baked_dataset), "--rules", str(rules)]
    )

    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "make it with `make base-images`" in captured.err


def test_the_rules_the_api_gives_become_the_scoring_hosts_limits() -> None:
    capped = RULES
    priced = {**capped, "residual_rule": "priced", "residual_cap_ms": None}

    a = grader_program.limits_of(capped, "0")
    b = grader_program.limits_of(priced, None)

    assert (a.residual_cap_s, a.lambda_flops_per_second, a.cpuset) == (0.4, 0.0, "0")
    assert (b.residual_cap_s, b.lambda_flops_per_second, b.cpuset) == (None, 1e11, None)
    assert (a.memory_bytes, a.pids_limit, a.flop_budget) == (1 << 30, 64, 1_000_000)


# With the grader: Docker, the grader image, the meter ----------------------------------


@pytest.mark.docker
def test_run_local_grades_on_the_public_suite_and_charges_nothing(
    entrant: Any, phase: Any, podium: Podium, whest_tarball: Path
) -> None:
    result = podium("run", "--local", phase.slug, str(whest_tarball))

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    score_line = next(line for line in lines if line.startswith("Score "))
    assert "on 4 public MLPs" in score_line
    assert "fallbacks 0." in result.out
    assert lines[-1].endswith("no entry was made and nothing was charged.")
    table = [line for line in lines if line.split()[:1] in (["0"], ["1"], ["2"], ["3"])]
    assert len(table) == 4
    assert not Entry.objects.exists()


@pytest.mark.docker
def test_run_local_names_the_mlps_that_fell_back(
    entrant: Any, phase: Any, podium: Podium, tmp_path: Path
) -> None:
    archive = whest_package(tmp_path / "over", OVER_BUDGET)
    suite = tmp_path / "suite"
    assert podium("suite", phase.slug, "-o", str(suite)).code == 0

    result = podium("run", "--local", phase.slug, str(archive), "--suite", str(suite))

    assert result.code == 1, result.err
    over = [line for line in result.out.splitlines() if "over the FLOP budget" in line]
    answered = [
        line
        for line in result.out.splitlines()
        if line.split()[:1] in (["0"], ["1"], ["2"], ["3"]) and "over the" not in line
    ]
    assert len(over) == 2 and len(answered) == 2  # where it spent too much, and only there
    assert f"fallbacks {len(over)}." in result.out
