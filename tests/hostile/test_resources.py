"""Memory, disk and log bombs: bounded by the sandbox, charged to the entrant, never to us."""

from __future__ import annotations

import pytest

from portal.contests import sandbox
from tests.hostile.conftest import SECOND, Hostile, Limits, script

pytestmark = pytest.mark.docker

SIGKILL = 9
SCRIPTS = {
    "memory_bomb": script(
        """
        answer
        exec attack membomb
        """
    ),
    # Files on a tmpfs are charged to the container's memory and outlive the process
    # that wrote them: the OOM killer must take the writer, and the supervisor must
    # still have the memory to report with the tmpfs full.
    "tmp_beyond_memory": script(
        """
        answer
        exec cat /dev/zero > /tmp/fill
        """
    ),
    "shm_beyond_memory": script(
        """
        answer
        exec cat /dev/zero > /dev/shm/fill
        """
    ),
    # Kernel memory (pipe buffers) is charged too, and shows in no process's RSS.
    "pipe_flood": script(
        """
        answer
        exec attack pipes
        """
    ),
    # The same, after lowering its own oom_score_adj as far as the kernel lets it.
    "pipe_flood_oom_immune": script(
        """
        echo -1000 > /proc/self/oom_score_adj 2>/dev/null || echo 0 > /proc/self/oom_score_adj
        echo "oom_score_adj: $(cat /proc/self/oom_score_adj)"
        answer
        exec attack pipes
        """
    ),
    "tmp_fill": script(
        """
        dd if=/dev/zero of=/tmp/fill bs=1M 2>&1 | grep -o 'No space left on device'
        answer
        """
    ),
    # 4 GiB asked for on each stream; the log tmpfs (64 MiB for both) stops them.
    "log_flood": script(
        """
        yes 'flood on stdout' | head -c 1048576 > /tmp/chunk
        i=0; while [ $i -lt 4096 ] && cat /tmp/chunk; do i=$((i+1)); done
        i=0; while [ $i -lt 4096 ] && cat /tmp/chunk >&2; do i=$((i+1)); done
        answer
        """
    ),
    # What a DataLoader's workers put in shared memory: the benchmark sizes /dev/shm.
    "shm_100_mib": script(
        """
        dd if=/dev/zero of=/dev/shm/batches bs=1M count=100 2>&1 \\
            | grep -o 'No space left on device' || echo "shm: 100 MiB written"
        answer
        """
    ),
    "many_files": script(
        """
        cd /tmp && attack files 50000
        cd /dev/shm && attack files 20000
        answer
        """
    ),
    # A million empty files in each writable folder: no block is used, only inodes (and
    # the kernel memory behind them). The caps stop each flood at once, the answer can no
    # longer be written, and the run ends at once, its log saying why.
    "inode_flood": script(
        """
        cd /contest/output && attack files 1000000
        cd /tmp && attack files 1000000
        cd /dev/shm && attack files 1000000
        answer
        """
    ),
    "crash_without_core": script(
        """
        cd /tmp && sh -c 'kill -SEGV $$'
        echo "crashed: $?, core files: $(ls /tmp | grep -c core)"
        answer
        """
    ),
}


def test_a_memory_bomb_is_killed_and_errs(hostile: Hostile) -> None:
    outcome = hostile.score("memory_bomb", Limits(memory=64 << 20))

    assert (outcome.run.verdict, outcome.run.exit_signal) == ("errored", SIGKILL)
    assert outcome.run.verdict_reason == "The program was stopped by signal 9 (SIGKILL)."


@pytest.mark.parametrize("case", ["tmp_beyond_memory", "shm_beyond_memory"])
def test_a_tmpfs_filling_memory_errs_and_the_supervisor_still_reports(
    hostile: Hostile, case: str
) -> None:
    # /tmp and /dev/shm (256 MiB each) are larger than the 48 MiB of memory (the admin
    # refuses such a shared memory size; the sandbox does not rely on it).
    outcome = hostile.score(case, Limits(memory=48 << 20, tmpfs=256 << 20, shm=256 << 20))

    assert (outcome.run.verdict, outcome.run.exit_signal) == ("errored", SIGKILL)


def test_a_kernel_memory_flood_errs(hostile: Hostile) -> None:
    outcome = hostile.score("pipe_flood", Limits(timeout_s=3, memory=48 << 20))

    # Either the OOM killer takes it or its writes fail and it waits for the deadline.
    assert outcome.run.verdict == "errored", outcome.why
    assert outcome.run.exit_signal == SIGKILL


def test_an_entrant_lowering_its_oom_score_still_gets_its_own_verdict(hostile: Hostile) -> None:
    # Where the engine cannot give PID 1 -1000 (see PODIUM_RUN_OOM_SCORE_ADJ), the OOM
    # killer may pick the supervisor; the container's OOM flag then makes the run the
    # entrant's error, never a platform fault with a free retry.
    outcome = hostile.score(
        "pipe_flood_oom_immune",
        Limits(timeout_s=3, memory=48 << 20, supervisor_may_be_oom_killed=True),
    )

    assert outcome.run.verdict == "errored", outcome.why


def test_filling_tmp_only_fills_tmp(hostile: Hostile) -> None:
    outcome = hostile.score("tmp_fill")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw("No space left on device")


def test_a_log_flood_is_bounded_by_the_log_tmpfs(hostile: Hostile) -> None:
    outcome = hostile.score("log_flood", Limits(memory=256 << 20))

    assert outcome.run.verdict == "passed", outcome.why
    assert outcome.wall_s < 10
    # Only the tails come back: what the web shows stays small.
    assert "flood on stdout" in outcome.log
    assert sandbox.TAIL_BYTES <= len(outcome.log.encode()) <= 2 * sandbox.TAIL_BYTES + 100


def test_shared_memory_is_the_size_the_benchmark_gives(hostile: Hostile) -> None:
    small = hostile.score("shm_100_mib")  # the default: 64 MiB

    assert small.run.verdict == "passed", small.why
    small.saw("No space left on device")

    large = hostile.score("shm_100_mib", Limits(memory=512 << 20, shm=256 << 20))

    assert large.run.verdict == "passed", large.why
    large.saw("shm: 100 MiB written")
    assert "No space left on device" not in large.log


def test_many_files_in_the_tmpfs_mounts_harm_nobody(hostile: Hostile) -> None:
    outcome = hostile.score("many_files")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw("files: 50000 made", "files: 20000 made")
    assert outcome.wall_ns < 10 * SECOND


def test_a_crash_leaves_no_core_file(hostile: Hostile) -> None:
    outcome = hostile.score("crash_without_core")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw("crashed: 139, core files: 0")


def test_an_inode_flood_fails_fast_and_errs_promptly(hostile: Hostile) -> None:
    outcome = hostile.score("inode_flood", Limits(memory=512 << 20))

    # The answer's write failed, so the program failed: its own verdict, long before
    # the deadline.
    assert outcome.run.verdict == "errored", outcome.why
    assert outcome.run.verdict_reason == "The program exited with code 1.", outcome.why
    assert not outcome.run.killed
    assert outcome.wall_ns < 5 * SECOND
    # Each folder refused new files at its inode cap (the folder itself takes one).
    outcome.saw(f"files: {sandbox.OUTPUT_INODES - 1} made")
    outcome.saw(
        f"files: {sandbox.SCRATCH_INODES - 1} made", f"files: {sandbox.SHM_INODES - 1} made"
    )
    assert outcome.log.count("files: No space left on device") == 3, outcome.log
    assert "predictions.i32: No space left on device" in outcome.log  # the answer, on stderr
