"""``podium watch``: the timeline and new log lines as they appear, the verdict, the exit code.

Each time ``watch`` sleeps between polls, the test moves the submission one step through
the services the workers call, and writes its logs, as a build and a scored run would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from podium_cli import watch
from podium_cli.pack import pack_folder
from portal.contests.models import Cohort
from portal.core import storage
from portal.submissions.builds import submission_build_finished
from portal.submissions.intake import submission_accept
from portal.submissions.models import Run, Submission
from portal.submissions.runs import run_claim, run_mark_running, run_record_verdict
from portal.submissions.services import submission_transition
from portal.submissions.verification import run_record_verification
from tests import factories
from tests.cli.conftest import Podium

Step = Callable[[], None]


@pytest.fixture
def submission(
    server: str,
    benchmark: Any,
    alice: Any,
    sign_in: Callable[[Any], str],
    ready_environment: Callable[..., Any],
    kit: Path,
) -> Submission:
    sign_in(alice)
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    return submission_accept(
        entrant=alice,
        benchmark=benchmark,
        environment=ready_environment(alice, benchmark),
        source_file=_archive(kit),
        source_name="kit.tar.gz",
    )


def _archive(folder: Path) -> Path:
    path = folder.parent / "kit.tar.gz"
    pack_folder(folder, path)
    return path


def steps(monkeypatch: pytest.MonkeyPatch, *moves: Step) -> list[float]:
    """Make each sleep of ``watch`` take the next step; record the intervals it slept."""
    pending: Iterator[Step] = iter(moves)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        move = next(pending, None)
        if move is None:
            pytest.fail("watch kept polling after the last step")
        move()

    monkeypatch.setattr(watch, "sleep", sleep)
    return slept


def write(path: Path, *lines: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as log:
        log.writelines(f"{line}\n" for line in lines)


class Pipeline:
    """The steps a build worker and a scoring worker take, one call each."""

    def __init__(self, submission: Submission) -> None:
        self.id = submission.pk
        self.build_log = storage.submission_build_log(self.id)
        self.run: Run | None = None

    def start_build(self) -> None:
        submission_transition(self.id, frm=["accepted"], to="building")
        write(self.build_log, "step 1/2: pip install", "step 2/2: compile")

    def more_build_output(self) -> None:
        write(self.build_log, "compiled 3 files")

    def finish_build(self, ok: bool = True) -> None:
        write(self.build_log, "build done" if ok else "error: no compiler")
        submission_build_finished(
            submission_id=self.id,
            ok=ok,
            image_tag="podium/submission:test",
            image_digest="sha256:" + "b" * 64,
            image_bytes=1000,
            reason="" if ok else "build.sh exited with status 4",
        )

    def start_run(self) -> None:
        self.run = run_claim(self.id, lease_s=60)
        assert self.run is not None
        run_mark_running(run_id=self.run.pk, lease_s=60)
        write(storage.run_log(self.run.pk), "loading model")

    def verdict(self, status: str, matches: int) -> None:
        assert self.run is not None
        write(storage.run_log(self.run.pk), f"predicted {matches}")
        run_record_verdict(
            run_id=self.run.pk,
            status=status,
            reason="" if status == "passed" else f"{matches} of 4 match; 4 needed",
            wall_time_ns=123_456_789,
            matches=matches,
            total=4,
        )


def timeline(output: str) -> list[str]:
    """The status words of the printed timeline lines (``HH:MM:SS  status  (note)``)."""
    return [line.split()[1] for line in output.splitlines() if line[:2].isdigit()]


def test_a_passing_submission_is_followed_to_its_verdict_and_exits_0(
    submission: Submission,
    benchmark: Any,
    podium: Podium,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipeline = Pipeline(submission)
    slept = steps(
        monkeypatch,
        pipeline.start_build,
        pipeline.more_build_output,
        pipeline.finish_build,
        pipeline.start_run,
        lambda: pipeline.verdict("passed", 4),
    )

    result = podium("watch", str(submission.pk), "--interval", "0.5")

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith(
        f"Submission {submission.pk}: official attempt on {benchmark.slug}, environment "
    )
    assert timeline(result.out) == [
        "accepted", "building", "queued", "staging", "running", "passed",
    ]  # fmt: skip
    assert [line for line in lines if line.startswith("  ")] == [
        "  build | step 1/2: pip install",
        "  build | step 2/2: compile",
        "  build | compiled 3 files",
        "  build | build done",
        "  queue | number 1 in line; no estimate: no scoring host of its class is online, "
        "or none has timed a run",
        "  run   | loading model",
        "  run   | predicted 4",
    ]
    # Log lines sit between the steps they belong to.
    assert lines.index("  build | build done") < next(
        index for index, line in enumerate(lines) if line.endswith("  queued")
    )
    assert lines[-1] == "Verdict: passed, 4/4 matches, wall time 123.456789 ms (123456789 ns)"
    assert slept == [0.5] * 5

    board = podium("leaderboard", benchmark.slug)
    assert board.out.splitlines()[1].split()[:5] == ["1", "alice", "123.456789", "ms", "4/4"]


def test_a_failing_submission_exits_1_with_its_reason(
    submission: Submission, podium: Podium, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = Pipeline(submission)
    steps(
        monkeypatch,
        pipeline.start_build,
        pipeline.finish_build,
        pipeline.start_run,
        lambda: pipeline.verdict("failed", 1),
    )

    result = podium("watch", str(submission.pk), "--no-logs")

    assert result.code == 1
    assert timeline(result.out)[-1] == "failed"
    assert "  run   |" not in result.out
    assert result.out.splitlines()[-2:] == [
        "Verdict: failed, 1/4 matches, wall time 123.456789 ms (123456789 ns)",
        "Reason: 1 of 4 match; 4 needed",
    ]


def test_a_run_rejected_by_its_verification_is_followed_through_it_and_exits_1(
    submission: Submission, podium: Podium, monkeypatch: pytest.MonkeyPatch
) -> None:
    submission.benchmark.verify_top = 20
    submission.benchmark.save()
    pipeline = Pipeline(submission)

    def verification_fails() -> None:
        factories.ready_sets(Run.objects.get(submission_id=pipeline.id, purpose=Run.SCORE).cohort)
        run = run_claim(pipeline.id, lease_s=60)
        assert run is not None and run.purpose == Run.VERIFY
        run_mark_running(run_id=run.pk, lease_s=60)
        run_record_verification(
            run_id=run.pk, status="failed", reason="0 of 4 match; 4 needed", wall_time_ns=1
        )

    steps(
        monkeypatch,
        pipeline.start_build,
        pipeline.finish_build,
        pipeline.start_run,
        lambda: pipeline.verdict("passed", 4),
        verification_fails,
    )

    result = podium("watch", str(submission.pk), "--no-logs")

    assert result.code == 1
    assert timeline(result.out)[-2:] == ["verifying", "rejected_verification"]
    assert result.out.splitlines()[-2].startswith(
        "Verdict: rejected_verification, 4/4 matches, wall time 123.456789 ms"
    )
    assert "Reason: Verification failed: the verification run did not pass" in result.out


def test_a_verification_timing_miss_shows_re_measuring_and_the_re_measure_ranks_it(
    submission: Submission, podium: Podium, monkeypatch: pytest.MonkeyPatch
) -> None:
    submission.benchmark.verify_top = 20
    submission.benchmark.save()
    pipeline = Pipeline(submission)

    def verification(wall_time_ns: int) -> Step:
        def record() -> None:
            factories.ready_sets(
                Run.objects.get(submission_id=pipeline.id, purpose=Run.SCORE).cohort
            )
            run = run_claim(pipeline.id, lease_s=60)
            assert run is not None and run.purpose == Run.VERIFY
            run_mark_running(run_id=run.pk, lease_s=60)
            run_record_verification(
                run_id=run.pk, status="passed", reason="", wall_time_ns=wall_time_ns
            )

        return record

    steps(
        monkeypatch,
        pipeline.start_build,
        pipeline.finish_build,
        pipeline.start_run,
        lambda: pipeline.verdict("passed", 4),
        verification(300_000_000),  # 143% (177 ms) slower than the official 123.456789 ms
        verification(125_000_000),
    )

    result = podium("watch", str(submission.pk), "--no-logs")

    assert result.code == 0, result.err
    assert timeline(result.out)[-3:] == ["verifying", "verifying", "passed"]
    remeasuring = [line for line in result.out.splitlines() if "re-measuring" in line]
    assert remeasuring[0].endswith(
        "verifying  (re-measuring (2 of 3): the verification run took 0.300 s against the "
        "official 0.123 s, more than 10% slower and more than 100 ms.)"
    )
    assert remeasuring[1] == (
        "  verify | re-measuring (2 of 3): the verification was slower than allowed; "
        "judged on the fastest run"
    )
    assert len(remeasuring) == 2  # shown once
    assert result.out.splitlines()[-1].startswith("Verdict: passed, 4/4 matches")


def test_a_waiting_submission_shows_its_place_in_line_once_per_change(
    submission: Submission, podium: Podium, monkeypatch: pytest.MonkeyPatch
) -> None:
    from portal.hosts.models import ScoringHost

    pipeline = Pipeline(submission)
    pipeline.start_build()
    pipeline.finish_build()

    def a_host_comes_online() -> None:
        now = timezone.now()
        ScoringHost.objects.create(
            name="alpha",
            hardware_class_id=submission.benchmark.hardware_class_id,
            registered_at=now,
            last_heartbeat_at=now,
        )

    steps(
        monkeypatch,
        lambda: None,  # nothing changes: the line is not printed again
        a_host_comes_online,  # still no run timed: no estimate either
        pipeline.start_run,
        lambda: pipeline.verdict("passed", 4),
    )

    result = podium("watch", str(submission.pk), "--no-logs")

    assert result.code == 0, result.err
    queue_lines = [line for line in result.out.splitlines() if line.startswith("  queue |")]
    assert queue_lines == [
        "  queue | number 1 in line; no estimate: no scoring host of its class is online, "
        "or none has timed a run"
    ]


def test_a_failed_build_shows_the_end_of_its_log_and_exits_1(
    submission: Submission, podium: Podium, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = Pipeline(submission)
    steps(monkeypatch, pipeline.start_build, lambda: pipeline.finish_build(ok=False))

    result = podium("watch", str(submission.pk))

    assert result.code == 1
    assert timeline(result.out) == ["accepted", "building", "build_failed"]
    assert "  build | error: no compiler" in result.out.splitlines()
    assert result.out.splitlines()[-2:] == [
        "Verdict: build_failed",
        "Reason: build.sh exited with status 4",
    ]


def test_a_finished_submission_is_shown_at_once(
    submission: Submission, podium: Podium, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = Pipeline(submission)
    for move in (pipeline.start_build, pipeline.finish_build, pipeline.start_run):
        move()
    pipeline.verdict("passed", 4)
    steps(monkeypatch)  # no sleep expected

    result = podium("watch", str(submission.pk))

    assert result.code == 0, result.err
    assert timeline(result.out) == [
        "accepted", "building", "queued", "staging", "running", "passed",
    ]  # fmt: skip
    assert result.out.count("  build | ") == 3
    assert result.out.count("  run   | ") == 2


def test_ctrl_c_stops_watching_and_says_the_submission_carries_on(
    submission: Submission, podium: Podium, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(watch, "sleep", interrupted)

    result = podium("watch", str(submission.pk))

    assert result.code == 130
    assert timeline(result.out) == ["accepted"]
    assert result.err.strip() == (
        f"Stopped watching; submission {submission.pk} carries on "
        f"(`podium watch {submission.pk}` to follow it again)."
    )


def test_someone_elses_submission_is_not_found(
    submission: Submission, bob: Any, sign_in: Callable[[Any], str], podium: Podium
) -> None:
    sign_in(bob)

    result = podium("watch", str(submission.pk))

    assert result.code == 2
    assert result.err == "podium: Not found: No such submission.\n"


def test_an_interval_must_be_positive(podium: Podium, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        podium("watch", "1", "--interval", "0")

    assert exit_info.value.code == 2
    assert "give a number of seconds above 0" in capsys.readouterr().err


def test_overlap_finds_only_the_new_lines_of_a_sliding_tail() -> None:
    assert watch._overlap(["a", "b", "c"], ["b", "c", "d"]) == 2
    assert watch._overlap(["a", "b"], ["a", "b", "c"]) == 2
    assert watch._overlap(["x"], ["a", "b"]) == 0
    assert watch._overlap(["a", "a"], ["a", "a", "a"]) == 2
