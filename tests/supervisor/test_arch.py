"""The supervisor on both architectures: ``supervise --self-test``, native and cross-built.

The self-test forks a known tree (a child, a grandchild that exits at once, a daemonized
orphan that sleeps ``sleep_ns``), times it with the clock and the reaping loop a scored
run uses, and prints one JSON line. Natively that must pass on this host's architecture;
``make supervisor-aarch64`` must give a static arm64 ELF that passes the same self-test
under user-mode emulation (``qemu-aarch64-static``, no binfmt needed), as PID 1 of a PID
namespace, the way it runs in a scoring container.

Without the cross compiler or qemu these skip, unless ``REQUIRE_DOCKER=1`` (CI installs
both, see ``.ci/run``), which turns the skip into a failure.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from scoring.images import platforms

REPO = Path(__file__).resolve().parents[2]
NATIVE = "scoring/supervisor/supervise"
AARCH64_CC = "aarch64-linux-gnu-gcc"
QEMU = ("qemu-aarch64-static", "qemu-aarch64")
EM_AARCH64 = 183  # e_machine of an arm64 ELF
PT_DYNAMIC, PT_INTERP = 2, 3
KEYS = {
    "podium_supervisor_self_test",
    "arch",
    "reaper",
    "start_ns",
    "end_ns",
    "wall_ns",
    "sleep_ns",
    "reaped",
    "expected",
    "killed",
    "ok",
}
# However busy the machine, the daemonized orphan's sleep is most of the self-test's
# interval: forking four processes and reaping them costs far less than 20 sleeps.
MAX_WALL_OVER_SLEEP = 20


def require(what: str, found: object) -> None:
    """Skip without a tool, or fail when ``REQUIRE_DOCKER=1`` says CI installed it."""
    if found:
        return
    message = f"{what} is not installed"
    if os.environ.get("REQUIRE_DOCKER") == "1":
        pytest.fail(f"REQUIRE_DOCKER=1 but {message} (.ci/run installs it)")
    pytest.skip(message)


def host_arch() -> str:
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine(), platform.machine())


@pytest.fixture(scope="session")
def native() -> Path:
    require("a C compiler", shutil.which(os.environ.get("CC", "cc")))
    build = subprocess.run(["make", NATIVE], cwd=REPO, capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    return REPO / NATIVE


@pytest.fixture(scope="session")
def aarch64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make supervisor-aarch64``, the Makefile's own recipe, into a folder of our own."""
    require(AARCH64_CC, shutil.which(AARCH64_CC))
    binary = tmp_path_factory.mktemp("cross") / "supervise-aarch64"
    build = subprocess.run(
        ["make", "supervisor-aarch64", f"SUPERVISOR_AARCH64={binary}"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return binary


def emulator() -> list[str]:
    """How to run an arm64 binary here: directly on arm64, else under qemu user mode."""
    if host_arch() == "aarch64":
        return []
    found = next((path for path in map(shutil.which, QEMU) if path), None)
    require("qemu-aarch64-static (Debian: qemu-user-static)", found)
    return [str(found)]


def as_pid1() -> list[str]:
    """A new PID namespace whose PID 1 is the command, as in a scoring container (a user
    namespace too when we are not root)."""
    unshare = shutil.which("unshare")
    require("unshare (util-linux)", unshare)
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [str(unshare), *user, "--pid", "--fork", "--kill-child"]


def self_test(command: list[str]) -> tuple[dict[str, Any], int, int, int]:
    """Run a self-test: (its one JSON line, its exit status, the host's monotonic clock
    before and after)."""
    host_start = time.monotonic_ns()
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    host_end = time.monotonic_ns()
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout + done.stderr
    result = json.loads(lines[0])
    assert set(result) == KEYS, result
    assert result["podium_supervisor_self_test"] == 1
    return result, done.returncode, host_start, host_end


def assert_passed(result: dict[str, Any], status: int, host_start: int, host_end: int) -> None:
    assert status == 0 and result["ok"] is True, result
    assert result["reaped"] == result["expected"] == 4
    assert result["killed"] is False
    # The same CLOCK_MONOTONIC as the host's: its interval sits inside ours, and it
    # covers the daemonized orphan's sleep without being made of much else.
    assert host_start <= result["start_ns"] < result["end_ns"] <= host_end
    assert result["wall_ns"] == result["end_ns"] - result["start_ns"]
    assert result["sleep_ns"] == 50_000_000
    assert 1.0 <= result["wall_ns"] / result["sleep_ns"] < MAX_WALL_OVER_SLEEP, result


def elf_header(path: Path) -> tuple[int, list[int]]:
    """(e_machine, the type of every program header) of a 64-bit little-endian ELF."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF", "not an ELF file"
    assert data[4] == 2 and data[5] == 1, "not a 64-bit little-endian ELF"
    (machine,) = struct.unpack_from("<H", data, 18)
    (phoff,) = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    types = [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    return machine, types


def test_the_native_self_test_times_a_daemonized_orphan_on_this_hosts_arch(native: Path) -> None:
    result, status, host_start, host_end = self_test([str(native), "--self-test"])
    assert result["arch"] == host_arch()
    assert result["reaper"] == "subreaper"
    assert_passed(result, status, host_start, host_end)


def test_the_native_self_test_passes_as_pid_1(native: Path) -> None:
    result, status, host_start, host_end = self_test([*as_pid1(), str(native), "--self-test"])
    assert result["reaper"] == "pid1"
    assert_passed(result, status, host_start, host_end)


def test_make_supervisor_aarch64_builds_a_static_arm64_elf(aarch64: Path) -> None:
    machine, segments = elf_header(aarch64)
    assert machine == EM_AARCH64
    assert segments, "no program headers"
    assert PT_INTERP not in segments and PT_DYNAMIC not in segments, "not static"
    assert os.access(aarch64, os.X_OK)


def test_the_arm64_self_test_passes_as_pid_1_under_emulation(aarch64: Path) -> None:
    command = [*as_pid1(), *emulator(), str(aarch64), "--self-test"]
    result, status, host_start, host_end = self_test(command)
    assert result["arch"] == "aarch64"
    assert result["reaper"] == "pid1"
    assert_passed(result, status, host_start, host_end)


def test_the_arm64_self_test_fails_when_orphans_can_escape(aarch64: Path) -> None:
    """Outside a PID namespace it relies on the subreaper prctl, which some qemu-user
    versions refuse (Debian 12's 7.2): then the orphan escapes, and the self-test must say
    so, not pass."""
    result, status, host_start, host_end = self_test([*emulator(), str(aarch64), "--self-test"])
    assert result["arch"] == "aarch64"
    if result["reaper"] == "none":
        assert status == 1 and result["ok"] is False
        assert result["reaped"] < result["expected"]
    else:
        assert result["reaper"] == "subreaper"
        assert_passed(result, status, host_start, host_end)


# Which supervisor a host mounts -------------------------------------------------------------


def test_docker_arch_names_the_architecture_of_a_platform() -> None:
    assert platforms.docker_arch("linux/arm64") == "arm64"
    assert platforms.docker_arch("linux/amd64") == "amd64"
    assert platforms.docker_arch("linux/arm64/v8") == "arm64"
    assert platforms.docker_arch("aarch64") == "arm64"
    assert platforms.docker_arch("x86_64") == "amd64"
    assert platforms.docker_arch("") == ""
    assert platforms.host_platform("x86_64") == "linux/amd64"
    assert platforms.host_platform("aarch64") == "linux/arm64"


def test_a_host_scores_only_classes_of_its_own_architecture() -> None:
    assert platforms.platform_problem("linux/arm64", machine="aarch64") == ""
    assert platforms.platform_problem("linux/amd64", machine="x86_64") == ""
    assert platforms.platform_problem("", machine="x86_64") == ""  # the engine's own
    assert platforms.platform_problem("linux/arm64", machine="x86_64") == (
        "the class runs linux/arm64 images but this host is linux/amd64"
    )
    assert platforms.platform_problem("linux/amd64", machine="aarch64") == (
        "the class runs linux/amd64 images but this host is linux/arm64"
    )
