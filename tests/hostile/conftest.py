"""The hostile suite: real attacks on the scored run, in real containers, through the runner.

Every case is a submission image (``localhost/podium/busybox:1`` plus a static attack helper and
its own ``/submission/run``) scored by the real :func:`scoring.run.runner.score_submission`
on an 8-image cohort of class 7. :func:`Hostile.score` checks what every case owes,
whatever the attack:

- the run is settled with a verdict (passed / failed / errored), never as a platform
  failure: nothing the entrant does may buy a free retry or a refund;
- the supervisor reported (the host timer never had to step in), its trusted interval
  is well-formed and lies inside the host's own interval;
- the container is gone, no process of it survives on the host, the staged input is
  removed;
- the next run, a plain right answer, still passes (the canary).

The case asserts its own verdict, reason, trusted duration and what the attack saw.

Podium's own seccomp filter (stacked by the supervisor) must decide, whatever the
engine's default profile allows: Docker versions differ. Cases marked with
:data:`ENGINE_PROFILES` run twice, under the engine's default profile and with none at
all (``seccomp=unconfined``, the most permissive engine there could be), and must see
the same refusals.

Speed: each module's images are committed in parallel before its first case (a commit
is far cheaper than a ``docker build`` here); cases that need the deadline use a 3 s
score timeout (the supervisor kills at 2 s).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from portal.contests.models import Benchmark
from portal.core import storage
from portal.submissions.models import Run, Submission
from scoring import engine
from scoring.run import runner
from tests.scoring.test_staging import make_cohort, make_submission

REPO = Path(__file__).resolve().parents[2]
BASE = "localhost/podium/busybox:1"
ROWS = 8
CLASS = 7
SECOND = 1_000_000_000

# Run a case under the engine's default seccomp profile and under none at all.
ENGINE_PROFILES = pytest.mark.parametrize(
    "engine_seccomp", [None, "unconfined"], ids=["engine-default", "engine-unconfined"]
)

# Writes the right answer (or the class given as an octal escape) for every row.
ANSWER = r"""#!/bin/sh
out=${1:-$CONTEST_OUTPUT}
class='\007'
[ -n "$2" ] && class=$2
while read -r request_id path; do printf "$class\000\000\000"; done < "$CONTEST_MANIFEST" > "$out"
"""

# ``try LABEL COMMAND...``: prints "LABEL: ok" or "LABEL: refused", nothing else.
TRY = r"""#!/bin/sh
label=$1
shift
if "$@" >/dev/null 2>&1 </dev/null; then echo "$label: ok"; else echo "$label: refused"; fi
"""

ATTACK_SOURCE = r"""
/* attack: one static binary, many attacks on the scoring sandbox (the hostile suite).
 * Each prints "NAME: ok" or "NAME: <errno text>" and exits 0, unless it is meant
 * to run until it is stopped. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/io_uring.h>
#include <linux/perf_event.h>
#include <linux/vm_sockets.h>

#define IOPRIO_IDLE (3 << 13) /* IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0) */
#define IOPRIO_BE_7 (2 << 13 | 7)
enum { WHO_PROCESS = 1, WHO_PGRP, WHO_USER };

static int say(const char *name, long rc)
{
    printf("%s: %s\n", name, rc < 0 ? strerror(errno) : "ok");
    fflush(stdout);
    return 0;
}

static long pid_arg(char **argv, int i) { return argv[i] ? strtol(argv[i], NULL, 0) : 1; }

/* unshare(flags) in a child of its own, so that each attempt starts from our namespaces. */
static long unshare_in_child(int flags)
{
    int status;
    pid_t kid = fork();
    if (kid == 0)
        _exit(unshare(flags) == 0 ? 0 : errno);
    if (kid < 0 || waitpid(kid, &status, 0) < 0)
        return -1;
    errno = WIFEXITED(status) ? WEXITSTATUS(status) : EINTR;
    return errno ? -1 : 0;
}

/* A socket made by the kernel's io_uring worker (IORING_OP_SOCKET), not by socket(2). */
static long ring_socket(int ring, const struct io_uring_params *p, int family, int type)
{
    int prot = PROT_READ | PROT_WRITE, shared = MAP_SHARED | MAP_POPULATE;
    size_t sq_len = p->sq_off.array + p->sq_entries * sizeof(unsigned);
    size_t cq_len = p->cq_off.cqes + p->cq_entries * sizeof(struct io_uring_cqe);
    char *sq = mmap(NULL, sq_len, prot, shared, ring, IORING_OFF_SQ_RING);
    char *cq = mmap(NULL, cq_len, prot, shared, ring, IORING_OFF_CQ_RING);
    struct io_uring_sqe *sqes =
        mmap(NULL, p->sq_entries * sizeof *sqes, prot, shared, ring, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED)
        return -1;
    unsigned *tail = (unsigned *)(sq + p->sq_off.tail);
    unsigned idx = *tail & *(unsigned *)(sq + p->sq_off.ring_mask);
    memset(&sqes[idx], 0, sizeof sqes[idx]);
    sqes[idx].opcode = IORING_OP_SOCKET;
    sqes[idx].fd = family;
    sqes[idx].off = (uint64_t)type;
    ((unsigned *)(sq + p->sq_off.array))[idx] = idx;
    __atomic_store_n(tail, *tail + 1, __ATOMIC_RELEASE);
    if (syscall(SYS_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
        return -1;
    unsigned head = *(unsigned *)(cq + p->cq_off.head);
    struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p->cq_off.cqes);
    int res = cqes[head & *(unsigned *)(cq + p->cq_off.ring_mask)].res;
    if (res < 0) {
        errno = -res;
        return -1;
    }
    return res;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "ptrace")) /* attach to PID (default 1) */
        return say("ptrace", ptrace(PTRACE_ATTACH, (pid_t)pid_arg(argv, 2), 0, 0));
    if (!strcmp(what, "ptrace-child")) { /* even one's own child */
        pid_t kid = fork();
        if (kid == 0) {
            pause();
            _exit(0);
        }
        long rc = ptrace(PTRACE_ATTACH, kid, 0, 0);
        say("ptrace-child", rc);
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
        return 0;
    }
    if (!strcmp(what, "prlimit")) { /* RLIMIT_NOFILE 0 and RLIMIT_CPU 1 on PID */
        long pid = pid_arg(argv, 2);
        struct rlimit zero = {0, 0}, one = {1, 1};
        say("prlimit-nofile", syscall(SYS_prlimit64, pid, RLIMIT_NOFILE, &zero, NULL));
        return say("prlimit-cpu", syscall(SYS_prlimit64, pid, RLIMIT_CPU, &one, NULL));
    }
    if (!strcmp(what, "prlimit-read")) {
        struct rlimit old;
        long pid = pid_arg(argv, 2);
        return say("prlimit-read", syscall(SYS_prlimit64, pid, RLIMIT_NOFILE, NULL, &old));
    }
    if (!strcmp(what, "prlimit-own")) { /* glibc setrlimit: prlimit64(0, ...) */
        struct rlimit lim = {100, 100};
        say("setrlimit-own", setrlimit(RLIMIT_NOFILE, &lim));
        return say("prlimit-own-pid", syscall(SYS_prlimit64, getpid(), RLIMIT_NOFILE, NULL, &lim));
    }
    if (!strcmp(what, "setpriority")) {
        long pid = pid_arg(argv, 2);
        say("setpriority-process", setpriority(PRIO_PROCESS, (id_t)pid, 19));
        say("setpriority-pgrp", setpriority(PRIO_PGRP, (id_t)pid, 19));
        say("setpriority-user", setpriority(PRIO_USER, 0, 19));
        return say("setpriority-self", setpriority(PRIO_PROCESS, 0, 5));
    }
    if (!strcmp(what, "sched")) {
        long pid = pid_arg(argv, 2);
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(0, &one);
        struct sched_param none = {0};
        say("sched_setaffinity", syscall(SYS_sched_setaffinity, pid, sizeof one, &one));
        say("sched_setscheduler", syscall(SYS_sched_setscheduler, pid, SCHED_IDLE, &none));
        say("sched_setparam", syscall(SYS_sched_setparam, pid, &none));
        return say("sched_setattr", syscall(SYS_sched_setattr, pid, NULL, 0));
    }
    if (!strcmp(what, "ioprio")) { /* the idle I/O class for PID (default 1) */
        long pid = pid_arg(argv, 2);
        say("ioprio-process", syscall(SYS_ioprio_set, WHO_PROCESS, pid, IOPRIO_IDLE));
        say("ioprio-pgrp", syscall(SYS_ioprio_set, WHO_PGRP, pid, IOPRIO_IDLE));
        say("ioprio-user", syscall(SYS_ioprio_set, WHO_USER, 0, IOPRIO_IDLE));
        say("ioprio-high-pid",
            syscall(SYS_ioprio_set, WHO_PROCESS, 0x100000000L | pid, IOPRIO_IDLE));
        say("ioprio-self", syscall(SYS_ioprio_set, WHO_PROCESS, 0, IOPRIO_BE_7));
        say("ioprio-own-pid", syscall(SYS_ioprio_set, WHO_PROCESS, getpid(), IOPRIO_BE_7));
        long now = syscall(SYS_ioprio_get, WHO_PROCESS, pid);
        printf("ioprio class of %ld: %s\n", pid,
               now < 0 ? strerror(errno) : (now >> 13) == 3 ? "idle" : "not idle");
        return 0;
    }
    if (!strcmp(what, "sockets")) { /* every family but AF_UNIX is network */
        static const struct { const char *name; int family, type; } tries[] = {
            {"socket-vsock", AF_VSOCK, SOCK_STREAM},   {"socket-inet", AF_INET, SOCK_STREAM},
            {"socket-inet6", AF_INET6, SOCK_DGRAM},    {"socket-netlink", AF_NETLINK, SOCK_RAW},
            {"socket-packet", AF_PACKET, SOCK_DGRAM},  {"socket-unix", AF_UNIX, SOCK_STREAM},
            {"socket-unix-dgram", AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC}};
        for (size_t i = 0; i < sizeof tries / sizeof *tries; i++) {
            int fd = socket(tries[i].family, tries[i].type, 0);
            say(tries[i].name, fd);
            if (fd >= 0)
                close(fd);
        }
        /* 0x100000001: AF_UNIX in the low 32 bits, which is all the kernel reads */
        say("socket-high-bits-vsock", syscall(SYS_socket, 0x100000000L | AF_VSOCK, SOCK_STREAM, 0));
        int pair[2];
        say("socketpair-unix", socketpair(AF_UNIX, SOCK_STREAM, 0, pair));
        return say("socketpair-vsock", socketpair(AF_VSOCK, SOCK_STREAM, 0, pair));
    }
    if (!strcmp(what, "io_uring")) { /* and a vsock socket made through the ring */
        struct io_uring_params params;
        memset(&params, 0, sizeof params);
        long ring = syscall(SYS_io_uring_setup, 4, &params);
        say("io_uring_setup", ring);
        if (ring >= 0)
            say("io_uring-socket-vsock", ring_socket((int)ring, &params, AF_VSOCK, SOCK_STREAM));
        /* on a descriptor that is no ring: refused by the filter, or EOPNOTSUPP */
        say("io_uring_enter", syscall(SYS_io_uring_enter, 0, 0, 0, 0, NULL, 0));
        return say("io_uring_register", syscall(SYS_io_uring_register, 0, 0, NULL, 0));
    }
    if (!strcmp(what, "surface")) { /* what Docker's default profile may or may not deny */
        say("unshare-user", unshare_in_child(CLONE_NEWUSER));
        say("unshare-user-net", unshare_in_child(CLONE_NEWUSER | CLONE_NEWNET));
        long kid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
        if (kid == 0)
            _exit(0);
        if (kid > 0)
            waitpid((pid_t)kid, NULL, 0);
        say("clone-newuser", kid);
        uint64_t args[11] = {CLONE_NEWUSER, 0, 0, 0, SIGCHLD}; /* struct clone_args */
        kid = syscall(SYS_clone3, args, sizeof args);
        if (kid == 0)
            _exit(0);
        if (kid > 0)
            waitpid((pid_t)kid, NULL, 0);
        say("clone3", kid);
        say("keyctl", syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3 /* session */, 0));
        say("add_key", syscall(SYS_add_key, "user", "podium", "x", 1, -2 /* process */));
        struct perf_event_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.size = sizeof attr;
        attr.type = PERF_TYPE_SOFTWARE;
        attr.config = PERF_COUNT_SW_TASK_CLOCK;
        attr.exclude_kernel = attr.exclude_hv = 1;
        say("perf_event_open", syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
        say("userfaultfd", syscall(SYS_userfaultfd, O_CLOEXEC | 1 /* UFFD_USER_MODE_ONLY */));
        return say("bpf", syscall(SYS_bpf, 0 /* BPF_MAP_CREATE */, NULL, 0));
    }
    if (!strcmp(what, "sched-own")) { /* a thread pinning itself by its tid */
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(0, &one);
        return say("sched_setaffinity-own-tid",
                   syscall(SYS_sched_setaffinity, syscall(SYS_gettid), sizeof one, &one));
    }
    if (!strcmp(what, "high-pid")) { /* 0x100000001 is pid 1 to the kernel */
        struct rlimit zero = {0, 0};
        long pid = 0x100000001L;
        return say("prlimit-high-pid", syscall(SYS_prlimit64, pid, RLIMIT_NOFILE, &zero, NULL));
    }
    if (!strcmp(what, "vm")) {
        char buf[16];
        struct iovec local = {buf, sizeof buf}, remote = {(void *)0x400000, sizeof buf};
        long pid = pid_arg(argv, 2);
        say("process_vm_readv", syscall(SYS_process_vm_readv, pid, &local, 1, &remote, 1, 0));
        say("process_vm_writev", syscall(SYS_process_vm_writev, pid, &local, 1, &remote, 1, 0));
        return say("kcmp", syscall(SYS_kcmp, pid, getpid(), 0, 0, 0));
    }
    if (!strcmp(what, "pidfd")) { /* steal PID 1's stdout */
        long fd = syscall(SYS_pidfd_open, pid_arg(argv, 2), 0);
        say("pidfd_open", fd);
        return say("pidfd_getfd", fd < 0 ? fd : syscall(SYS_pidfd_getfd, fd, 1, 0));
    }
#ifdef __x86_64__
    if (!strcmp(what, "x32")) { /* getpid through the x32 ABI: killed by SIGSYS */
        say("x32-getpid", syscall(__NR_getpid | 0x40000000));
        return 0;
    }
    if (!strcmp(what, "int80")) { /* i386 ptrace(PTRACE_TRACEME) through int $0x80 */
        long rc;
        __asm__ volatile("int $0x80" : "=a"(rc) : "a"(26), "b"(0), "c"(0), "d"(0) : "memory");
        errno = rc < 0 ? (int)-rc : 0;
        return say("int80-ptrace", rc < 0 ? -1 : rc);
    }
#endif
    if (!strcmp(what, "clock")) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        say("clock_settime-monotonic", clock_settime(CLOCK_MONOTONIC, &now));
        clock_gettime(CLOCK_REALTIME, &now);
        now.tv_sec -= 3600;
        return say("clock_settime-realtime", clock_settime(CLOCK_REALTIME, &now));
    }
    if (!strcmp(what, "ids")) { /* for the setuid copy */
        uid_t r, e, s;
        getresuid(&r, &e, &s);
        printf("uid=%d euid=%d suid=%d\n", (int)r, (int)e, (int)s);
        return say("setuid-0", setuid(0));
    }
    if (!strcmp(what, "forkbomb")) {
        for (;;)
            fork();
    }
    if (!strcmp(what, "membomb")) { /* touch memory until the OOM killer stops us */
        for (;;) {
            int anon = MAP_PRIVATE | MAP_ANONYMOUS;
            char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, anon, -1, 0);
            if (p == MAP_FAILED)
                continue;
            memset(p, 1, 1 << 20);
        }
    }
    if (!strcmp(what, "oom-adj")) { /* write a score to /proc/PID/oom_score_adj */
        char path[64];
        snprintf(path, sizeof path, "/proc/%s/oom_score_adj", argc > 2 ? argv[2] : "self");
        int fd = open(path, O_WRONLY);
        const char *value = argc > 3 ? argv[3] : "1000";
        long rc = fd < 0 ? -1 : write(fd, value, strlen(value));
        return say(path, rc);
    }
    if (!strcmp(what, "pipes")) { /* fill memory with pipe buffers: charged, not RSS */
        char page[4096];
        memset(page, 7, sizeof page);
        long bytes = 0;
        for (;;) {
            int p[2];
            if (pipe2(p, O_NONBLOCK) != 0)
                break;
            fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
            ssize_t n;
            while ((n = write(p[1], page, sizeof page)) > 0)
                bytes += n;
            if (n < 0 && errno != EAGAIN)
                break;
        }
        printf("pipes: %ld MiB buffered: %s\n", bytes >> 20, strerror(errno));
        fflush(stdout);
        pause(); /* hold it until killed */
    }
    if (!strcmp(what, "files")) { /* N empty files in the current folder */
        long n = argc > 2 ? strtol(argv[2], NULL, 0) : 1000, made = 0;
        char name[32];
        int error = 0;
        for (; made < n; made++) {
            snprintf(name, sizeof name, "f%ld", made);
            int fd = open(name, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
            if (fd < 0) {
                error = errno;
                break;
            }
            close(fd);
        }
        printf("files: %ld made\n", made);
        if (error) { /* "files: <why the next one failed>" */
            errno = error;
            say("files", -1);
        }
        return 0;
    }
    fprintf(stderr, "attack: unknown %s\n", what);
    return 2;
}
"""


def script(body: str) -> str:
    """A /submission/run: ``body`` (dedented) under ``#!/bin/sh``."""
    return "#!/bin/sh\n" + textwrap.dedent(body).lstrip("\n")


@dataclass(frozen=True)
class Limits:
    """The benchmark's run limits for one case (small: attacks hit them fast)."""

    timeout_s: int = 10
    memory: int = 128 << 20
    pids: int = 64
    tmpfs: int = 16 << 20
    output_tmpfs: int = 1 << 20
    shm: int = 64 << 20
    # The OOM killer may take the supervisor itself (engines that cannot protect it):
    # then there is no trusted interval, and the run must be the entrant's error.
    supervisor_may_be_oom_killed: bool = False


@dataclass(frozen=True)
class Outcome:
    run: Run
    submission: Submission
    log: str  # the run log the entrant sees: its stdout and stderr tails

    @property
    def why(self) -> str:
        """For assertion messages: the verdict's reason and the end of the log."""
        return f"{self.run.verdict}: {self.run.verdict_reason}\n{self.log[-3000:]}"

    @property
    def wall_ns(self) -> int:
        """The trusted duration (every case has one: the supervisor always reported)."""
        assert self.run.wall_time_ns is not None
        return self.run.wall_time_ns

    @property
    def wall_s(self) -> float:
        return self.wall_ns / SECOND

    def saw(self, *lines: str) -> None:
        """Each of ``lines`` is a whole line of the entrant's log."""
        have = set(self.log.splitlines())
        missing = [line for line in lines if line not in have]
        assert not missing, f"not in the run log: {missing}\n{self.log}"


def _tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name.rstrip("/"))
            info.size, info.mode, info.uid, info.gid = len(data), mode, 0, 0
            if name.endswith("/"):  # a folder: "path/": (b"", mode)
                info.type = tarfile.DIRTYPE
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def commit_image(
    base: str,
    files: dict[str, tuple[bytes, int]],
    tag: str,
    config: dict[str, Any] | None = None,
) -> str:
    """``base`` plus ``files`` (path: (bytes, mode), root-owned), committed as ``tag``.

    ``config``: image settings in the engine's own spelling (``{"Healthcheck": ...}``),
    what a Dockerfile instruction would have set.
    """
    repository, name = tag.rsplit(":", 1)
    container_id = engine.create_container(image=base, command=["/bin/true"], entrypoint=[])
    try:
        engine.put_archive(container_id, "/", _tar(files))
        if config:
            conf = {"Labels": {engine.LABEL: "1"}, **config}
            engine.client().api.commit(container_id, repository=repository, tag=name, conf=conf)
        else:
            engine.commit(container_id, repository=repository, tag=name)
    finally:
        engine.remove_container(container_id)
    return tag


@pytest.fixture(scope="session")
def supervisor_binary() -> Path:
    build = subprocess.run(
        ["make", "scoring/supervisor/supervise"], cwd=REPO, capture_output=True, text=True
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return REPO / "scoring" / "supervisor" / "supervise"


@pytest.fixture(scope="session")
def repository() -> str:
    return f"podium-test/hostile-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def base_image(repository: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """busybox + ``attack`` (and a root-owned setuid copy) + ``answer`` + ``try``."""
    if not engine.available():
        pytest.skip("no Docker Engine here")  # the docker marker decides skip vs fail
    if shutil.which("cc") is None:
        pytest.skip("no C compiler for the attack helper (and the supervisor)")
    folder = tmp_path_factory.mktemp("attack")
    (folder / "attack.c").write_text(ATTACK_SOURCE)
    cc = subprocess.run(
        ["cc", "-O2", "-static", "-Wall", "-o", "attack", "attack.c"],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    assert cc.returncode == 0, cc.stderr
    attack = (folder / "attack").read_bytes()
    tag = commit_image(
        BASE,
        {
            "usr/local/bin/attack": (attack, 0o755),
            "usr/local/bin/suid-attack": (attack, 0o4755),
            "usr/local/bin/answer": (ANSWER.encode(), 0o755),
            "usr/local/bin/try": (TRY.encode(), 0o755),
        },
        f"{repository}:base",
    )
    try:
        yield tag
    finally:
        engine.remove_image(tag)


@pytest.fixture(scope="session")
def good_image(base_image: str, repository: str) -> Iterator[str]:
    tag = commit_image(
        base_image,
        {"submission/run": (script("exec answer\n").encode(), 0o755)},
        f"{repository}:canary",
    )
    try:
        yield tag
    finally:
        engine.remove_image(tag)


@pytest.fixture(scope="module")
def images(
    request: pytest.FixtureRequest, base_image: str, repository: str
) -> Iterator[dict[str, str]]:
    """The module's ``SCRIPTS`` (name: script, or name: {path: (bytes, mode)}) as images,
    with the image settings of its ``IMAGE_CONFIG`` (name: config), if any."""
    scripts: dict[str, str | dict[str, tuple[bytes, int]]] = request.module.SCRIPTS
    configs: dict[str, dict[str, Any]] = getattr(request.module, "IMAGE_CONFIG", {})
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")

    def build(item: tuple[str, Any]) -> tuple[str, str]:
        name, content = item
        files = (
            {"submission/run": (content.encode(), 0o755)} if isinstance(content, str) else content
        )
        tag = f"{repository}:{module}-{name}"
        return name, commit_image(base_image, files, tag, configs.get(name))

    with ThreadPoolExecutor(8) as pool:
        built = dict(pool.map(build, scripts.items()))
    try:
        yield built
    finally:
        for tag in built.values():
            engine.remove_image(tag)


@pytest.fixture(scope="session")
def engine_lowers_oom_score() -> bool:
    """Whether the engine may give the supervisor oom_score_adj -1000 (CAP_SYS_RESOURCE)."""
    try:
        container_id = engine.create_container(
            image=BASE,
            command=["/bin/true"],
            entrypoint=[],
            oom_score_adj=-1000,
            network_mode="none",
        )
    except engine.EngineError:
        return False
    try:
        engine.start(container_id)
        return engine.wait(container_id, timeout_s=30) == 0
    except engine.EngineError:
        return False
    finally:
        engine.remove_container(container_id)


def _processes_of(container_id: str) -> list[int]:
    """Host pids still in the container's cgroup (there must be none once it is removed)."""
    found = []
    for cgroup in Path("/proc").glob("[0-9]*/cgroup"):
        try:
            if container_id in cgroup.read_text():
                found.append(int(cgroup.parent.name))
        except OSError:  # the process ended meanwhile
            continue
    return found


@contextmanager
def engine_profile(profile: str | None) -> Iterator[None]:
    """Score with ``seccomp=<profile>`` instead of the engine's default (None: the default)."""
    if profile is None:
        yield
        return
    spec_of = runner.container_spec

    def with_profile(**kwargs: Any) -> dict[str, Any]:
        spec = spec_of(**kwargs)
        spec["security_opt"] = [*spec["security_opt"], f"seccomp={profile}"]
        return spec

    with mock.patch.object(runner, "container_spec", with_profile):
        yield


class Hostile:
    def __init__(self, entrant: Any, benchmark: Benchmark, images: dict[str, str], good: str):
        self.entrant = entrant
        self.benchmark = benchmark
        self.images = images
        self.good = good

    def _score(self, image: str, limits: Limits, engine_seccomp: str | None = None) -> Outcome:
        benchmark = self.benchmark
        benchmark.score_timeout_s = limits.timeout_s
        benchmark.run_memory_bytes = limits.memory
        benchmark.run_pids_limit = limits.pids
        benchmark.run_tmpfs_bytes = limits.tmpfs
        benchmark.run_output_tmpfs_bytes = limits.output_tmpfs
        benchmark.run_shm_bytes = limits.shm
        benchmark.save()
        submission = make_submission(self.entrant, benchmark, image_tag=image)
        started = time.monotonic()
        with engine_profile(engine_seccomp):
            runner.score_submission(submission.pk)
        elapsed = time.monotonic() - started
        submission.refresh_from_db()
        run = Run.objects.filter(submission=submission).latest("try_number")
        log_path = storage.run_dir(run.pk) / runner.RUN_LOG
        log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
        where = f"{image}: {run.status} {run.verdict} {run.verdict_reason!r}\n{log_text}"

        # Never the platform's fault, and never settled by the host's own timer.
        assert run.status == Run.FINISHED, where
        assert submission.status in (Submission.PASSED, Submission.FAILED, Submission.ERRORED)
        assert run.verdict == submission.status, where
        assert run.host_start_ns is not None and run.host_end_ns is not None
        if run.trusted_start_ns is None and limits.supervisor_may_be_oom_killed:
            assert run.verdict == Submission.ERRORED, where
            assert "memory limit" in run.verdict_reason, where
            assert run.wall_time_ns is None  # no time without the trusted clock
        else:
            assert run.trusted_start_ns is not None and run.trusted_end_ns is not None, where
            assert (
                run.host_start_ns <= run.trusted_start_ns <= run.trusted_end_ns <= run.host_end_ns
            ), where
            assert run.wall_time_ns == run.trusted_end_ns - run.trusted_start_ns > 0
            # Killed at the limit at the latest, and reaped within a second of it.
            assert run.wall_time_ns < (limits.timeout_s + 1) * SECOND
        assert elapsed < limits.timeout_s + 30, where  # the host was never held up
        # Nothing of the container is left on the host.
        assert run.container_id
        with pytest.raises(engine.NoSuchObject):
            engine.state(run.container_id)
        assert _processes_of(run.container_id) == []
        assert not (storage.run_dir(run.pk) / "input").exists()
        return Outcome(run=run, submission=submission, log=log_text)

    def score(
        self, name: str, limits: Limits | None = None, *, engine_seccomp: str | None = None
    ) -> Outcome:
        """Score the case ``name``, check what every case owes, then the canary.

        ``engine_seccomp``: the engine's seccomp profile for the case (see
        :data:`ENGINE_PROFILES`); the canary always runs under the engine's default.
        """
        outcome = self._score(self.images[name], limits or Limits(), engine_seccomp)
        canary = self._score(self.good, Limits())
        assert canary.run.verdict == "passed", (
            f"the run after {name!r}: {canary.run.verdict_reason}\n{canary.log}"
        )
        assert (canary.run.matches, canary.run.total) == (ROWS, ROWS)
        return outcome


@pytest.fixture
def hostile(
    alice,
    benchmark,
    images,
    good_image,
    supervisor_binary,
    engine_lowers_oom_score,
    settings,
    monkeypatch,
) -> Hostile:
    settings.PODIUM_SUPERVISOR = supervisor_binary
    settings.PODIUM_RUN_OOM_SCORE_ADJ = -1000 if engine_lowers_oom_score else None
    # The machine lock and gates are not under test here: a scoring host of our own
    # (its build freezer touches no one else's containers) and gates that pass.
    settings.PODIUM_HOST_NAME = f"hostile-{uuid.uuid4().hex[:8]}"
    settings.PODIUM_GATE_CPU_BUSY_MAX = 1e6
    settings.PODIUM_GATE_CPU_SAMPLE_S = 0.05
    settings.PODIUM_GATE_MIN_MEMORY_BYTES = 0
    settings.PODIUM_GATE_MIN_DISK_BYTES = 0
    settings.PODIUM_GPU_GATES = False
    monkeypatch.setattr("portal.core.jobs.app.send_task", lambda *args, **kwargs: None)
    benchmark.cohort_size = ROWS
    benchmark.pass_min_matches = ROWS
    benchmark.save()
    make_cohort(benchmark, [CLASS] * ROWS)
    return Hostile(alice, benchmark, images, good_image)
