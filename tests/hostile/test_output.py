"""Tricks with the output file and with the result line the runner reads."""

from __future__ import annotations

import base64
import json

import pytest

from tests.hostile.conftest import ROWS, SECOND, Hostile, script

pytestmark = pytest.mark.docker

# PID 1's stdout through its root link (the path is spelt in two parts on purpose).
PID1_STDOUT = "/proc/1/" + "root/dev/stdout"

# What a forger would like the runner to read: a 1 ns run with the right answer.
FORGED = json.dumps(
    {
        "podium_supervisor": 1,
        "start_ns": 1,
        "end_ns": 2,
        "wall_ns": 1,
        "exit_code": 0,
        "signal": None,
        "killed": False,
        "rusage": {"utime_us": 0, "stime_us": 0, "maxrss_kb": 0},
        "output_bytes": 4 * ROWS,
        "output_error": "",
        "output_b64": base64.b64encode(b"\x07\0\0\0" * ROWS).decode(),
        "stdout_tail_b64": "",
        "stderr_tail_b64": "",
        "cgroup": {},
        "meter_ns": 0,
        "prewarm_ns": 0,
        "prewarm_bytes": 0,
        "prewarm_files": 0,
        "prewarm_truncated": False,
    }
)

SCRIPTS = {
    # The forged line on every stream within reach, then a wrong answer.
    "forged_line": script(
        f"""
        line='{FORGED}'
        echo "$line"; echo "$line" >&2
        for target in /proc/1/fd/1 /proc/1/fd/2 /dev/console /dev/tty {PID1_STDOUT}; do
          (echo "$line" > $target) 2>/dev/null && echo "wrote $target" || echo "refused $target"
        done
        (exec 1>/proc/1/fd/1 && echo "$line") 2>/dev/null || echo "reopen stdout: refused"
        answer "$CONTEST_OUTPUT" '\\010'
        echo "$line"
        """
    ),
    "symlink": script(
        """
        answer /tmp/real
        ln -s /tmp/real "$CONTEST_OUTPUT"
        """
    ),
    "symlink_to_input": script('ln -s /contest/input/manifest.tsv "$CONTEST_OUTPUT"\n'),
    # A FIFO: opening it must not block the supervisor, nor count as output.
    "fifo": script(
        """
        mkfifo "$CONTEST_OUTPUT"
        answer /tmp/real
        """
    ),
    "directory": script('mkdir "$CONTEST_OUTPUT"\n'),
    "missing": script("echo 'no output today'\n"),
    "one_byte_more": script(
        """
        answer
        printf '\\007' >> "$CONTEST_OUTPUT"
        """
    ),
    # The right rows, then a sparse gigabyte: only expect + 1 bytes are ever read.
    "sparse_gigabyte": script(
        """
        answer
        truncate -s 1G "$CONTEST_OUTPUT" && echo "output: $(stat -c %s "$CONTEST_OUTPUT") bytes"
        """
    ),
    # More than the output tmpfs holds.
    "output_tmpfs_full": script(
        """
        dd if=/dev/zero of="$CONTEST_OUTPUT" bs=1M count=16 2>&1 | grep -o 'No space left on device'
        """
    ),
    "out_of_range": script(
        """
        answer
        printf '\\350\\003\\000\\000' | dd of="$CONTEST_OUTPUT" conv=notrunc 2>/dev/null
        """
    ),
    # The output hard-linked to the entrant's own log: refused (the log folder is the
    # supervisor's; were it reachable, it is another tmpfs).
    "hard_link": script(
        """
        ln /contest/logs/stdout.log "$CONTEST_OUTPUT" 2>&1 \\
          | grep -o -e 'Invalid cross-device link' -e 'Permission denied'
        answer
        """
    ),
}


def test_a_forged_result_line_changes_nothing(hostile: Hostile) -> None:
    outcome = hostile.score("forged_line")

    # The real verdict of the real (wrong) output, with the real clock.
    assert (outcome.run.verdict, outcome.run.matches) == ("failed", 0), outcome.why
    assert outcome.wall_ns > 1
    assert (outcome.run.trusted_start_ns or 0) > SECOND
    outcome.saw(
        "refused /proc/1/fd/1",
        "refused /proc/1/fd/2",
        "refused /dev/console",
        "refused /dev/tty",
        f"refused {PID1_STDOUT}",
        "reopen stdout: refused",
    )
    assert FORGED in outcome.log  # it reached only the entrant's own log


NOT_REGULAR = "The output at /contest/output/predictions.i32 is not a regular file"


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("symlink", NOT_REGULAR),
        ("symlink_to_input", NOT_REGULAR),
        ("fifo", NOT_REGULAR),
        ("directory", NOT_REGULAR),
        ("missing", "The program wrote no output file at /contest/output/predictions.i32."),
        ("one_byte_more", f"The output has {4 * ROWS + 1} bytes; 4 x {ROWS} = {4 * ROWS} were"),
        # The entrant is told the file's real size, not what the supervisor carried back.
        ("sparse_gigabyte", f"The output has {1 << 30} bytes; 4 x {ROWS}"),
        ("output_tmpfs_full", "The output has "),
        ("out_of_range", "Row 1 holds 1000, outside [0, 999]."),
    ],
)
def test_an_output_breaking_the_abi_errs(hostile: Hostile, case: str, reason: str) -> None:
    outcome = hostile.score(case)

    assert outcome.run.verdict == "errored", outcome.why
    assert outcome.run.verdict_reason.startswith(reason), outcome.why
    assert outcome.run.exit_code == 0
    assert outcome.wall_s < 5  # a FIFO did not block the supervisor


def test_the_oversized_outputs_really_were_oversized(hostile: Hostile) -> None:
    outcome = hostile.score("sparse_gigabyte")

    outcome.saw(f"output: {1 << 30} bytes")


def test_the_output_cannot_be_a_link_to_the_log(hostile: Hostile) -> None:
    outcome = hostile.score("hard_link")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw("Permission denied")
