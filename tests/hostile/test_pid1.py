"""Attacks on the trusted supervisor itself (PID 1): signals, ptrace, limits, priorities.

Two walls, each enough on its own: the supervisor runs under a uid of its own (the
kernel refuses prlimit, renice, ionice and sched_set* across uids), and its seccomp
filter refuses them aimed at PID 1 whatever the engine's default profile allows.
"""

from __future__ import annotations

import platform

import pytest

from scoring.run import runner
from tests.hostile.conftest import ENGINE_PROFILES, Hostile, script

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
    # The idle I/O class would starve PID 1's reads of the output and its report.
    "io_priority": script(
        """
        attack ioprio 1
        ionice -c 3 -p 1 >/dev/null 2>&1 || echo "ionice pid 1: refused"
        ionice -c 2 -n 7 -p $$ >/dev/null && echo "ionice on itself: ok"
        exec answer
        """
    ),
    # Who is who: PID 1's real and effective uid (its saved one is the entrant's, so
    # that it can start the entrant and kill it at the deadline), capabilities, groups.
    "own_uid": script(
        """
        echo "entrant: uid=$(id -u) gid=$(id -g) groups=$(id -G)"
        awk '/^Uid:/ { print "pid1 uid:", $2, $3 } /^Gid:/ { print "pid1 gid:", $2, $3 }
             /^CapEff:/ { print "pid1 caps:", $2 }' /proc/1/status
        awk '/^CapEff:|^CapPrm:|^CapBnd:/ { print "entrant", $1, $2 }' /proc/self/status
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
    outcome.saw("kill -9 1: 0", "kill -STOP 1: 0", "kill -9 -1: 0")
    # PID 1 is the supervisor, alive and not stopped (T) by SIGSTOP: sleeping, or running
    # when the entrant's read of /proc/1/stat meets it reaping the killed child.
    assert (
        "pid1=supervise state=S" in outcome.log.splitlines()
        or "pid1=supervise state=R" in outcome.log.splitlines()
    ), outcome.log


@ENGINE_PROFILES
def test_ptrace_and_memory_access_to_pid1_are_denied(
    hostile: Hostile, engine_seccomp: str | None
) -> None:
    outcome = hostile.score("ptrace", engine_seccomp=engine_seccomp)

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


@ENGINE_PROFILES
def test_prlimit_on_pid1_is_denied_but_own_limits_work(
    hostile: Hostile, engine_seccomp: str | None
) -> None:
    outcome = hostile.score("limits", engine_seccomp=engine_seccomp)

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


@ENGINE_PROFILES
def test_priorities_of_pid1_cannot_be_changed(hostile: Hostile, engine_seccomp: str | None) -> None:
    outcome = hostile.score("priorities", engine_seccomp=engine_seccomp)

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
@ENGINE_PROFILES
def test_foreign_syscall_abis_are_killed(hostile: Hostile, engine_seccomp: str | None) -> None:
    outcome = hostile.score("foreign_abi", engine_seccomp=engine_seccomp)

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw("x32: exit 159", "int80: exit 159")  # 128 + SIGSYS


@ENGINE_PROFILES
def test_the_io_priority_of_pid1_cannot_be_changed(
    hostile: Hostile, engine_seccomp: str | None
) -> None:
    outcome = hostile.score("io_priority", engine_seccomp=engine_seccomp)

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw(
        f"ioprio-process: {DENIED}",
        f"ioprio-pgrp: {DENIED}",  # PID 1 leads process group 1
        f"ioprio-user: {DENIED}",  # every process of the uid
        f"ioprio-high-pid: {DENIED}",  # 0x100000001 is pid 1 to the kernel
        "ioprio-self: ok",
        "ioprio-own-pid: ok",
        "ioprio class of 1: not idle",
        "ionice pid 1: refused",
        "ionice on itself: ok",
    )


def test_the_supervisor_runs_under_a_uid_of_its_own(hostile: Hostile, settings) -> None:
    outcome = hostile.score("own_uid")
    entrant = settings.PODIUM_RUN_UID
    supervisor = runner.supervisor_uid()

    assert outcome.run.verdict == "passed", outcome.why
    assert supervisor not in (0, entrant)
    # The entrant: its own uid and gid, no supplementary group, no capability at all.
    outcome.saw(f"entrant: uid={entrant} gid={entrant} groups={entrant}")
    outcome.saw(*(f"entrant {name}: 0000000000000000" for name in ("CapEff", "CapPrm", "CapBnd")))
    # PID 1: another uid and gid (real and effective), and no capability left either.
    outcome.saw(
        f"pid1 uid: {supervisor} {supervisor}",
        f"pid1 gid: {supervisor} {supervisor}",
        "pid1 caps: 0000000000000000",
    )
