"""Processes that try to outlive, outrun or outnumber the clock."""

from __future__ import annotations

import pytest

from tests.hostile.conftest import SECOND, Hostile, Limits, script

pytestmark = pytest.mark.docker

# The supervisor kills at the limit itself, 3 s (the whole limit is the entrant's); the
# host's timer would a margin of 1 s later.
DEADLINE = Limits(timeout_s=3)
DEADLINE_NS = 3 * SECOND

SCRIPTS = {
    # Answers, then forks without end; the pids limit stops it, the deadline kills it.
    "fork_bomb": script(
        """
        answer
        bomb() { bomb | bomb & }
        bomb
        exec attack forkbomb
        """
    ),
    # The entrypoint exits at once; a double-forked, detached daemon keeps writing the
    # output for a second: all of that is on the clock.
    "daemon_writer": script(
        """
        setsid sh -c 'i=0; while [ $i -lt 10 ]; do answer; sleep 0.1; i=$((i+1)); done' &
        exit 0
        """
    ),
    # A right answer, then a daemon that turns it wrong a second after run has exited:
    # the output is read only after the daemon is reaped, so the change counts.
    "daemon_rewrite": script(
        """
        answer
        ( setsid sh -c 'sleep 1; answer "$CONTEST_OUTPUT" "\\010"' & )
        exit 0
        """
    ),
    "double_fork_past_deadline": script(
        """
        answer
        ( setsid sh -c 'exec sleep 60' & )
        exit 0
        """
    ),
    "sleep_past_deadline": script(
        """
        answer
        exec sleep 60
        """
    ),
    "stops_itself": script(
        """
        answer
        kill -STOP $$
        """
    ),
    # A daemon that ignores SIGTERM, SIGHUP and SIGINT, in its own session.
    "ignores_sigterm": script(
        """
        answer
        setsid sh -c 'trap "" TERM HUP INT; while :; do sleep 1; done' &
        trap '' TERM HUP INT
        wait
        """
    ),
    # The entrant's own processes: killing them all from inside is its own business.
    "kills_its_tree": script(
        """
        sleep 30 &
        setsid sleep 30 &
        answer
        kill -9 -1
        exit 0
        """
    ),
}


@pytest.mark.parametrize(
    "case", ["fork_bomb", "double_fork_past_deadline", "sleep_past_deadline", "stops_itself"]
)
def test_what_runs_past_the_deadline_is_killed_and_errs(hostile: Hostile, case: str) -> None:
    outcome = hostile.score(case, DEADLINE)

    run = outcome.run
    assert (run.verdict, run.killed) == ("errored", True)
    assert run.verdict_reason == "The run did not finish within the time limit."
    assert DEADLINE_NS <= outcome.wall_ns < DEADLINE_NS + SECOND


def test_a_process_ignoring_sigterm_is_killed_anyway(hostile: Hostile) -> None:
    outcome = hostile.score("ignores_sigterm", DEADLINE)

    assert (outcome.run.verdict, outcome.run.killed) == ("errored", True)
    assert DEADLINE_NS <= outcome.wall_ns < DEADLINE_NS + SECOND


def test_a_daemon_writing_the_output_after_run_exits_stays_on_the_clock(
    hostile: Hostile,
) -> None:
    outcome = hostile.score("daemon_writer")

    assert outcome.run.verdict == "passed", outcome.why
    assert outcome.run.exit_code == 0
    assert outcome.wall_s >= 1.0  # ten writes, 0.1 s apart


def test_a_daemon_rewriting_the_output_later_is_timed_and_judged(hostile: Hostile) -> None:
    outcome = hostile.score("daemon_rewrite")

    # The output read is the daemon's, after the daemon was reaped.
    assert (outcome.run.verdict, outcome.run.matches) == ("failed", 0)
    assert outcome.wall_s >= 1.0


def test_killing_its_own_processes_is_allowed(hostile: Hostile) -> None:
    outcome = hostile.score("kills_its_tree")

    assert outcome.run.verdict == "passed", outcome.why
    assert outcome.wall_s < 5  # the sleeps did not hold the clock: they were killed
