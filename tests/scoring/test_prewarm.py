"""The warm start around the supervisor: its bounds, the outer timer's allowance for it,
its readings, and who is blamed when the host stops a run before the supervisor's clock
(scoring/run/prewarm.py, scoring/run/runner.py; the walk itself is tested in
tests/supervisor/test_prewarm.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from portal.contests import sandbox
from portal.contests.models import Benchmark
from portal.submissions.models import Run, Submission
from scoring.cohort.staging import StagedRun
from scoring.run import prewarm, runner
from tests.scoring.test_runner import (
    FakeEngine,
    queued,
    refunded,
    spec_for,
    staged,
    supervisor_line,
    the_run,
)

__all__ = ["queued", "staged"]

GIB = 1 << 30


# The bounds -----------------------------------------------------------------------------


def test_the_default_budget_is_2_gib_with_a_time_bound_from_the_floor_rates() -> None:
    bounds = sandbox.prewarm_bounds(run_memory_bytes=8 * GIB)

    assert bounds.budget_bytes == sandbox.PREWARM_DEFAULT_BYTES == 2 * GIB
    assert bounds.names == sandbox.PREWARM_DEFAULT_NAMES
    # 2 GiB at 64 MiB/s is 32 s; 65,536 names at 1,000/s are 65.536 s; plus 1 s.
    assert bounds.time_ms == 32_000 + 65_536 + 1_000


def test_the_budget_is_at_most_half_the_runs_memory() -> None:
    # The pages read are charged to the container: past what it keeps, the walk would
    # only evict what it read first.
    assert sandbox.prewarm_bounds(run_memory_bytes=GIB).budget_bytes == GIB // 2
    assert sandbox.prewarm_bounds(run_memory_bytes=GIB, budget_bytes=100).budget_bytes == 100


def test_a_budget_of_zero_turns_the_walk_off_and_allows_no_time() -> None:
    bounds = sandbox.prewarm_bounds(run_memory_bytes=8 * GIB, budget_bytes=0)
    assert (bounds.budget_bytes, bounds.names, bounds.time_ms) == (0, 0, 0)


def test_a_bigger_budget_gets_a_proportionally_longer_time_bound() -> None:
    small = sandbox.prewarm_bounds(run_memory_bytes=64 * GIB, budget_bytes=GIB)
    large = sandbox.prewarm_bounds(run_memory_bytes=64 * GIB, budget_bytes=4 * GIB)
    assert large.time_ms - small.time_ms == 3 * GIB * 1000 // sandbox.PREWARM_FLOOR_BYTES_PER_S


def test_the_host_setting_overrides_the_default(settings, staged: StagedRun) -> None:
    settings.PODIUM_PREWARM_BYTES = 256 << 20
    spec, benchmark = spec_for(staged)
    entry = spec["entrypoint"]
    options = dict(
        zip(entry[1 : entry.index("--") : 2], entry[2 : entry.index("--") : 2], strict=True)
    )
    expected = sandbox.prewarm_bounds(
        run_memory_bytes=benchmark.run_memory_bytes, budget_bytes=256 << 20
    )

    assert options["--prewarm-bytes"] == str(256 << 20)
    assert options["--prewarm-files"] == str(expected.names)
    assert options["--prewarm-ms"] == str(expected.time_ms)


def test_the_supervisor_is_given_the_default_bounds(settings, staged: StagedRun) -> None:
    settings.PODIUM_PREWARM_BYTES = None
    spec, benchmark = spec_for(staged)  # 3 GiB of memory: half of it, 1.5 GiB
    entry = spec["entrypoint"]

    assert entry[entry.index("--prewarm-bytes") + 1] == str(benchmark.run_memory_bytes // 2)


# The outer timer ------------------------------------------------------------------------


def test_the_outer_timer_adds_the_walks_time_bound_to_the_score_timeout(settings) -> None:
    settings.PODIUM_PREWARM_BYTES = None
    benchmark = Benchmark(score_timeout_s=960, run_memory_bytes=8 * GIB)

    bound_ms = sandbox.prewarm_bounds(run_memory_bytes=8 * GIB).time_ms
    assert runner.outer_timeout_s(benchmark) == 960 + bound_ms / 1000 + 10
    # The supervisor's deadline, counted from a clock that starts at most the walk's
    # bound after the host's start, still ends before the outer timer.
    deadline_s = runner.supervisor_deadline_ms(960) / 1000
    assert bound_ms / 1000 + deadline_s + 1 <= runner.outer_timeout_s(benchmark)

    settings.PODIUM_PREWARM_BYTES = 0
    assert runner.outer_timeout_s(benchmark) == 960 + 10  # the report margin alone


def test_the_host_waits_for_the_outer_timeout(queued, monkeypatch, sent, settings) -> None:
    settings.PODIUM_PREWARM_BYTES = 1 * GIB
    fake = FakeEngine().install(monkeypatch)
    waited: list[float] = []
    wait = fake.wait

    def timed_wait(container_id: str, timeout_s: float) -> int | None:
        waited.append(timeout_s)
        return wait(container_id, timeout_s)

    monkeypatch.setattr(runner.engine, "wait", timed_wait)

    runner.score_submission(queued.pk)

    allowance_s = runner.outer_timeout_s(queued.benchmark) - queued.benchmark.score_timeout_s
    assert allowance_s > 16  # 1 GiB at the floor rate alone
    assert waited and waited[0] > queued.benchmark.score_timeout_s + allowance_s - 5


# The readings ---------------------------------------------------------------------------


def line(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(supervisor_line(**overrides))
    return data


def test_the_readings_are_decoded() -> None:
    warm = prewarm.from_line(
        line(
            prewarm_ns=250_000_000,
            prewarm_bytes=3 << 28,
            prewarm_files=1234,
            prewarm_truncated=True,
        )
    )
    assert warm == prewarm.Prewarm(ms=250.0, bytes=3 << 28, files=1234, truncated=True)
    assert warm.as_dict() == {"ms": 250.0, "bytes": 3 << 28, "files": 1234, "truncated": True}


@pytest.mark.parametrize(
    "bad",
    [
        {"prewarm_ns": -1},
        {"prewarm_bytes": "12"},
        {"prewarm_files": True},
        {"prewarm_files": 1.5},
        {"prewarm_truncated": 0},
        {"prewarm_truncated": None},
    ],
)
def test_a_line_with_bad_readings_is_the_platforms_fault(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="prewarm"):
        prewarm.from_line(line(**bad))
    with pytest.raises(runner.SupervisorError, match="warm start"):
        runner.parse_supervisor_line(supervisor_line(**bad))


def test_a_line_without_readings_is_the_platforms_fault() -> None:
    data = line()
    del data["prewarm_bytes"]
    with pytest.raises(runner.SupervisorError, match="warm start"):
        runner.parse_supervisor_line(json.dumps(data).encode())


def test_the_readings_are_kept_with_the_run_off_the_published_figures(
    queued, monkeypatch, sent
) -> None:
    fake = FakeEngine().install(monkeypatch)
    good = fake.logs

    def logs(container_id: str, *, stdout: bool = True, stderr: bool = False) -> bytes:
        data = json.loads(good(container_id, stdout=stdout, stderr=stderr))
        data |= {"prewarm_ns": 7_000_000, "prewarm_bytes": 99, "prewarm_files": 3}
        return json.dumps(data).encode() + b"\n"

    monkeypatch.setattr(runner.engine, "logs", logs)

    runner.score_submission(queued.pk)

    run = the_run(queued)
    assert run.passed
    assert run.resources["prewarm"] == {"ms": 7.0, "bytes": 99, "files": 3, "truncated": False}


# Who is blamed --------------------------------------------------------------------------


def test_a_run_stopped_before_the_clock_is_a_platform_fault(queued, monkeypatch, sent) -> None:
    # The host's outer timer fired while the supervisor still prewarmed (a stalled disk):
    # the entrant's code never ran, so the attempt must not count.
    fake = FakeEngine(wait_result=None).install(monkeypatch)
    fake.stderr = b""

    runner.score_submission(queued.pk)

    first = the_run(queued)
    queued.refresh_from_db()
    assert first.status == Run.INFRA_FAILED
    assert "before its clock started" in first.verdict_reason
    assert queued.status == Submission.QUEUED  # requeued for try 2
    assert not refunded(queued)
    assert "kill" in fake.calls and fake.calls[-1] == "remove"


def test_a_run_stopped_after_the_clock_still_counts(queued, monkeypatch, sent) -> None:
    FakeEngine(wait_result=None).install(monkeypatch)  # its stderr says "prewarmed"

    runner.score_submission(queued.pk)

    queued.refresh_from_db()
    assert queued.status == Submission.ERRORED
    assert not refunded(queued)


def test_an_oom_before_the_clock_is_a_platform_fault(queued, monkeypatch, sent) -> None:
    fake = FakeEngine().install(monkeypatch)
    fake.wait_result, fake.oom_killed, fake.stderr = 137, True, b""

    runner.score_submission(queued.pk)

    run = the_run(queued)
    assert run.status == Run.INFRA_FAILED
    assert "status 137" in run.verdict_reason
