/*
 * supervise: Podium's trusted timer (PID 1 of the scoring container).
 *
 *   supervise --deadline-ms N --log-dir DIR --output PATH --expect-bytes N
 *             [--tail-bytes N] -- PROGRAM ARG...
 *
 * Contract (the Python runner depends on every line of it):
 *  - The clock is CLOCK_MONOTONIC, read immediately before fork() and again right
 *    after waitpid() says no descendant is left. Docker containers share the host's
 *    monotonic clock, so the host can check that its own interval contains ours.
 *  - The entrant (PROGRAM) runs in a new session, stdin /dev/null, stdout and
 *    stderr in DIR/stdout.log and DIR/stderr.log, no other inherited descriptor,
 *    no_new_privs, CONTEST_MANIFEST/IMAGE_ROOT/OUTPUT set from ARG 1..3 (those
 *    given), the rest of our environment kept. It never shares our stdout, so it
 *    cannot forge the result line.
 *  - We are a child subreaper (and PID 1 in Docker), so every orphan reparents to
 *    us; we reap until ECHILD, so a daemonized grandchild stays on the clock.
 *  - At the deadline (counted from the first clock reading) we SIGKILL everything
 *    left and keep reaping: as PID 1, kill(-1) (every process of our uid in the
 *    namespace but us); natively, the child's process group plus every descendant
 *    found in /proc (never kill(-1) on a host). "killed" is then true.
 *  - Off the clock we read PATH (O_NOFOLLOW|O_NONBLOCK, must be a regular file, at
 *    most expect-bytes + 1 bytes) and the last tail-bytes of each log through our
 *    own descriptors, then write exactly ONE JSON line to fd 1 and exit 0:
 *    {"podium_supervisor": 1, "start_ns", "end_ns", "wall_ns", "exit_code",
 *     "signal", "killed", "rusage": {"utime_us", "stime_us", "maxrss_kb"},
 *     "output_bytes", "output_error", "output_b64", "stdout_tail_b64",
 *     "stderr_tail_b64"}
 *  - Exit 2 on a usage error, 1 if the run could not be set up (message on stderr).
 *
 * Why: we run under the entrant's own uid. Non-dumpable keeps it from reading
 * /proc/1/environ or /proc/1/fd and from ptrace. As PID 1 without handlers, the
 * kernel drops SIGKILL/SIGSTOP/SIGTERM sent from inside the namespace. Everything
 * that is not timing (reading the output and logs, encoding) happens after the
 * second clock reading, when no entrant process is alive to race us.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KILL_RETRY_NS 50000000LL /* after the deadline, re-kill every 50 ms */

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void usage(const char *why)
{
    fprintf(stderr, "supervise: %s\nusage: supervise --deadline-ms N --log-dir DIR "
            "--output PATH --expect-bytes N [--tail-bytes N] -- PROGRAM ARG...\n", why);
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
static void b64_tail(const char *key, int fd, long long tail)
{
    static unsigned char buf[3 * 16384];
    struct stat st = {0};
    ssize_t n = 0;
    off_t off = fstat(fd, &st) == 0 && st.st_size > tail ? st.st_size - tail : 0;
    printf(", \"%s\": \"", key);
    while (off < st.st_size) {
        size_t got = 0;
        while (got < sizeof buf && (n = pread(fd, buf + got, sizeof buf - got, off + (off_t)got)) > 0)
            got += (size_t)n;
        b64(buf, got);
        off += (off_t)got;
        if (got < sizeof buf)
            break;
    }
    printf("\"");
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
    if (getpid() == 1) { /* every process of our uid in this PID namespace but us */
        kill(-1, SIGKILL);
        return;
    }
    if (!child_reaped) /* its pgid cannot have been reused while it is unreaped */
        kill(-child, SIGKILL);
    kill_descendants();
}

/* ---- main ---- */
int main(int argc, char **argv)
{
    long long deadline_ms = -1, expect = -1, tail = 65536;
    const char *log_dir = NULL, *output = NULL;
    int i;

    /* 1. Before anything else: no core dumps, no /proc/self/{environ,fd,mem} to the
     * entrant's uid, no ptrace. Subreaper: orphans come to us when not PID 1. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

    for (i = 1; i < argc && strcmp(argv[i], "--") != 0; i += 2) {
        if (i + 1 >= argc)
            usage("option without a value");
        if (!strcmp(argv[i], "--deadline-ms"))
            deadline_ms = parse_num(argv[i + 1], 86400000LL);
        else if (!strcmp(argv[i], "--expect-bytes"))
            expect = parse_num(argv[i + 1], 1LL << 40);
        else if (!strcmp(argv[i], "--tail-bytes"))
            tail = parse_num(argv[i + 1], 1LL << 30);
        else if (!strcmp(argv[i], "--log-dir"))
            log_dir = argv[i + 1];
        else if (!strcmp(argv[i], "--output"))
            output = argv[i + 1];
        else
            usage("unknown option");
    }
    if (deadline_ms <= 0 || expect < 0 || !log_dir || !output)
        usage("--deadline-ms, --log-dir, --output and --expect-bytes are required");
    if (i + 1 >= argc)
        usage("no program after --");
    char **prog = argv + i + 1;

    /* Signals: SIGCHLD at its default (an inherited SIG_IGN would make the kernel
     * reap for us) and blocked, so sigtimedwait() can sleep until one arrives
     * without a race. SIGPIPE ignored (a closed result pipe must not kill us
     * silently). No other handler: as PID 1 the kernel then drops whatever the
     * entrant sends us. */
    sigset_t chld, none;
    sigemptyset(&none);
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGPIPE, SIG_IGN);
    sigprocmask(SIG_SETMASK, &chld, NULL);

    /* 2. Log files, ours: the entrant cannot swap them (we read back through these
     * descriptors), and O_NOFOLLOW refuses a planted symlink. */
    char path[4096];
    int fds[2], devnull;
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

    long long start = mono_ns();
    pid_t child = fork();
    if (child == 0) {
        /* 3. The entrant: own session (native kill by group), fds 0-2 only. */
        setsid();
        if (dup2(devnull, 0) < 0 || dup2(fds[0], 1) < 0 || dup2(fds[1], 2) < 0)
            _exit(127);
        if (close_range(3, ~0U, 0) != 0) {
            for (int fd = 3; fd < 65536; fd++)
                close(fd);
        }
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        static const char *env[3] = {"CONTEST_MANIFEST", "CONTEST_IMAGE_ROOT",
                                     "CONTEST_OUTPUT"};
        for (int k = 0; k < 3 && prog[k] && prog[k + 1]; k++)
            setenv(env[k], prog[k + 1], 1);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv(prog[0], prog);
        dprintf(2, "supervise: exec %s: %s\n", prog[0], strerror(errno));
        _exit(127);
    }
    if (child < 0)
        die("fork");
    close(devnull);

    /* 4. Reap everything until ECHILD; at the deadline, kill what is left. */
    long long deadline = start + deadline_ms * 1000000LL, end;
    int killed = 0, child_reaped = 0, status = 0;
    for (;;) {
        int ws;
        pid_t p = waitpid(-1, &ws, WNOHANG);
        if (p > 0) {
            if (p == child) {
                status = ws;
                child_reaped = 1;
            }
            continue;
        }
        if (p < 0 && errno == EINTR)
            continue;
        if (p < 0) { /* ECHILD: no descendant left anywhere */
            end = mono_ns();
            break;
        }
        long long now = mono_ns(), wait_ns = KILL_RETRY_NS;
        if (now >= deadline)
            killed = 1;
        if (killed)
            kill_all(child, child_reaped); /* again every 50 ms until all are reaped */
        else
            wait_ns = deadline - now;
        struct timespec ts = {wait_ns / 1000000000LL, wait_ns % 1000000000LL};
        sigtimedwait(&chld, NULL, &ts); /* woken by SIGCHLD or the timeout */
    }

    /* 5. Off the clock: resource usage, the output file (the log tails in 6). */
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    getrusage(RUSAGE_CHILDREN, &ru);

    const char *out_err = "";
    long long out_bytes = -1;
    unsigned char *out = NULL;
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
        size_t want = (size_t)(st.st_size < expect + 1 ? st.st_size : expect + 1);
        ssize_t n = 1;
        out_bytes = st.st_size;
        if (!(out = malloc(want + 1)))
            out_err = strerror(errno);
        while (out && out_len < want && (n = pread(ofd, out + out_len, want - out_len, (off_t)out_len)) > 0)
            out_len += (size_t)n;
        if (n < 0) {
            out_err = strerror(errno);
            out_len = 0;
        }
    }

    /* 6. The one result line (strerror texts need no JSON escaping). */
    char code[16] = "null", sig[16] = "null";
    if (child_reaped && WIFEXITED(status))
        snprintf(code, sizeof code, "%d", WEXITSTATUS(status));
    if (child_reaped && WIFSIGNALED(status))
        snprintf(sig, sizeof sig, "%d", WTERMSIG(status));
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
    printf("}\n");
    free(out);
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
