"""Attacks on the trusted supervisor itself (PID 1): signals, ptrace, limits, priorities."""

from __future__ import annotations

import platform

import pytest

from tests.hostile.conftest import Hostile, script

pytestmark = pytest.mark.docker

DENIED = "Operation not permitted"

SCRIPTS = {
    # Signals from inside the namespace to an init without handlers are dropped, a
    # blocked SIGCHLD only wakes it up; kill -1 reaches every process but init.
    "signals": script(
        """
        kill -9 1; echo "kill -9 1: $?"
        kill -STOP 1; echo "kill -STOP 1: $?"
        kill -TERM 1; kill -INT 1; kill -HUP 1; kill -SEGV 1; kill -USR1 1
        i=0; while [ $i -lt 2000 ]; do kill -CHLD 1; i=$((i+1)); done
        sleep 30 &
        kill -9 -1; echo "kill -9 -1: $?"
        wait; echo "pid1=$(cat /proc/1/comm) state=$(cut -d' ' -f3 /proc/1/stat)"
        exec answer
        """
    ),
    "ptrace": script(
        """
        attack ptrace 1
        attack ptrace-child
        attack pidfd 1
        attack vm 1
        exec answer
        """
    ),
    # prlimit on PID 1 needs only the same uid: RLIMIT_CPU 1 would kill it, NOFILE 0
    # would leave it unable to open the output. The entrant's own limits still work.
    "limits": script(
        """
        attack prlimit 1
        attack prlimit-read 1
        attack high-pid
        attack prlimit-own
        ulimit -n 100 && echo "own ulimit -n: $(ulimit -n)"
        ulimit -c 1 2>/dev/null || echo "core dumps: off"
        i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done
        exec answer
        """
    ),
    "priorities": script(
        """
        attack setpriority 1
        attack sched 1
        attack sched-own
        taskset -p 1 1 >/dev/null 2>&1 || echo "taskset on pid 1: refused"
        taskset -p 1 $$ >/dev/null && echo "taskset on itself: ok"
        renice -n 10 -p 1 >/dev/null 2>&1 || echo "renice pid 1: refused"
        attack oom-adj 1 1000
        attack oom-adj 1 -1000
        echo "own oom_score_adj: $(cat /proc/self/oom_score_adj)"
        exec answer
        """
    ),
    # 32-bit and x32 system calls would dodge a filter written for x86-64 numbers.
    "foreign_abi": script(
        """
        attack x32; echo "x32: exit $?"
        attack int80; echo "int80: exit $?"
        exec answer
        """
    ),
}


def test_signals_to_pid1_are_ignored(hostile: Hostile) -> None:
    outcome = hostile.score("signals")

    assert outcome.run.verdict == "passed", outcome.why
    # busybox kill reports success: the kernel drops the signal silently.
    outcome.saw("kill -9 1: 0", "kill -STOP 1: 0", "kill -9 -1: 0", "pid1=supervise state=S")


def test_ptrace_and_memory_access_to_pid1_are_denied(hostile: Hostile) -> None:
    outcome = hostile.score("ptrace")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw(
        f"ptrace: {DENIED}",
        f"ptrace-child: {DENIED}",  # our seccomp denies ptrace everywhere in the tree
        "pidfd_open: ok",  # harmless on its own: signals are dropped, getfd is denied
        f"pidfd_getfd: {DENIED}",
        f"process_vm_readv: {DENIED}",
        f"process_vm_writev: {DENIED}",
        f"kcmp: {DENIED}",
    )


def test_prlimit_on_pid1_is_denied_but_own_limits_work(hostile: Hostile) -> None:
    outcome = hostile.score("limits")

    # Had RLIMIT_CPU 1 reached PID 1, the busy loop would have had it killed: no
    # result line, a platform fault.
    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw(
        f"prlimit-nofile: {DENIED}",
        f"prlimit-cpu: {DENIED}",
        f"prlimit-read: {DENIED}",
        f"prlimit-high-pid: {DENIED}",  # 0x100000001 is pid 1 to the kernel
        "setrlimit-own: ok",
        "prlimit-own-pid: ok",
        "own ulimit -n: 100",
        "core dumps: off",
    )


def test_priorities_of_pid1_cannot_be_changed(hostile: Hostile) -> None:
    outcome = hostile.score("priorities")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw(
        f"setpriority-process: {DENIED}",
        f"setpriority-pgrp: {DENIED}",
        f"setpriority-user: {DENIED}",  # every process of the uid, PID 1 included
        "setpriority-self: ok",
        f"sched_setaffinity: {DENIED}",
        f"sched_setscheduler: {DENIED}",
        f"sched_setparam: {DENIED}",
        f"sched_setattr: {DENIED}",
        "sched_setaffinity-own-tid: ok",  # thread pinning by tid keeps working
        "taskset on pid 1: refused",
        "taskset on itself: ok",
        "renice pid 1: refused",
        # The files of a non-dumpable process belong to root.
        "/proc/1/oom_score_adj: Permission denied",
        "own oom_score_adj: 1000",
    )


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x32 and int 0x80 are x86-64's")
def test_foreign_syscall_abis_are_killed(hostile: Hostile) -> None:
    outcome = hostile.score("foreign_abi")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw("x32: exit 159", "int80: exit 159")  # 128 + SIGSYS
