"""Reaching past the sandbox: files, network, /proc, secrets, privileges, namespaces, clocks."""

from __future__ import annotations

import hashlib

import pytest

from portal.contests.models import CohortItem
from portal.core import storage
from tests.hostile.conftest import ENGINE_PROFILES, SECOND, Hostile, script

pytestmark = pytest.mark.docker

ROFS = "Read-only file system"
DENIED = "Operation not permitted"
NO_FAMILY = "Address family not supported by protocol"

SCRIPTS = {
    "writes": script(
        """
        first=$(cut -f2 "$CONTEST_MANIFEST" | head -n1)
        for target in /planted /submission/planted /contest/input/planted /etc/passwd \\
                      /podium/supervise /usr/local/bin/attack "/contest/input/images/$first" \\
                      "$CONTEST_MANIFEST"; do
          (echo planted >> "$target") 2>/dev/null && echo "wrote $target" || echo "refused $target"
        done
        rm -f "$CONTEST_MANIFEST" 2>/dev/null && echo "removed the manifest"
        mkdir /contest/input/x 2>&1 | grep -o "$ROFS" | head -n1
        printf '#!/bin/sh\necho hi\n' > /contest/output/x && chmod +x /contest/output/x
        /contest/output/x 2>/dev/null && echo "ran from the output" || echo "output: noexec"
        rm /contest/output/x
        cp /bin/busybox /tmp/echo && /tmp/echo "ran from /tmp"
        answer
        """.replace("$ROFS", ROFS)
    ),
    "network": script(
        """
        echo "links: $(ls /sys/class/net | tr '\\n' ' ')"
        nc -w 2 172.17.0.1 2375 </dev/null 2>/dev/null && echo "reached the docker host" \\
          || echo "docker host: unreachable"
        wget -q -T 2 -O /dev/null http://1.1.1.1/ 2>/dev/null && echo "reached the internet" \\
          || echo "internet: unreachable"
        nslookup example.com >/dev/null 2>&1 && echo "resolved a name" || echo "dns: none"
        nc -w 2 169.254.169.254 80 </dev/null 2>/dev/null && echo "reached metadata" \\
          || echo "metadata: unreachable"
        ls /var/run/docker.sock /run/docker.sock 2>/dev/null || echo "docker socket: absent"
        answer
        """
    ),
    "proc": script(
        """
        for f in environ cmdline maps mem; do try "/proc/1/$f" head -c 64 "/proc/1/$f"; done
        try /proc/1/fd ls /proc/1/fd
        try /proc/1/root ls -a /proc/1/root
        try /proc/1/exe readlink /proc/1/exe
        echo "pids: $(ls /proc | grep -c '^[0-9]')"
        echo "== env"; env | sort; echo "== end"
        answer
        """
    ),
    "secrets": script(
        """
        echo "input: $(ls -a /contest/input | tr '\\n' ' ')"
        find / -xdev \\( -name 'mapping.tsv' -o -name private -o -name '*.sock' \\) 2>/dev/null \\
          | sed 's/^/found: /'
        grep -rl 'val_0' /contest/input 2>/dev/null | sed 's/^/canonical name in: /'
        answer
        """
    ),
    "setuid": script(
        """
        ls -l /usr/local/bin/suid-attack | cut -c1-10
        suid-attack ids
        answer
        """
    ),
    "namespaces": script(
        """
        for args in "-U" "-r" "-p -f" "-m" "-n" "-i" "-u" "-C"; do
          try "unshare $args" unshare $args true
        done
        try mount mount -t tmpfs none /tmp
        try nsenter nsenter -t 1 -m true
        try chroot chroot /tmp true
        answer
        """
    ),
    "clock": script(
        """
        attack clock
        date -s '2000-01-01 00:00' 2>&1 >/dev/null | grep -o "can't set date"
        adjtimex -f 1000000 >/dev/null 2>&1 && echo "slewed the clock" || echo "adjtimex: refused"
        answer
        """
    ),
    "kernel": script(
        """
        for target in /proc/sysrq-trigger /proc/sys/kernel/core_pattern /proc/sys/vm/drop_caches \\
                      /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max \\
                      /sys/fs/cgroup/cpu/cpu.shares; do
          (echo 1 > "$target") 2>/dev/null && echo "wrote $target" || echo "refused $target"
        done
        mknod /tmp/mem c 1 1 2>/dev/null && echo "made a device" || echo "mknod: refused"
        head -c1 /dev/mem >/dev/null 2>&1 && echo "read /dev/mem" || echo "/dev/mem: refused"
        answer
        """
    ),
    # Sockets of every family but AF_UNIX reach out of the box: vsock (the hypervisor,
    # CID 2, answers on virtual machines), IP even without a route, netlink.
    "sockets": script(
        """
        attack sockets
        answer
        """
    ),
    # io_uring makes sockets (and much else) in the kernel's own worker threads, past
    # any socket rule.
    "io_uring": script(
        """
        attack io_uring
        answer
        """
    ),
    # What the engine's default profile refuses in one Docker version and not another.
    "surface": script(
        """
        attack surface
        answer
        """
    ),
    # The supervisor's log files: the entrant writes them through the descriptors it
    # was given, nothing else.
    "logs": script(
        """
        echo "still logged"
        echo "still on stderr" >&2
        try "list the logs" ls /contest/logs
        try "new log file" sh -c 'echo planted > /contest/logs/planted'
        try "truncate stdout.log" sh -c ': > /contest/logs/stdout.log'
        try "remove stderr.log" rm /contest/logs/stderr.log
        try "fill the logs" dd if=/dev/zero of=/contest/logs/fill bs=1M count=1
        try "chmod the logs" chmod 0777 /contest/logs
        try "reopen its stdout log" sh -c "echo reopened >> /proc/$$/fd/1"
        answer
        """
    ),
    # The entrypoint is not executable: the entrant's mistake, not the platform's.
    "not_executable": {"submission/run": (b"#!/bin/sh\nexec answer\n", 0o644)},
}


def test_read_only_places_stay_read_only(hostile: Hostile) -> None:
    items = list(CohortItem.objects.filter(cohort__benchmark=hostile.benchmark))

    outcome = hostile.score("writes")

    assert outcome.run.verdict == "passed", outcome.why
    for target in ("/planted", "/submission/planted", "/contest/input/planted", "/etc/passwd"):
        outcome.saw(f"refused {target}")
    outcome.saw("refused /podium/supervise", "refused /usr/local/bin/attack", ROFS)
    outcome.saw("output: noexec", "ran from /tmp")
    assert "wrote " not in outcome.log and "removed the manifest" not in outcome.log
    # The staged images are hard links of the frozen cohort: it is unchanged.
    for item in items:
        data = (storage.cohort_dir(item.cohort_id) / item.canonical_name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == item.sha256


@ENGINE_PROFILES
def test_there_is_no_network(hostile: Hostile, engine_seccomp: str | None) -> None:
    outcome = hostile.score("network", engine_seccomp=engine_seccomp)

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw(
        "links: lo ",
        "docker host: unreachable",
        "internet: unreachable",
        "dns: none",
        "metadata: unreachable",
        "docker socket: absent",
    )
    assert outcome.wall_s < 5  # refused at once, no timeouts


def test_pid1_and_the_host_are_out_of_reach_in_proc(hostile: Hostile, monkeypatch) -> None:
    monkeypatch.setenv("PODIUM_HOSTILE_SECRET", "hunter2")  # the worker's environment

    outcome = hostile.score("proc")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw(
        "/proc/1/environ: refused",
        "/proc/1/maps: refused",
        "/proc/1/mem: refused",
        "/proc/1/fd: refused",
        "/proc/1/root: refused",
        "/proc/1/exe: refused",
        "/proc/1/cmdline: ok",  # world-readable, and only the public ABI paths
    )
    pids = int(outcome.log.split("pids: ", 1)[1].split()[0])
    assert pids < 10  # the container's own processes only, not the host's
    env = outcome.log.split("== env\n", 1)[1].split("== end", 1)[0].splitlines()
    names = {line.split("=", 1)[0] for line in env if "=" in line}
    assert names <= {"PATH", "HOSTNAME", "HOME", "PWD", "SHLVL", "OLDPWD", "CONTEST_MANIFEST"} | {
        "CONTEST_IMAGE_ROOT",
        "CONTEST_OUTPUT",
    }, names
    outcome.saw(
        "CONTEST_MANIFEST=/contest/input/manifest.tsv",
        "CONTEST_IMAGE_ROOT=/contest/input/images",
        "CONTEST_OUTPUT=/contest/output/predictions.i32",
    )
    assert "hunter2" not in outcome.log and "DJANGO_SETTINGS_MODULE" not in outcome.log


def test_no_private_mapping_canonical_name_or_socket_is_visible(hostile: Hostile) -> None:
    outcome = hostile.score("secrets")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw("input: . .. images manifest.tsv ")
    assert "found: " not in outcome.log
    assert "canonical name in: " not in outcome.log


def test_a_setuid_root_binary_gives_no_root(hostile: Hostile, settings) -> None:
    outcome = hostile.score("setuid")
    uid = settings.PODIUM_RUN_UID

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw(
        "-rwsr-xr-x",  # root-owned, setuid, in the image
        f"uid={uid} euid={uid} suid={uid}",
        "setuid-0: Operation not permitted",
    )


@ENGINE_PROFILES
def test_no_namespace_mount_or_chroot_can_be_made(
    hostile: Hostile, engine_seccomp: str | None
) -> None:
    outcome = hostile.score("namespaces", engine_seccomp=engine_seccomp)

    assert outcome.run.verdict == "passed", outcome.why
    for args in ("-U", "-r", "-p -f", "-m", "-n", "-i", "-u", "-C"):
        outcome.saw(f"unshare {args}: refused")
    outcome.saw("mount: refused", "nsenter: refused", "chroot: refused")
    assert ": ok" not in outcome.log


def test_the_clocks_cannot_be_set_or_slewed(hostile: Hostile) -> None:
    outcome = hostile.score("clock")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw(
        "clock_settime-monotonic: Operation not permitted",
        "clock_settime-realtime: Operation not permitted",
        "can't set date",
        "adjtimex: refused",
    )
    assert 0 < outcome.wall_ns < 5 * SECOND


def test_kernel_and_cgroup_knobs_are_out_of_reach(hostile: Hostile) -> None:
    outcome = hostile.score("kernel")

    assert outcome.run.verdict == "passed", outcome.why
    assert "wrote " not in outcome.log
    outcome.saw("refused /proc/sysrq-trigger", "mknod: refused", "/dev/mem: refused")


def test_an_entrypoint_that_cannot_be_executed_errs(hostile: Hostile) -> None:
    outcome = hostile.score("not_executable")

    assert outcome.run.verdict == "errored", outcome.why
    assert outcome.run.verdict_reason == "The program exited with code 127."
    assert "supervise: exec /submission/run: Permission denied" in outcome.log


@ENGINE_PROFILES
def test_only_unix_sockets_can_be_made(hostile: Hostile, engine_seccomp: str | None) -> None:
    outcome = hostile.score("sockets", engine_seccomp=engine_seccomp)

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw(
        f"socket-vsock: {NO_FAMILY}",
        f"socket-inet: {NO_FAMILY}",
        f"socket-inet6: {NO_FAMILY}",
        f"socket-netlink: {NO_FAMILY}",
        f"socket-packet: {NO_FAMILY}",
        f"socket-high-bits-vsock: {NO_FAMILY}",  # the kernel reads the low 32 bits only
        f"socketpair-vsock: {NO_FAMILY}",
        "socket-unix: ok",
        "socket-unix-dgram: ok",
        "socketpair-unix: ok",
    )


@ENGINE_PROFILES
def test_io_uring_is_refused(hostile: Hostile, engine_seccomp: str | None) -> None:
    outcome = hostile.score("io_uring", engine_seccomp=engine_seccomp)

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw(
        f"io_uring_setup: {DENIED}",
        f"io_uring_enter: {DENIED}",
        f"io_uring_register: {DENIED}",
    )
    assert "io_uring-socket-vsock" not in outcome.log  # no ring, no socket made through one


@ENGINE_PROFILES
def test_podiums_filter_refuses_what_engine_profiles_disagree_on(
    hostile: Hostile, engine_seccomp: str | None
) -> None:
    outcome = hostile.score("surface", engine_seccomp=engine_seccomp)

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw(
        f"unshare-user: {DENIED}",  # a user namespace would give capabilities inside it
        f"unshare-user-net: {DENIED}",
        f"clone-newuser: {DENIED}",
        "clone3: Function not implemented",  # its flags are out of a filter's sight: libc
        f"keyctl: {DENIED}",  # falls back to clone, which the filter can read
        f"add_key: {DENIED}",
        f"perf_event_open: {DENIED}",
        f"userfaultfd: {DENIED}",
        f"bpf: {DENIED}",
    )


def test_the_log_folder_is_out_of_the_entrants_reach(hostile: Hostile) -> None:
    outcome = hostile.score("logs")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw(
        "list the logs: refused",
        "new log file: refused",
        "truncate stdout.log: refused",
        "remove stderr.log: refused",
        "fill the logs: refused",
        "chmod the logs: refused",
        "reopen its stdout log: refused",
    )
    # What it wrote through its own descriptors still comes back.
    outcome.saw("still logged", "still on stderr")
    assert "reopened" not in outcome.log
