/*
 * supervise: Podium's trusted timer (PID 1 of the scoring container).
 *
 *   supervise --deadline-ms N --log-dir DIR --output PATH --expect-bytes N
 *             [--tail-bytes N] [--settle-ms N]
 *             [--prewarm-bytes N [--prewarm-files N] [--prewarm-ms N]]
 *             [--supervisor-user UID:GID --entrant-user UID:GID] -- PROGRAM ARG...
 *
 * Contract (the Python runner depends on every line of it):
 *  - The clock is CLOCK_MONOTONIC, read immediately before fork() and again right
 *    after waitpid() says no descendant is left. Docker containers share the host's
 *    monotonic clock, so the host can check that its own interval contains ours.
 *    Everything that can be prepared is prepared before the first reading, off the
 *    clock: the entrant's environment, its seccomp program, our buffers, and the
 *    entrypoint file (and its #! interpreter) read once, and, as PID 1 with
 *    --prewarm-bytes N > 0 (default 0: none), the rules' warm start: every regular file
 *    of the container's filesystems that the entrant may read, read once into the page
 *    cache with plain read()s (see prewarm_walk: a physical walk as the entrant's uid
 *    and gid, no pseudo or tmpfs filesystem; at most N bytes, prewarm-files names,
 *    default 65536, and prewarm-ms milliseconds, default 60000: the same bounds for
 *    everyone). Not posix_fadvise(WILLNEED): it returns at once and, on fuse-overlayfs,
 *    leaves most of a file cold a second later. Then we wait settle-ms (default 0) for
 *    the engine to finish starting the container, and write "supervise: prewarmed"
 *    and a newline to our stderr: the runner reads it to tell an outer timeout before
 *    our clock (never the entrant's fault) from one after it. Last, right before the
 *    clock, we fork and exec ourselves once (a fresh container's first fork and exec are
 *    slow); no entrant code runs before the clock. rusage leaves that warm-up out
 *    (but its maxrss, a few hundred kB, is a floor of the reported one).
 *  - The entrant (PROGRAM) runs in a new session, stdin /dev/null, stdout and
 *    stderr in DIR/stdout.log and DIR/stderr.log, no other descriptor (every one we
 *    inherited is closed at our start, every one we open is close-on-exec), with
 *    oom_score_adj 1000, no core dumps (RLIMIT_CORE 0/0), no_new_privs and our
 *    seccomp filter (below). Its environment is ours (in Docker: the image's ENV and
 *    Docker's PATH/HOSTNAME/HOME; the runner passes nothing of the host's) with
 *    CONTEST_MANIFEST/IMAGE_ROOT/OUTPUT set from ARG 1..3 (those given) and never
 *    inherited. It never shares our stdout, so it cannot forge the result line.
 *  - With --supervisor-user and --entrant-user (the runner gives both), we start as root
 *    holding nothing but CAP_SETUID, CAP_SETGID and CAP_SETPCAP, and before anything
 *    else empty the capability bounding set and the supplementary groups and become
 *    real and effective UID:GID of the supervisor, saved UID:GID of the entrant: no
 *    capability is left. DIR is ours (the runner's log tmpfs belongs to our uid, mode
 *    0700), so the entrant can neither reach the logs nor make files beside them; it
 *    writes them only through its stdout and stderr. The entrant runs as its
 *    UID:GID (all three of each). We take the entrant's uid as our effective one only
 *    to kill at the deadline and, once no entrant process is left, to read PATH (in the
 *    entrant's folder). Without both, we and the entrant share whatever uid we had.
 *  - If one of those set-up steps fails (not the exec itself: a missing or
 *    unexecutable PROGRAM is the entrant's, exit 127 with a message in its stderr
 *    log), we exit 1 without a result line: a platform fault.
 *  - We are a child subreaper (and PID 1 in Docker), so every orphan reparents to
 *    us; we reap until ECHILD, so a daemonized grandchild stays on the clock.
 *  - At the deadline (counted from the first clock reading) we SIGKILL everything
 *    left and keep reaping: as PID 1, kill(-1) (every process of our uid in the
 *    namespace but us); natively, the child's process group plus every descendant
 *    found in /proc (never kill(-1) on a host). "killed" is then true.
 *  - Off the clock, once every entrant process is reaped and after the clock's second
 *    reading, the meter: as PID 1 only, we read a fixed allow-list of the container's
 *    cgroup files (see meter_prepare: v2 when /sys/fs/cgroup/cgroup.controllers
 *    exists, else v1), each at most METER_FILE_BYTES, O_NOFOLLOW, a regular file.
 *    Natively /sys/fs/cgroup is the host's or a session's, shared with other
 *    processes: nothing is read there.
 *  - Then we read PATH (O_NOFOLLOW|O_NONBLOCK, must be a regular file, at most
 *    expect-bytes + 1 bytes) and the last tail-bytes of each log through our own
 *    descriptors, then write exactly ONE JSON line to fd 1 and exit 0:
 *    {"podium_supervisor": 1, "start_ns", "end_ns", "wall_ns", "exit_code",
 *     "signal", "killed", "rusage": {"utime_us", "stime_us", "maxrss_kb"},
 *     "output_bytes", "output_error", "output_b64", "stdout_tail_b64",
 *     "stderr_tail_b64", "cgroup": {FILE: BASE64, ...}, "meter_ns", "prewarm_ns",
 *     "prewarm_bytes", "prewarm_files", "prewarm_truncated"}
 *    where "cgroup" holds, under its allow-list name, the contents of each cgroup file
 *    that could be read whole (a file longer than the bound is left out rather than
 *    cut), {} natively; and "meter_ns" the time the meter took (CLOCK_MONOTONIC,
 *    after end_ns, so never part of wall_ns). scoring/meter.py decodes them. The
 *    prewarm_* fields are the warm start's: how long it took (before start_ns, so never
 *    part of wall_ns), the bytes and the files it read, and whether a bound stopped it
 *    (all 0 and false without it); scoring/run/prewarm.py decodes them.
 *  - Exit 2 on a usage error, 1 if the run could not be set up (message on stderr).
 *
 *   supervise --self-test
 *
 *  - Checks this binary on this machine (or emulator) with no container and no entrant:
 *    as PID 1 or a subreaper, with the clock read right before fork() and after the same
 *    reaping loop a run uses (until ECHILD), it times a known tree: a child that forks one
 *    grandchild that exits at once and one that daemonizes (setsid, forks, exits)
 *    leaving an orphan that sleeps SELF_TEST_SLEEP_MS. It writes ONE JSON line to fd 1:
 *    {"podium_supervisor_self_test": 1, "arch", "reaper", "start_ns", "end_ns",
 *     "wall_ns", "sleep_ns", "reaped", "expected", "killed", "ok"}
 *    where "arch" is the compiler's target ("x86_64" or "aarch64"), "reaper" how orphans
 *    reach us ("pid1", "subreaper", or "none": an emulator that refuses the subreaper
 *    prctl, as Debian 12's qemu-user 7.2 does, loses them), "reaped" how many descendants
 *    were reaped (4 expected: the orphan reaches us only as PID 1 or a subreaper) and
 *    "ok" is true when all of them exited 0, none was killed at the deadline
 *    (SELF_TEST_DEADLINE_MS) and wall_ns covers the orphan's sleep. Exit 0 when ok,
 *    else 1 (also without a line if it cannot fork).
 *
 * Why a uid of our own: the kernel lets any process renice, ionice, re-pin or prlimit
 * every other process of its uid (setpriority, ioprio_set, sched_set* and prlimit64
 * need no privilege, only the same uid). Under a uid of our own it refuses them all,
 * to every process, also to those outside our filter (an engine's health check or
 * exec). Our saved uid is the entrant's, and that opens nothing of ours: prlimit wants
 * the target's real, effective and saved uids all equal to the caller's; setpriority,
 * sched_set* and ioprio_set look at the real and effective ones only; only signals
 * look at the saved uid, and as PID 1 we drop them (below).
 *
 * Why non-dumpable (with one uid or two): it keeps the entrant from reading
 * /proc/1/environ or /proc/1/fd, from writing /proc/1/oom_score_adj (the files of a
 * non-dumpable process belong to root), and from ptrace, pidfd_getfd and
 * process_vm_*. As PID 1 without handlers, the kernel drops SIGKILL/SIGSTOP/SIGTERM
 * sent from inside the namespace. Everything that is not timing (reading the output
 * and logs, encoding) happens after the second clock reading, when no entrant
 * process is alive to race us.
 *
 * The seccomp filter: ours decides, whatever the engine's default profile allows
 * (Docker versions differ: io_uring and AF_VSOCK are allowed by some, not others). A
 * seccomp=<file> option would REPLACE Docker's default profile (and we ship no copy
 * of it), so the container keeps the engine's default as a second wall and the
 * entrant's first process installs ours on top, after no_new_privs and right before
 * exec. Filters stack: the kernel runs every filter of a process on each syscall and
 * applies the most restrictive answer (ours, the newest, gives the errno between two
 * refusals), and fork/exec carry them to every descendant, irrevocably. So the
 * entrant's whole tree is under both; we (PID 1) stay under the engine's alone. Every
 * refusal below holds with no engine profile at all (the hostile tests run both ways):
 *  - a foreign syscall ABI (i386 and x32 on x86-64, AArch32 on arm64) kills the
 *    process, so nothing can slip past the syscall numbers below;
 *  - ptrace, process_vm_readv/writev, kcmp and pidfd_getfd fail with EPERM
 *    (non-dumpable and our own uid already stop them against us; this stops them
 *    everywhere);
 *  - io_uring_setup/enter/register fail with EPERM: the ring's kernel workers make
 *    sockets (and open, connect...) where no syscall filter sees them;
 *  - socket and socketpair fail with EAFNOSUPPORT for every family but AF_UNIX:
 *    scoring has no network, and vsock reaches the hypervisor past network_mode=none;
 *  - unshare and clone fail with EPERM when asked for a new namespace (a user
 *    namespace gives capabilities inside it, and with them mounts and the rest), and
 *    clone3 with ENOSYS, as its flags are behind a pointer: libc falls back to clone;
 *    setns fails with EPERM;
 *  - keyctl, add_key, request_key (the kernel keyrings are not namespaced), bpf,
 *    perf_event_open and userfaultfd fail with EPERM;
 *  - the calls that change another process's limits or priorities fail with EPERM
 *    when aimed at our pid: prlimit64 and sched_setaffinity/setscheduler/setparam/
 *    setattr; setpriority and ioprio_set also when aimed at our process group or at a
 *    whole user (PRIO_USER and IOPRIO_WHO_USER reach every process of the uid). With
 *    one uid for both of us they need no ptrace access: prlimit on PID 1 (a tiny
 *    RLIMIT_CPU, RLIMIT_NOFILE 0) would make us die or fail to report, a platform
 *    fault and a free retry; the idle I/O class would starve our report. In the
 *    container the only processes are us and the entrant's own, so "not us" is "the
 *    entrant's own": glibc's setrlimit (prlimit64(0, ...)), nice, ionice, and
 *    pthread_setaffinity_np/pthread_setschedparam (which name a thread by its tid,
 *    not 0: thread pinning in OpenMP, oneDNN, ONNX Runtime) keep working. pidfd_open
 *    stays allowed: a pidfd of PID 1 can only signal (dropped) or poll it;
 *    pidfd_getfd is denied.
 *
 * Memory: the container's limit covers its tmpfs mounts, so an entrant can fill it
 * with files that outlive its processes. The runner asks Docker for oom_score_adj
 * -1000 on us where the engine may set it; the entrant starts at 1000, so the OOM
 * killer takes its processes first. And before the clock we charge RESERVE_BYTES of
 * memfd pages (not part of our RSS, so they do not make us a likelier OOM victim)
 * that we free once every entrant process is gone: whatever the entrant left behind,
 * we have the memory to read its output and write our line.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* PODIUM_ARCH: the target we were compiled for (uname's spelling), which --self-test
 * reports: a cross-built binary says aarch64 wherever it runs. */
#if defined(__x86_64__)
#define PODIUM_AUDIT_ARCH AUDIT_ARCH_X86_64
#define PODIUM_ARCH "x86_64"
#elif defined(__aarch64__)
#define PODIUM_AUDIT_ARCH AUDIT_ARCH_AARCH64
#define PODIUM_ARCH "aarch64"
#else
#error "supervise: no seccomp architecture for this target (x86-64 and arm64 only)"
#endif
/* The same numbers on every architecture, for headers older than the calls. */
#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#define __NR_io_uring_enter 426
#define __NR_io_uring_register 427
#endif
#ifndef __NR_clone3
#define __NR_clone3 435
#endif
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x80
#endif
#ifndef SECCOMP_RET_KILL_PROCESS
#define SECCOMP_RET_KILL_PROCESS 0x80000000U
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define KILL_RETRY_NS 50000000LL /* after the deadline, re-kill every 50 ms */
#define RESERVE_BYTES (4 << 20)  /* memory we give back to ourselves off the clock */
#define ENTRANT_OOM_SCORE_ADJ "1000"
#define PREWARM_BYTES (16 << 20) /* of the entrypoint, read before the clock */
#define WALK_FILES 65536          /* --prewarm-files: names the walk visits, at most */
#define WALK_MS 60000             /* --prewarm-ms: how long the walk may take, at most */
#define WALK_CHUNK (1 << 20)      /* each read() of the walk */
#define WALK_OPEN_DIRS 16         /* nftw's descriptors */
#define PREWARMED "supervise: prewarmed\n" /* on stderr, right before the clock */
#define WARM_UP "--warm-up"          /* argv[1] of our own warm-up exec: exit 0 at once */
#define METER_FILE_BYTES 4096        /* of each cgroup file the meter reads */
#define SELF_TEST "--self-test"
#define SELF_TEST_SLEEP_MS 50        /* the daemonized orphan's sleep, on the clock */
#define SELF_TEST_DEADLINE_MS 10000
#define SELF_TEST_PROCESSES 4        /* the child, two grandchildren, the orphan */
static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void usage(const char *why)
{
    fprintf(stderr, "supervise: %s\nusage: supervise --deadline-ms N --log-dir DIR "
            "--output PATH --expect-bytes N [--tail-bytes N] [--settle-ms N] "
            "[--prewarm-bytes N [--prewarm-files N] [--prewarm-ms N]] "
            "[--supervisor-user UID:GID --entrant-user UID:GID] -- PROGRAM ARG...\n"
            "       supervise --self-test\n", why);
    exit(2);
}

static void die(const char *what)
{
    fprintf(stderr, "supervise: %s: %s\n", what, strerror(errno));
    exit(1);
}

static long long parse_num(const char *s, long long max)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > max)
        usage("bad number");
    return v;
}

/* ---- two uids: ours and the entrant's ---- */

struct user { uid_t uid; gid_t gid; };
static struct user self_user, entrant_user; /* set with both --*-user options */
static int two_users;

static struct user parse_user(const char *s) /* "UID:GID", neither of them root */
{
    const char *colon = strchr(s, ':');
    char uid[16];
    if (!colon || (size_t)(colon - s) >= sizeof uid)
        usage("a user is UID:GID");
    memcpy(uid, s, (size_t)(colon - s));
    uid[colon - s] = 0;
    struct user u = {(uid_t)parse_num(uid, 0x7fffffffLL),
                     (gid_t)parse_num(colon + 1, 0x7fffffffLL)};
    if (u.uid == 0 || u.gid == 0)
        usage("a user must not be root");
    return u;
}

/* Before anything else, while we still hold CAP_SETPCAP, CAP_SETGID and CAP_SETUID:
 * an empty bounding set and no supplementary group for us and all that we start, then
 * real and effective ids ours, saved ids the entrant's. With every uid non-zero the
 * kernel clears our permitted and effective capabilities; we clear the inheritable
 * ones, and check that nothing is left. */
static void become_ourselves(void)
{
    for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0)
            die("emptying the capability bounding set");
    if (setgroups(0, NULL) != 0)
        die("setgroups");
    if (setresgid(self_user.gid, self_user.gid, entrant_user.gid) != 0)
        die("setresgid");
    if (setresuid(self_user.uid, self_user.uid, entrant_user.uid) != 0)
        die("setresuid");
    struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct caps[2];
    memset(caps, 0, sizeof caps);
    if (syscall(SYS_capset, &head, caps) != 0 || syscall(SYS_capget, &head, caps) != 0)
        die("capabilities");
    uid_t r, e, saved;
    unsigned left = caps[0].permitted | caps[0].effective | caps[0].inheritable |
                    caps[1].permitted | caps[1].effective | caps[1].inheritable;
    if (getresuid(&r, &e, &saved) != 0 || r != self_user.uid || e != r ||
        saved != entrant_user.uid || left != 0) {
        errno = EPERM;
        die("dropping privileges");
    }
}

/* Our effective uid: the entrant's, to signal its processes (kill wants the sender's
 * real or effective uid to be the target's) and to open the output in its folder, or
 * back to ours. Changing it resets the dumpable flag: we clear it again. */
static void act_as_entrant(int yes)
{
    if (!two_users)
        return;
    if (setresuid((uid_t)-1, yes ? entrant_user.uid : self_user.uid, (uid_t)-1) != 0)
        fprintf(stderr, "supervise: setresuid: %s\n", strerror(errno));
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

/* ---- base64 onto stdout ---- */
static void b64(const unsigned char *p, size_t n) /* n % 3 == 0 except at the end */
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (; n > 0; p += 3, n = n > 3 ? n - 3 : 0) {
        char q[4] = {t[p[0] >> 2], t[(p[0] & 3) << 4 | (n > 1 ? p[1] >> 4 : 0)],
                     n > 1 ? t[(p[1] & 15) << 2 | (n > 2 ? p[2] >> 6 : 0)] : '=',
                     n > 2 ? t[p[2] & 63] : '='};
        fwrite(q, 1, 4, stdout);
    }
}

/* Base64 of the last `tail` bytes of a log, read through our own descriptor (the
 * entrant may have renamed or replaced the path), in chunks of a multiple of 3. */
static unsigned char tail_buf[3 * 16384];

static void b64_tail(const char *key, int fd, long long tail)
{
    unsigned char *buf = tail_buf;
    struct stat st = {0};
    ssize_t n = 0;
    off_t off = fstat(fd, &st) == 0 && st.st_size > tail ? st.st_size - tail : 0;
    printf(", \"%s\": \"", key);
    while (off < st.st_size) {
        size_t got = 0;
        while (got < sizeof tail_buf &&
               (n = pread(fd, buf + got, sizeof tail_buf - got, off + (off_t)got)) > 0)
            got += (size_t)n;
        b64(buf, got);
        off += (off_t)got;
        if (got < sizeof tail_buf)
            break;
    }
    printf("\"");
}

/* ---- the meter: the container's cgroup files, read off the clock ---- */

/* The allow-lists, relative to our cgroup's folder: CPU time, the memory peak, OOM
 * events, the PID peak and block I/O bytes, plus v2's list of enabled controllers (it
 * tells why a file is missing). v1's cpuacct.usage_user/_sys and cpuacct.stat are
 * sampled (at the tick, on most kernels), cpuacct.usage is the scheduler's exact sum:
 * scoring/meter.py splits the latter by the former. v1's memory.failcnt is left out:
 * it counts every time the usage touched the limit, reclaim included, not OOM events.
 * pids.peak is new (older kernels lack it, under either version); blkio's recursive
 * file only exists with CFQ or BFQ. */
static const char *const meter_v2[] = {
    "cgroup.controllers", "cpu.stat", "memory.peak", "memory.events", "pids.peak", "io.stat"};
static const char *const meter_v1[] = {
    "cpuacct/cpuacct.usage", "cpuacct/cpuacct.usage_user", "cpuacct/cpuacct.usage_sys",
    "cpuacct/cpuacct.stat", "memory/memory.max_usage_in_bytes", "memory/memory.oom_control",
    "pids/pids.peak", "blkio/blkio.throttle.io_service_bytes",
    "blkio/blkio.io_service_bytes_recursive"};
#define METER_MAX_FILES (sizeof meter_v1 / sizeof *meter_v1)

static const char *const *meter_files; /* NULL: no meter (not PID 1, or no cgroup) */
static size_t meter_count;
static char meter_dir[1024];
/* One byte more than the bound, to tell a longer file (left out) from a full one. */
static unsigned char meter_buf[METER_MAX_FILES][METER_FILE_BYTES + 1];
static ssize_t meter_len[METER_MAX_FILES]; /* -1: not read */

/* Reads all of a small file into buf (at most cap bytes); -1 if it cannot be opened,
 * is not a regular file (cgroupfs files are), fails to read or is longer than cap. */
static ssize_t read_small(const char *path, unsigned char *buf, size_t cap)
{
    struct stat st;
    ssize_t len = 0, n = 1;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        n = -1;
    while (n > 0 && (size_t)len <= cap) /* their st_size says nothing: read to EOF */
        if ((n = read(fd, buf + len, cap + 1 - (size_t)len)) > 0)
            len += n;
    close(fd);
    return n < 0 || (size_t)len > cap ? -1 : len;
}

/* Before the clock: which version and which folder. Only as PID 1, where the engine
 * gave us the container's own cgroup. Under v1 the engine mounts each controller's
 * folder of the container at /sys/fs/cgroup/<controller> (cpuacct may be a link to
 * "cpu,cpuacct": O_NOFOLLOW refuses a link only as the last step). Under v2 the folder
 * is /sys/fs/cgroup plus our path in /proc/self/cgroup's "0::" line: "/" in a cgroup
 * namespace of our own (Docker's default on v2), the full path where the engine shares
 * the host's namespace and mounts the whole tree; /sys/fs/cgroup itself would then be
 * the host's root, whose cpu.stat and io.stat are the whole machine's. */
static void meter_prepare(void)
{
    struct stat st;
    if (getpid() != 1)
        return;
    if (lstat("/sys/fs/cgroup/cgroup.controllers", &st) != 0) {
        snprintf(meter_dir, sizeof meter_dir, "/sys/fs/cgroup");
        meter_files = meter_v1;
        meter_count = sizeof meter_v1 / sizeof *meter_v1;
        return;
    }
    unsigned char *buf = meter_buf[0]; /* not in use yet */
    ssize_t len = read_small("/proc/self/cgroup", buf, METER_FILE_BYTES);
    if (len <= 0)
        return;
    buf[len] = 0;
    char *line = (char *)buf;
    while (line && strncmp(line, "0::/", 4) != 0)
        if ((line = strchr(line, '\n')))
            line++;
    if (!line)
        return;
    line[strcspn(line, "\n")] = 0;
    if (snprintf(meter_dir, sizeof meter_dir, "/sys/fs/cgroup%s", line + 3) >=
        (int)sizeof meter_dir)
        return;
    meter_files = meter_v2;
    meter_count = sizeof meter_v2 / sizeof *meter_v2;
}

/* After the clock's second reading, with no entrant process left: every file of the
 * allow-list that can be read whole. Returns the time it took. */
static long long meter_read(void)
{
    long long started = mono_ns();
    char path[sizeof meter_dir + 64];
    for (size_t k = 0; k < METER_MAX_FILES; k++)
        meter_len[k] = -1;
    for (size_t k = 0; k < meter_count; k++) {
        /* "/" alone (our own namespace's root) needs no second slash */
        const char *sep = meter_dir[strlen(meter_dir) - 1] == '/' ? "" : "/";
        snprintf(path, sizeof path, "%s%s%s", meter_dir, sep, meter_files[k]);
        meter_len[k] = read_small(path, meter_buf[k], METER_FILE_BYTES);
    }
    return mono_ns() - started;
}

static void print_meter(long long meter_ns)
{
    const char *comma = "";
    printf(", \"cgroup\": {");
    for (size_t k = 0; k < meter_count; k++) {
        if (meter_len[k] < 0)
            continue;
        printf("%s\"%s\": \"", comma, meter_files[k]);
        b64(meter_buf[k], (size_t)meter_len[k]);
        printf("\"");
        comma = ", ";
    }
    printf("}, \"meter_ns\": %lld", meter_ns);
}

/* ---- killing what is left at the deadline ---- */

/* Native only: SIGKILL every descendant of ours listed in /proc. Orphans reparent
 * to us (subreaper), so everything we still have to reap is in this tree; a process
 * forked between the scan and the kill is caught by the next round. */
static void kill_descendants(void)
{
    struct proc { pid_t pid, ppid; int mine; } *t = NULL, *nt;
    size_t n = 0, cap = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[64], buf[512], *rp;
        int fd, pid = atoi(e->d_name);
        ssize_t len;
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        if (pid <= 0 || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            continue;
        len = read(fd, buf, sizeof buf - 1);
        close(fd);
        buf[len > 0 ? len : 0] = 0;
        if (!(rp = strrchr(buf, ')'))) /* "pid (comm) S ppid ...", comm may hold ')' */
            continue;
        if (n == cap) {
            if (!(nt = realloc(t, (cap = 2 * cap + 1024) * sizeof *t)))
                break;
            t = nt;
        }
        t[n++] = (struct proc){pid, atoi(rp + 4), 0};
    }
    if (d)
        closedir(d);
    pid_t self = getpid();
    for (int changed = 1; changed;) { /* mark our tree, one level per pass */
        changed = 0;
        for (size_t i = 0; i < n; i++) {
            int mine = t[i].ppid == self;
            for (size_t j = 0; j < n && !mine && !t[i].mine; j++)
                mine = t[j].mine && t[j].pid == t[i].ppid;
            if (mine && !t[i].mine)
                t[i].mine = changed = 1;
        }
    }
    for (size_t i = 0; i < n; i++)
        if (t[i].mine)
            kill(t[i].pid, SIGKILL);
    free(t);
}

static void kill_all(pid_t child, int child_reaped)
{
    act_as_entrant(1);
    if (getpid() == 1) { /* every process of the entrant's uid in this PID namespace */
        kill(-1, SIGKILL);
    } else {
        if (!child_reaped) /* its pgid cannot have been reused while it is unreaped */
            kill(-child, SIGKILL);
        kill_descendants();
    }
    act_as_entrant(0);
}

/* ---- the entrant's seccomp filter (see the header for the policy) ---- */

#ifndef __X32_SYSCALL_BIT
#define __X32_SYSCALL_BIT 0x40000000
#endif
/* The low 32 bits of a syscall argument: pid_t and int arguments are truncated to
 * them by the kernel, so comparing all 64 bits would let 0x100000001 pass for 1. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ARG_LOW(i) (offsetof(struct seccomp_data, args) + 8 * (i))
#else
#define ARG_LOW(i) (offsetof(struct seccomp_data, args) + 8 * (i) + 4)
#endif
#define LOAD(offset) ((struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (offset)))
#define IF_EQ(k, jt, jf) ((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (k), (jt), (jf)))
#define IF_ANY(k, jt, jf) \
    ((struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, (k), (jt), (jf)))
#define RET(k) ((struct sock_filter)BPF_STMT(BPF_RET | BPF_K, (k)))
#define FAIL(e) RET(SECCOMP_RET_ERRNO | ((e) & SECCOMP_RET_DATA))
#define DENY FAIL(EPERM)
#define ALLOW RET(SECCOMP_RET_ALLOW)
#define NAMESPACES (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | \
                    CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWTIME)

static struct sock_filter filter[192];
static struct sock_fprog filter_prog;

/* Each rule starts with A = the syscall number and either returns or falls through to
 * the next rule with A unchanged; it jumps only forward and within itself. */
#define EMIT(...)                                                                     \
    do {                                                                              \
        const struct sock_filter rule_[] = {__VA_ARGS__};                             \
        if (n + sizeof rule_ / sizeof *rule_ > sizeof filter / sizeof *filter) {      \
            fprintf(stderr, "supervise: the seccomp filter does not fit\n");           \
            exit(1);                                                                  \
        }                                                                             \
        memcpy(filter + n, rule_, sizeof rule_);                                      \
        n += (unsigned short)(sizeof rule_ / sizeof *rule_);                          \
    } while (0)

/* Built before the clock; the child only installs it. `self` and `group` are our pid
 * and process group as the entrant sees them (one PID namespace). */
static void build_filter(pid_t self, pid_t group)
{
    static const unsigned denied[] = {
        __NR_ptrace, __NR_process_vm_readv, __NR_process_vm_writev, __NR_kcmp,
        __NR_pidfd_getfd, __NR_io_uring_setup, __NR_io_uring_enter,
        __NR_io_uring_register, __NR_setns, __NR_keyctl, __NR_add_key, __NR_request_key,
        __NR_bpf, __NR_perf_event_open, __NR_userfaultfd};
    /* The first argument names the target process (0: the caller). */
    static const unsigned aimed[] = {__NR_prlimit64, __NR_sched_setaffinity,
                                     __NR_sched_setscheduler, __NR_sched_setparam,
                                     __NR_sched_setattr};
    /* (which, who, ...): setpriority's PRIO_* and ioprio_set's IOPRIO_WHO_*. */
    static const struct { unsigned nr, process, pgrp, user; } which_who[] = {
        {__NR_setpriority, PRIO_PROCESS, PRIO_PGRP, PRIO_USER},
        {__NR_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, 2 /* _PGRP */, 3 /* _USER */}};
    unsigned short n = 0;

    EMIT(LOAD(offsetof(struct seccomp_data, arch)), IF_EQ(PODIUM_AUDIT_ARCH, 1, 0),
         RET(SECCOMP_RET_KILL_PROCESS), LOAD(offsetof(struct seccomp_data, nr)));
#ifdef __x86_64__
    EMIT(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, __X32_SYSCALL_BIT, 0, 1),
         RET(SECCOMP_RET_KILL_PROCESS));
#endif
    for (size_t i = 0; i < sizeof denied / sizeof *denied; i++)
        EMIT(IF_EQ(denied[i], 0, 1), DENY);
    EMIT(IF_EQ(__NR_clone3, 0, 1), FAIL(ENOSYS));
    for (size_t i = 0; i < sizeof aimed / sizeof *aimed; i++)
        EMIT(IF_EQ(aimed[i], 0, 4),          /* not this one: on to the next rule */
             LOAD(ARG_LOW(0)),               /* the target pid; 0 is the caller */
             IF_EQ((unsigned)self, 0, 1),
             DENY,
             ALLOW);
    for (size_t i = 0; i < sizeof which_who / sizeof *which_who; i++)
        EMIT(IF_EQ(which_who[i].nr, 0, 10),
             LOAD(ARG_LOW(0)),                       /* which */
             IF_EQ(which_who[i].user, 6, 0),         /* every process of a uid: no */
             IF_EQ(which_who[i].process, 0, 2),
             LOAD(ARG_LOW(1)),                       /* who: a pid */
             IF_EQ((unsigned)self, 3, 4),
             IF_EQ(which_who[i].pgrp, 0, 3),
             LOAD(ARG_LOW(1)),                       /* who: a process group */
             IF_EQ((unsigned)group, 0, 1),
             DENY,
             ALLOW);
    /* socket(domain, ...) and socketpair(domain, ...): AF_UNIX only */
    EMIT(IF_EQ(__NR_socket, 1, 0),
         IF_EQ(__NR_socketpair, 0, 4),
         LOAD(ARG_LOW(0)),
         IF_EQ(AF_UNIX, 0, 1),
         ALLOW,
         FAIL(EAFNOSUPPORT));
    /* unshare(flags) and clone(flags, ...): no new namespace of any kind */
    EMIT(IF_EQ(__NR_unshare, 1, 0),
         IF_EQ(__NR_clone, 0, 4),
         LOAD(ARG_LOW(0)),
         IF_ANY(NAMESPACES, 0, 1),
         DENY,
         ALLOW);
    EMIT(ALLOW);
    filter_prog = (struct sock_fprog){.len = n, .filter = filter};
}

/* ---- set-up off the clock ---- */

/* Nothing we inherited reaches the entrant (Docker gives us only 0-2; natively the
 * caller may leak more). Every descriptor we open ourselves is close-on-exec. */
static void close_inherited_fds(void)
{
#ifdef __NR_close_range
    if (syscall(__NR_close_range, 3U, ~0U, 0U) == 0)
        return;
#endif
    for (int fd = 3; fd < 65536; fd++) /* kernels before 5.9 */
        close(fd);
}

/* Our environment without any CONTEST_* of its own, plus ours from ARG 1..3. */
static char **entrant_env(char **prog)
{
    static const char *names[3] = {"CONTEST_MANIFEST", "CONTEST_IMAGE_ROOT", "CONTEST_OUTPUT"};
    extern char **environ;
    size_t n = 0, k = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 4, sizeof *env);
    if (!env)
        die("environment");
    for (size_t i = 0; i < n; i++) {
        int ours = 0;
        for (int j = 0; j < 3; j++) {
            size_t len = strlen(names[j]);
            ours |= !strncmp(environ[i], names[j], len) && environ[i][len] == '=';
        }
        if (!ours)
            env[k++] = environ[i];
    }
    for (int j = 0; j < 3 && prog[j] && prog[j + 1]; j++)
        if (asprintf(&env[k++], "%s=%s", names[j], prog[j + 1]) < 0)
            die("environment");
    return env;
}

/* Memory charged to us now and freed once no entrant process is left. memfd pages
 * are not in our RSS, so they do not raise our OOM badness. Best effort: without
 * memfd we run as before. */
static int reserve_memory(void)
{
    int fd = memfd_create("podium-reserve", MFD_CLOEXEC);
    if (fd >= 0 && fallocate(fd, 0, 0, RESERVE_BYTES) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Fault in the stack the reporting code will use, so it needs no new page later. */
static void touch_stack(void)
{
    volatile char page[64 * 1024];
    for (size_t i = 0; i < sizeof page; i += 4096)
        page[i] = 0;
}

/* Off the clock, first of the rules' warm start (prewarm_walk reads the rest): look up
 * and read the entrypoint (and its #! interpreter) so that exec does not pay for a cold
 * lookup through the image's storage driver (a round trip to a user-space daemon for
 * each path step with fuse-overlayfs). Regular files only, at most PREWARM_BYTES of each,
 * never blocking: a FIFO or a device is skipped. */
static void prewarm(const char *path, int interpreters)
{
    unsigned char *buf = tail_buf; /* already faulted in, not yet in use */
    char interpreter[256] = "";
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        off_t want = st.st_size < PREWARM_BYTES ? st.st_size : PREWARM_BYTES, off = 0;
        ssize_t n;
        while (off < want && (n = pread(fd, buf, sizeof tail_buf, off)) > 0) {
            if (off == 0 && n > 2 && buf[0] == '#' && buf[1] == '!') {
                size_t i = 2, k = 0;
                while (i < (size_t)n && (buf[i] == ' ' || buf[i] == '\t'))
                    i++;
                while (i < (size_t)n && k + 1 < sizeof interpreter && buf[i] > ' ')
                    interpreter[k++] = (char)buf[i++];
                interpreter[k] = 0;
            }
            off += n;
        }
    }
    close(fd);
    if (interpreter[0] == '/' && interpreters > 0)
        prewarm(interpreter, interpreters - 1);
}

/* The rules' warm start: off the clock, as PID 1 only (natively "/" is the host's), the
 * same for every entrant. We walk the container's root filesystem, as the entrant (its
 * effective uid and gid, our saved ones: a file it cannot read is not read), and read
 * every regular file into the page cache, through the container's own mount (a storage
 * driver such as fuse-overlayfs keeps a page cache per mount: warming the image from
 * the host would not help). Deny by default: a physical walk (a symlink is never
 * followed), never /proc, /sys or /dev, nothing on a pseudo or memory filesystem (the
 * list below: tmpfs holds our logs and the entrant's empty output and scratch space),
 * only what lstat and then fstat of an O_NOFOLLOW|O_NONBLOCK descriptor both call a
 * regular file (a FIFO is never opened, a device never read). Bounded, the same bounds
 * for everyone: at most walk.budget bytes, walk.max_names names visited (files,
 * folders, links: a million empty files stop there too), and walk.deadline on our
 * clock, a safety net the runner sizes from a floor rate so that it does not fire on a
 * healthy host. Reaching a bound stops the walk and sets "prewarm_truncated". */
static struct {
    long long budget, max_names, deadline;
    long long bytes, files, names;
    int truncated;
    unsigned char *buf;
} walk;

/* Filesystems whose files are no image's: pseudo ones (proc, sysfs, devpts, cgroup and
 * cgroup2, mqueue, securityfs, debugfs, tracefs, binfmt_misc, pstore, bpf, fusectl,
 * configfs, nsfs, autofs) and memory ones (tmpfs and devtmpfs share a magic; ramfs,
 * hugetlbfs). The numbers are linux/magic.h's, spelled out for older headers. */
static int walk_skips(long type)
{
    static const unsigned long skipped[] = {
        0x9fa0 /* proc */, 0x62656572 /* sysfs */, 0x1cd1 /* devpts */,
        0x01021994 /* tmpfs, devtmpfs */, 0x27e0eb /* cgroup */, 0x63677270 /* cgroup2 */,
        0x19800202 /* mqueue */, 0x73636673 /* securityfs */, 0x64626720 /* debugfs */,
        0x74726163 /* tracefs */, 0x42494e4d /* binfmt_misc */, 0x6165676c /* pstore */,
        0xcafe4a11 /* bpf */, 0x65735543 /* fusectl */, 0x62656570 /* configfs */,
        0x6e736673 /* nsfs */, 0x0187 /* autofs */, 0x858458f6 /* ramfs */,
        0x958458f6 /* hugetlbfs */};
    for (size_t i = 0; i < sizeof skipped / sizeof *skipped; i++)
        if ((unsigned long)(unsigned int)type == skipped[i])
            return 1;
    return 0;
}

/* Reads one regular file (at most what is left of the budget) through its descriptor. */
static void walk_read(const char *path)
{
    struct stat st;
    struct statfs fs;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return; /* the entrant could not read it either */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && fstatfs(fd, &fs) == 0 &&
        !walk_skips((long)fs.f_type)) {
        long long want = st.st_size, off = 0;
        if (want > walk.budget - walk.bytes) {
            want = walk.budget - walk.bytes;
            walk.truncated = 1;
        }
        ssize_t n = 1;
        while (off < want && n > 0 && mono_ns() < walk.deadline) {
            size_t chunk = want - off < WALK_CHUNK ? (size_t)(want - off) : WALK_CHUNK;
            if ((n = pread(fd, walk.buf, chunk, (off_t)off)) > 0)
                off += n;
            else if (n < 0 && errno == EINTR)
                n = 1;
        }
        if (off < want && n > 0)
            walk.truncated = 1; /* the deadline */
        walk.bytes += off;
        walk.files += off > 0;
    }
    close(fd);
}

static int walk_visit(const char *path, const struct stat *sb, int type, struct FTW *at)
{
    struct statfs fs;
    if (++walk.names > walk.max_names || mono_ns() >= walk.deadline) {
        walk.truncated = 1;
        return FTW_STOP;
    }
    if (type == FTW_D) {
        if (at->level == 1 && (!strcmp(path, "/proc") || !strcmp(path, "/sys") ||
                               !strcmp(path, "/dev")))
            return FTW_SKIP_SUBTREE;
        return statfs(path, &fs) == 0 && !walk_skips((long)fs.f_type) ? FTW_CONTINUE
                                                                      : FTW_SKIP_SUBTREE;
    }
    if (type == FTW_F && S_ISREG(sb->st_mode) && sb->st_size > 0)
        walk_read(path);
    return walk.truncated ? FTW_STOP : FTW_CONTINUE;
}

/* The walk (see above); returns the time it took. Only as PID 1 and with a budget. */
static long long prewarm_walk(long long budget, long long max_names, long long max_ms)
{
    long long started = mono_ns();
    walk.budget = budget;
    walk.max_names = max_names;
    walk.deadline = started + max_ms * 1000000LL;
    if (getpid() != 1 || budget <= 0 || !(walk.buf = malloc(WALK_CHUNK)))
        return mono_ns() - started;
    if (two_users && setresgid((gid_t)-1, entrant_user.gid, (gid_t)-1) != 0)
        die("setresgid");
    act_as_entrant(1);
    nftw("/", walk_visit, WALK_OPEN_DIRS, FTW_PHYS | FTW_ACTIONRETVAL);
    act_as_entrant(0);
    if (two_users && setresgid((gid_t)-1, self_user.gid, (gid_t)-1) != 0)
        die("setresgid");
    free(walk.buf);
    walk.buf = NULL;
    return mono_ns() - started;
}

/* A fresh container's first fork and exec are slow (about 0.3 ms more than the next
 * ones: the new namespaces' and cgroups' first use); pay that off the clock with a
 * fork and exec of ourselves that exits at once. No entrant code runs. Returns the
 * resource usage it added to RUSAGE_CHILDREN, to be left out of the entrant's. */
static struct rusage warm_up(void)
{
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    pid_t pid = fork();
    if (pid == 0) {
        char *args[] = {"supervise", WARM_UP, NULL};
        execv("/proc/self/exe", args);
        _exit(0);
    }
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    getrusage(RUSAGE_CHILDREN, &ru);
    return ru;
}

/* ---- the entrant's side of the fork ---- */

static void setup_failed(int status_fd, const char *step)
{
    dprintf(status_fd, "%s: %s", step, strerror(errno));
    _exit(127);
}

static void run_entrant(char **prog, char **env, const int log_fds[2], int devnull,
                        int status_fd)
{
    /* Own session (native kill by group; never in our process group), fds 0-2 only. */
    setsid();
    if (dup2(devnull, 0) < 0 || dup2(log_fds[0], 1) < 0 || dup2(log_fds[1], 2) < 0)
        setup_failed(status_fd, "stdio");
#ifdef __NR_close_range
    syscall(__NR_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC); /* already all are */
#endif
    /* The entrant's ids, all three of each (they are our saved ones: no privilege). */
    if (two_users && (setresgid(entrant_user.gid, entrant_user.gid, entrant_user.gid) != 0 ||
                      setresuid(entrant_user.uid, entrant_user.uid, entrant_user.uid) != 0))
        setup_failed(status_fd, "entrant uid");
    /* The OOM killer takes the entrant's processes before us. Raising one's own
     * score needs no privilege; the entrant may lower it again, but not below the
     * minimum Docker's privileged write gave us (see the runner). Our fork inherited
     * non-dumpable, which makes /proc/self root's: undo it (exec would anyway; this
     * process holds nothing secret). */
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, ENTRANT_OOM_SCORE_ADJ, strlen(ENTRANT_OOM_SCORE_ADJ)) < 0)
        setup_failed(status_fd, "oom_score_adj");
    close(fd);
    /* No core files, not even into the entrant's own tmpfs; a hard limit of 0 also
     * tells a core_pattern pipe helper on the host not to keep anything. */
    struct rlimit no_core = {0, 0};
    if (setrlimit(RLIMIT_CORE, &no_core) != 0)
        setup_failed(status_fd, "RLIMIT_CORE");
    sigset_t none;
    sigemptyset(&none);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        setup_failed(status_fd, "no_new_privs");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter_prog) != 0)
        setup_failed(status_fd, "seccomp");
    execve(prog[0], prog, env);
    /* A missing or unexecutable entrypoint is the entrant's: exit 127, said in its log. */
    dprintf(2, "supervise: exec %s: %s\n", prog[0], strerror(errno));
    _exit(127);
}

/* ---- the clock's side: reaping until no descendant is left ---- */

/* SIGCHLD at its default (an inherited SIG_IGN would make the kernel reap for us) and
 * blocked, so sigtimedwait() can sleep until one arrives without a race. SIGPIPE ignored
 * (a closed result pipe must not kill us silently). No other handler: as PID 1 the
 * kernel then drops whatever the entrant sends us. */
static void signals_prepare(sigset_t *chld)
{
    sigemptyset(chld);
    sigaddset(chld, SIGCHLD);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGPIPE, SIG_IGN);
    sigprocmask(SIG_SETMASK, chld, NULL);
}

struct reaped {
    long long end;    /* the clock's second reading, right after ECHILD */
    int killed;       /* the deadline passed and we killed what was left */
    int child_reaped; /* and wstatus is the child's */
    int wstatus;
    int count;        /* descendants reaped (for --self-test) */
    int unclean;      /* of them, those that did not exit 0 (for --self-test) */
};

/* Reap everything until ECHILD; at the deadline, kill what is left, again every
 * KILL_RETRY_NS until all are reaped. Sleeps only in sigtimedwait() on `chld`. */
static struct reaped reap_all(pid_t child, long long deadline, sigset_t *chld)
{
    struct reaped r = {0, 0, 0, 0, 0, 0};
    for (;;) {
        int ws;
        pid_t p = waitpid(-1, &ws, WNOHANG);
        if (p > 0) {
            r.count++;
            r.unclean += !WIFEXITED(ws) || WEXITSTATUS(ws) != 0;
            if (p == child) {
                r.wstatus = ws;
                r.child_reaped = 1;
            }
            continue;
        }
        if (p < 0 && errno == EINTR)
            continue;
        if (p < 0) { /* ECHILD: no descendant left anywhere */
            r.end = mono_ns();
            return r;
        }
        long long now = mono_ns(), wait_ns = KILL_RETRY_NS;
        if (now >= deadline)
            r.killed = 1;
        if (r.killed)
            kill_all(child, r.child_reaped); /* again every 50 ms until all are reaped */
        else
            wait_ns = deadline - now;
        struct timespec ts = {wait_ns / 1000000000LL, wait_ns % 1000000000LL};
        sigtimedwait(chld, NULL, &ts); /* woken by SIGCHLD or the timeout */
    }
}

/* ---- --self-test (see the header) ---- */

static void self_test_tree(void)
{
    struct timespec nap = {0, SELF_TEST_SLEEP_MS * 1000000L};
    pid_t quick = fork();
    if (quick == 0)
        _exit(0);
    pid_t daemonizer = fork();
    if (daemonizer == 0) {
        setsid();
        pid_t orphan = fork();
        if (orphan == 0) {
            while (nanosleep(&nap, &nap) != 0)
                if (errno != EINTR)
                    _exit(1);
            _exit(0);
        }
        _exit(orphan > 0 ? 0 : 1);
    }
    _exit(quick > 0 && daemonizer > 0 ? 0 : 1); /* without waiting: both become orphans */
}

/* How orphans reach us: as PID 1 (in a PID namespace), else as a subreaper, else not at
 * all (an emulator may refuse PR_SET_CHILD_SUBREAPER: Debian 12's qemu-user 7.2 does). */
static const char *self_test_reaper(void)
{
    int subreaper = 0;
    if (getpid() == 1)
        return "pid1";
    if (prctl(PR_GET_CHILD_SUBREAPER, &subreaper, 0, 0, 0) == 0 && subreaper)
        return "subreaper";
    return "none";
}

static int self_test(void)
{
    sigset_t chld;
    const char *reaper = self_test_reaper();
    signals_prepare(&chld);
    warm_up(); /* as a run: last before the clock */
    long long start = mono_ns();
    pid_t child = fork();
    if (child == 0)
        self_test_tree();
    if (child < 0)
        die("fork");
    struct reaped r = reap_all(child, start + SELF_TEST_DEADLINE_MS * 1000000LL, &chld);
    long long wall = r.end - start, sleep_ns = SELF_TEST_SLEEP_MS * 1000000LL;
    int ok = r.count == SELF_TEST_PROCESSES && r.unclean == 0 && r.child_reaped &&
             !r.killed && wall >= sleep_ns;
    if (!strcmp(reaper, "none"))
        fprintf(stderr, "supervise: --self-test: neither PID 1 nor a subreaper: orphans "
                "escape the clock\n");
    printf("{\"podium_supervisor_self_test\": 1, \"arch\": \"%s\", \"reaper\": \"%s\", "
           "\"start_ns\": %lld, \"end_ns\": %lld, \"wall_ns\": %lld, \"sleep_ns\": %lld, "
           "\"reaped\": %d, \"expected\": %d, \"killed\": %s, \"ok\": %s}\n",
           PODIUM_ARCH, reaper, start, r.end, wall, sleep_ns, r.count, SELF_TEST_PROCESSES,
           r.killed ? "true" : "false", ok ? "true" : "false");
    return fflush(stdout) == 0 && ok ? 0 : 1;
}

/* ---- main ---- */
static char stdout_buf[1 << 16];

int main(int argc, char **argv)
{
    long long deadline_ms = -1, expect = -1, tail = 65536, settle_ms = 0;
    long long walk_bytes = 0, walk_files = WALK_FILES, walk_ms = WALK_MS;
    const char *log_dir = NULL, *output = NULL, *self_spec = NULL, *entrant_spec = NULL;
    int i;

    if (argc == 2 && !strcmp(argv[1], WARM_UP)) /* see warm_up() */
        return 0;
    /* 1. Before anything else: no core dumps, no /proc/self/{environ,fd,mem} to the
     * entrant's uid, no ptrace. Subreaper: orphans come to us when not PID 1. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    close_inherited_fds();
    if (argc == 2 && !strcmp(argv[1], SELF_TEST))
        return self_test();

    for (i = 1; i < argc && strcmp(argv[i], "--") != 0; i += 2) {
        if (i + 1 >= argc)
            usage("option without a value");
        if (!strcmp(argv[i], "--deadline-ms"))
            deadline_ms = parse_num(argv[i + 1], 86400000LL);
        else if (!strcmp(argv[i], "--expect-bytes"))
            expect = parse_num(argv[i + 1], 1LL << 40);
        else if (!strcmp(argv[i], "--tail-bytes"))
            tail = parse_num(argv[i + 1], 1LL << 30);
        else if (!strcmp(argv[i], "--settle-ms"))
            settle_ms = parse_num(argv[i + 1], 10000LL);
        else if (!strcmp(argv[i], "--prewarm-bytes"))
            walk_bytes = parse_num(argv[i + 1], 1LL << 50);
        else if (!strcmp(argv[i], "--prewarm-files"))
            walk_files = parse_num(argv[i + 1], 1LL << 40);
        else if (!strcmp(argv[i], "--prewarm-ms"))
            walk_ms = parse_num(argv[i + 1], 86400000LL);
        else if (!strcmp(argv[i], "--log-dir"))
            log_dir = argv[i + 1];
        else if (!strcmp(argv[i], "--output"))
            output = argv[i + 1];
        else if (!strcmp(argv[i], "--supervisor-user"))
            self_spec = argv[i + 1];
        else if (!strcmp(argv[i], "--entrant-user"))
            entrant_spec = argv[i + 1];
        else
            usage("unknown option");
    }
    if (deadline_ms <= 0 || expect < 0 || !log_dir || !output)
        usage("--deadline-ms, --log-dir, --output and --expect-bytes are required");
    if (i + 1 >= argc)
        usage("no program after --");
    char **prog = argv + i + 1;
    if (!self_spec != !entrant_spec)
        usage("--supervisor-user and --entrant-user go together");
    if (self_spec) {
        self_user = parse_user(self_spec);
        entrant_user = parse_user(entrant_spec);
        if (self_user.uid == entrant_user.uid || self_user.gid == entrant_user.gid)
            usage("the supervisor and the entrant need a uid and a gid each");
        two_users = 1;
        become_ourselves();
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); /* a change of uid reset it */
    }

    /* Signals: see signals_prepare. */
    sigset_t chld;
    signals_prepare(&chld);

    /* 2. Log files, ours: the entrant cannot swap them (we read back through these
     * descriptors), and O_NOFOLLOW refuses a planted symlink. With two users they and
     * their folder belong to our uid: the entrant has only the descriptors. */
    char path[4096];
    int fds[2], devnull, status[2];
    const char *names[2] = {"stdout.log", "stderr.log"};
    for (int k = 0; k < 2; k++) {
        if (snprintf(path, sizeof path, "%s/%s", log_dir, names[k]) >= (int)sizeof path)
            usage("--log-dir too long");
        fds[k] = open(path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fds[k] < 0)
            die(path);
    }
    if ((devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
        die("/dev/null");

    /* 3. Everything the child and the report need, prepared and faulted in now. */
    char **env = entrant_env(prog);
    build_filter(getpid(), getpgrp());
    size_t out_cap = (size_t)expect + 1;
    unsigned char *out = malloc(out_cap);
    if (!out)
        die("output buffer");
    memset(out, 0, out_cap);
    memset(tail_buf, 0, sizeof tail_buf);
    memset(stdout_buf, 0, sizeof stdout_buf);
    memset(meter_buf, 0, sizeof meter_buf);
    meter_prepare();
    setvbuf(stdout, stdout_buf, _IOFBF, sizeof stdout_buf);
    touch_stack();
    prewarm(prog[0], 1);
    long long prewarm_ns = prewarm_walk(walk_bytes, walk_files, walk_ms);
    int reserve = reserve_memory();
    /* Says why the child could not set up; closed unread by a successful exec. */
    if (pipe2(status, O_CLOEXEC) != 0)
        die("pipe");
    /* Let the engine finish starting us (runc, containerd, dockerd answering the
     * start and the runner's wait): on a small host that work would otherwise compete
     * for the CPU with the entrant's first milliseconds on the clock. */
    struct timespec settle = {settle_ms / 1000, settle_ms % 1000 * 1000000L};
    while (settle_ms > 0 && nanosleep(&settle, &settle) != 0 && errno == EINTR)
        ;
    /* Tells the runner that whatever stops us from here on is on the entrant's side of
     * the line (an outer timeout before it is a platform fault: see the header). */
    if (write(2, PREWARMED, sizeof PREWARMED - 1) < 0) {
        /* nothing to do: the runner then blames the platform, never the entrant */
    }
    struct rusage warm_ru = warm_up(); /* last: right before the clock, while warm */

    long long start = mono_ns();
    pid_t child = fork();
    if (child == 0)
        run_entrant(prog, env, fds, devnull, status[1]);
    if (child < 0)
        die("fork");
    close(status[1]);
    close(devnull);
    char why[256];
    ssize_t got;
    while ((got = read(status[0], why, sizeof why - 1)) < 0 && errno == EINTR)
        ;
    if (got > 0) { /* a platform fault: no result line */
        why[got] = 0;
        waitpid(child, NULL, 0);
        fprintf(stderr, "supervise: cannot set up the entrant: %s\n", why);
        return 1;
    }
    close(status[0]);

    /* 4. Reap everything until ECHILD; at the deadline, kill what is left. */
    struct reaped reaped = reap_all(child, start + deadline_ms * 1000000LL, &chld);
    long long end = reaped.end;
    int killed = reaped.killed, child_reaped = reaped.child_reaped, wstatus = reaped.wstatus;

    /* 5. Off the clock: give our reserve back (no entrant process is left to take
     * it), the meter (after end: every entrant process has been charged to the cgroup,
     * and the reading is never part of wall_ns), resource usage, the output file (the
     * log tails in 6), read as the entrant (its folder), which no entrant process is
     * left to exploit. */
    if (reserve >= 0)
        close(reserve);
    long long meter_ns = meter_read();
    act_as_entrant(1);
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    getrusage(RUSAGE_CHILDREN, &ru);
    timersub(&ru.ru_utime, &warm_ru.ru_utime, &ru.ru_utime); /* the entrant's only */
    timersub(&ru.ru_stime, &warm_ru.ru_stime, &ru.ru_stime);

    const char *out_err = "";
    long long out_bytes = -1;
    size_t out_len = 0;
    struct stat st;
    int ofd = open(output, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (ofd < 0)
        out_err = errno == ENOENT ? "missing"
                  : errno == ELOOP ? "not a regular file" : strerror(errno);
    else if (fstat(ofd, &st) != 0)
        out_err = strerror(errno);
    else if (!S_ISREG(st.st_mode))
        out_err = "not a regular file";
    else {
        /* Nothing can write it any more: every entrant process is dead. */
        size_t want = st.st_size < (off_t)out_cap ? (size_t)st.st_size : out_cap;
        ssize_t n = 1;
        out_bytes = st.st_size;
        while (out_len < want && (n = pread(ofd, out + out_len, want - out_len, (off_t)out_len)) > 0)
            out_len += (size_t)n;
        if (n < 0) {
            out_err = strerror(errno);
            out_len = 0;
        }
    }

    /* 6. The one result line (strerror texts need no JSON escaping). */
    char code[16] = "null", sig[16] = "null";
    if (child_reaped && WIFEXITED(wstatus))
        snprintf(code, sizeof code, "%d", WEXITSTATUS(wstatus));
    if (child_reaped && WIFSIGNALED(wstatus))
        snprintf(sig, sizeof sig, "%d", WTERMSIG(wstatus));
    printf("{\"podium_supervisor\": 1, \"start_ns\": %lld, \"end_ns\": %lld, "
           "\"wall_ns\": %lld, \"exit_code\": %s, \"signal\": %s, \"killed\": %s, "
           "\"rusage\": {\"utime_us\": %lld, \"stime_us\": %lld, \"maxrss_kb\": %ld}, "
           "\"output_bytes\": %lld, \"output_error\": \"%s\", \"output_b64\": \"",
           start, end, end - start, code, sig, killed ? "true" : "false",
           (long long)ru.ru_utime.tv_sec * 1000000LL + ru.ru_utime.tv_usec,
           (long long)ru.ru_stime.tv_sec * 1000000LL + ru.ru_stime.tv_usec,
           ru.ru_maxrss, out_bytes, out_err);
    b64(out, out_len);
    printf("\"");
    b64_tail("stdout_tail_b64", fds[0], tail);
    b64_tail("stderr_tail_b64", fds[1], tail);
    print_meter(meter_ns);
    printf(", \"prewarm_ns\": %lld, \"prewarm_bytes\": %lld, \"prewarm_files\": %lld, "
           "\"prewarm_truncated\": %s}\n",
           prewarm_ns, walk.bytes, walk.files, walk.truncated ? "true" : "false");
    free(out);
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
