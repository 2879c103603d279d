"""The warm start (supervise.c, ``prewarm_walk``), in Docker, as the runner runs it: the
supervisor as PID 1 under its own uid, the entrant as 65534.

What an entrant would notice: with the warm start, its first read of a large image file
is as fast as its second, even when the host's caches were just dropped; and what a
hostile image cannot do to the walk: make it follow a symlink, block on a FIFO, read a
file the entrant may not read, or run past its bounds. Times are only ever compared as
ratios within one run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.supervisor.test_supervisor import (
    Run,
    container_args,
    container_supervise,
    supervise,
    timed,
    write_program,
)

__all__ = ["container_supervise", "supervise"]

MIB = 1 << 20
BIG_MIB = 128
# Bounds far above what these images hold: only what the test means to bound is.
WIDE = ["--prewarm-files", "100000", "--prewarm-ms", "60000"]

# Times two reads of a file (its whole contents, 1 MiB at a time) with CLOCK_MONOTONIC.
READER = r"""
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static char buf[1 << 20];
static long long read_ns(const char *path)
{
    struct timespec a, b;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    clock_gettime(CLOCK_MONOTONIC, &a);
    while (read(fd, buf, sizeof buf) > 0)
        ;
    clock_gettime(CLOCK_MONOTONIC, &b);
    close(fd);
    return (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
}
int main(int argc, char **argv)
{
    long long first = read_ns(argv[1]), second = read_ns(argv[1]);
    printf("first_ns=%lld second_ns=%lld\n", first, second);
    return first < 0;
}
"""

# A large file of random bytes (no storage layer can make it small), readable by all.
BIG_IMAGE = f"""FROM localhost/podium/busybox:1
RUN mkdir /data && dd if=/dev/urandom of=/data/big bs=1M count={BIG_MIB} 2>/dev/null \\
    && chmod 0644 /data/big
"""

# What a hostile image may hold: symlinks to a large file, to /proc, /sys and the root,
# a FIFO, a large file only root may read, and many empty files.
HOSTILE_IMAGE = """FROM localhost/podium/busybox:1
RUN mkdir -p /w/many && dd if=/dev/urandom of=/w/big bs=1M count=8 2>/dev/null \\
    && chmod 0644 /w/big \\
    && for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do ln -s /w/big /w/link$i; done \\
    && ln -s /proc /w/proc && ln -s /proc/1/environ /w/environ && ln -s /sys /w/sys \\
    && ln -s / /w/root && ln -s .. /w/many/up \\
    && mkfifo -m 0666 /w/fifo \\
    && dd if=/dev/urandom of=/w/secret bs=1M count=32 2>/dev/null && chmod 0600 /w/secret \\
    && cd /w/many && i=0 && while [ $i -lt 3000 ]; do : > f$i; i=$((i+1)); done
"""


def build(tag: str, dockerfile: str) -> None:
    """Build ``dockerfile`` with no network for its RUN steps: they need none, and the
    default bridge may be gone (a second engine started with ``--bridge=none`` in the same
    network namespace, as the fleet test does, removes ``docker0``)."""
    done = subprocess.run(
        ["docker", "build", "--network=none", "-q", "-t", tag, "-"],
        input=dockerfile.encode(),
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")


@pytest.fixture(scope="module")
def images(container_supervise: Path) -> Iterator[dict[str, str]]:
    suffix = uuid.uuid4().hex[:10]
    tags = {
        "big": f"localhost/podium-test/prewarm-big:{suffix}",
        "hostile": f"localhost/podium-test/prewarm-hostile:{suffix}",
    }
    try:
        build(tags["big"], BIG_IMAGE)
        build(tags["hostile"], HOSTILE_IMAGE)
        yield tags
    finally:
        subprocess.run(["docker", "rmi", "-f", *tags.values()], capture_output=True, check=False)


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("reader")
    (folder / "reader.c").write_text(READER)
    cc = os.environ.get("CC", "cc")
    done = subprocess.run(
        [cc, "-O2", "-static", "-o", str(folder / "reader"), str(folder / "reader.c")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (folder / "reader").chmod(0o755)
    return folder / "reader"


def drop_caches() -> bool:
    """Empties the host's page cache (root only); False where that is not allowed."""
    if shutil.which("sync"):
        subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def run(
    supervisor: Path,
    program: Path,
    image: str,
    options: Sequence[str],
    extra: Sequence[str] = (),
) -> Run:
    args = container_args(
        supervisor, program, own_uid=True, image=image, options=options, extra=extra
    )
    return timed(["docker", "run", "--rm", *args])


def read_times(run: Run) -> tuple[int, int]:
    fields = dict(part.split("=") for part in run.stdout_tail.decode().split())
    first, second = int(fields["first_ns"]), int(fields["second_ns"])
    assert first > 0 and second > 0, run.stdout_tail
    return first, second


def reading_program(tmp_path: Path, path: str) -> Path:
    return write_program(tmp_path / "run", f"exec /probe/reader {path}\n")


@pytest.mark.docker
def test_the_first_read_of_a_large_image_file_is_as_warm_as_the_second(
    container_supervise: Path, images: dict[str, str], reader: Path, tmp_path: Path
) -> None:
    program = reading_program(tmp_path, "/data/big")
    dropped = drop_caches()

    run_ = run(
        container_supervise,
        program,
        images["big"],
        ["--prewarm-bytes", str(1 << 30), *WIDE],
        extra=["-v", f"{reader}:/probe/reader:ro"],
    )

    r = run_.result
    assert (r["exit_code"], r["killed"]) == (0, False)
    assert r["prewarm_truncated"] is False
    assert r["prewarm_bytes"] >= BIG_MIB * MIB and r["prewarm_files"] >= 2
    assert r["prewarm_ns"] > 0
    # Before the clock: the host's interval holds the walk, then the trusted one.
    assert run_.host_start + r["prewarm_ns"] <= r["start_ns"]
    run_.assert_inside_host_interval()
    first, second = read_times(run_)
    assert first <= 2 * second, (first, second, "caches dropped" if dropped else "")


@pytest.mark.docker
def test_without_the_warm_start_the_first_read_pays_for_the_disk(
    container_supervise: Path, images: dict[str, str], reader: Path, tmp_path: Path
) -> None:
    program = reading_program(tmp_path, "/data/big")
    if not drop_caches():
        pytest.skip("the host's page cache cannot be dropped here (not root)")

    run_ = run(
        container_supervise,
        program,
        images["big"],
        ["--prewarm-bytes", "0"],
        extra=["-v", f"{reader}:/probe/reader:ro"],
    )

    r = run_.result
    assert (r["prewarm_bytes"], r["prewarm_files"], r["prewarm_truncated"]) == (0, 0, False)
    first, second = read_times(run_)
    assert first >= 1.5 * second, (first, second)


@pytest.mark.docker
def test_a_hostile_image_gets_no_link_followed_no_fifo_opened_and_no_secret_read(
    container_supervise: Path, images: dict[str, str], tmp_path: Path
) -> None:
    program = write_program(
        tmp_path / "run",
        "cat /w/secret > /dev/null 2>&1 && echo secret: read || echo secret: refused\n",
    )

    run_ = run(
        container_supervise, program, images["hostile"], ["--prewarm-bytes", str(1 << 30), *WIDE]
    )

    r = run_.result
    assert run_.stdout_tail == b"secret: refused\n"  # the entrant may not read it either
    assert r["prewarm_truncated"] is False  # /proc and /sys (thousands of names) not walked
    # /w/big once (8 MiB), never through its 16 links (128 MiB more), nor /w/secret
    # (32 MiB); the rest is busybox, the supervisor and Docker's few /etc files.
    assert 8 * MIB <= r["prewarm_bytes"] < 8 * MIB + 8 * MIB
    assert r["prewarm_files"] < 50  # the 3,000 empty files are visited, not read
    assert run_.elapsed < 30  # the FIFO did not block


@pytest.mark.docker
@pytest.mark.parametrize(
    ("options", "expected_bytes"),
    [
        (["--prewarm-bytes", str(3 * MIB), *WIDE], 3 * MIB),  # stops at the byte budget
        (["--prewarm-bytes", str(1 << 30), "--prewarm-files", "500"], None),  # the names
        (["--prewarm-bytes", str(1 << 30), "--prewarm-ms", "0"], 0),  # the time bound
    ],
    ids=["bytes", "names", "time"],
)
def test_the_walk_stops_at_its_bound(
    container_supervise: Path,
    images: dict[str, str],
    tmp_path: Path,
    options: list[str],
    expected_bytes: int | None,
) -> None:
    program = write_program(tmp_path / "run", "exit 0\n")

    run_ = run(container_supervise, program, images["hostile"], options)

    r = run_.result
    assert r["prewarm_truncated"] is True
    assert r["exit_code"] == 0
    if expected_bytes is not None:
        assert r["prewarm_bytes"] == expected_bytes
    run_.assert_inside_host_interval()


@pytest.mark.docker
def test_the_same_bounds_give_the_same_walk(
    container_supervise: Path, images: dict[str, str], tmp_path: Path
) -> None:
    program = write_program(tmp_path / "run", "exit 0\n")
    options = ["--prewarm-bytes", str(1 << 30), "--prewarm-files", "700", "--prewarm-ms", "60000"]

    walks = [run(container_supervise, program, images["hostile"], options).result for _ in range(2)]

    readings = [(w["prewarm_bytes"], w["prewarm_files"], w["prewarm_truncated"]) for w in walks]
    assert readings[0] == readings[1] and readings[0][2] is True
