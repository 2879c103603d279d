"""One scored run of an arm64 submission image end to end, on a host of another architecture.

On an amd64 host the submission's arm64 program runs through binfmt_misc: the scored
container's PID 1 stays the host's native (static, x86-64) supervisor, mounted read-only
as in every run, and its ``exec`` of ``/submission/run``, an arm64 ELF, is handed by the
kernel to ``qemu-aarch64-static``. The binfmt entry must carry the F (fix-binary) flag:
the kernel then opens the emulator when the entry is registered, so it is found inside
the container's mount namespace, where no emulator exists. qemu's own host syscalls run
under the supervisor's seccomp filter, unchanged: this also shows that the filter lets an
emulated entrant run (of qemu's calls it refuses only clone3, with the ENOSYS that makes
glibc fall back to clone) and still holds for it (the program's AF_INET socket is
refused, where network_mode=none alone would allow one). The arm64 supervisor itself
cannot be PID 1 under qemu (no subreaper, no seccomp filter there; see
``scoring.images.platforms.platform_problem``), and emulated time is not a class's time: this
proves the image and the runner's code path, not that emulation may score.

The submission is ``tests/scoring/arm64/run.c``, cross-compiled static for aarch64 and
built ``FROM scratch`` for ``linux/arm64`` through ``scoring.engine.build_image``: no
registry, no base image. It says on stderr what ``uname()`` reports (``aarch64`` under
qemu) and what became of its AF_INET socket, and answers the cohort's class for every
manifest line.

The binfmt entry: an enabled one that already matches an arm64 ELF is used as it is (and
skipped for when it lacks F: it is not ours to change). Without one, as root, binfmt_misc
is mounted if it is not and ``qemu-aarch64`` is registered with flag F; that entry is
left in place (like ``update-binfmts``' own, it lasts until reboot or until removed with
``echo -1 > /proc/sys/fs/binfmt_misc/qemu-aarch64``). Where binfmt cannot be had (not
root, no binfmt_misc) the test skips, saying why. Without the cross compiler or qemu it
skips too, unless ``REQUIRE_DOCKER=1`` (CI installs both), which fails it.

On an arm64 host the same run is native: no emulator and no binfmt entry is needed.
"""

from __future__ import annotations

import io
import os
import platform
import shutil
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from portal.contests.models import LeaderboardEntry
from portal.submissions.models import Run, Submission
from scoring import engine
from scoring.run import runner
from tests.scoring import test_runner
from tests.scoring.test_runner import clock_readings, run_log, the_run
from tests.supervisor.test_arch import AARCH64_CC, QEMU, require

# test_runner's fixtures, shared: Alice's submission queued on a 10-image cohort of class 7,
# and the host's native supervisor (``make``).
queued = test_runner.queued
supervisor_binary = test_runner.supervisor_binary

SOURCE = Path(__file__).resolve().parent / "arm64" / "run.c"
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
BINFMT_NAME = "qemu-aarch64"
# The standard arm64 ELF entry (as Debian's qemu-user-static ships it): 64-bit,
# little-endian, ELF version 1, executable or shared object (e_type 2 or 3), e_machine 183.
AARCH64_MAGIC = bytes.fromhex("7f454c460201010000000000000000000200b700")
AARCH64_MASK = bytes.fromhex("ffffffffffffff00fffffffffffffffffeffffff")
# What the emulated program tells from inside the container: the machine uname() gives,
# and that the supervisor's filter refused its AF_INET socket (EAFNOSUPPORT).
MACHINE_LINE = "machine=aarch64"
REFUSED_LINE = "socket(AF_INET): Address family not supported by protocol"


def on_arm64() -> bool:
    return platform.machine() in ("aarch64", "arm64")


@dataclass(frozen=True)
class BinfmtEntry:
    """One registered binfmt_misc entry, as ``/proc/sys/fs/binfmt_misc/NAME`` shows it."""

    name: str
    enabled: bool
    interpreter: str
    flags: str
    offset: int
    magic: bytes
    mask: bytes

    def matches(self, header: bytes) -> bool:
        """Whether the kernel would hand a file starting with ``header`` to this entry."""
        if not self.enabled or not self.magic:
            return False
        window = header[self.offset : self.offset + len(self.magic)]
        mask = self.mask or b"\xff" * len(self.magic)
        return len(window) == len(self.magic) and all(
            byte & bit == want & bit
            for byte, want, bit in zip(window, self.magic, mask, strict=True)
        )


def binfmt_entries() -> list[BinfmtEntry]:
    """Every registered entry (an extension entry, with no magic, never matches)."""
    entries = []
    for path in sorted(BINFMT_DIR.iterdir()):
        if path.name in ("register", "status"):
            continue
        try:
            lines = path.read_text().splitlines()
        except OSError:  # removed meanwhile
            continue
        fields = dict(line.partition(" ")[::2] for line in lines[1:])
        entries.append(
            BinfmtEntry(
                name=path.name,
                enabled=lines[:1] == ["enabled"],
                interpreter=fields.get("interpreter", ""),
                flags=fields.get("flags:", ""),
                offset=int(fields.get("offset", "0")),
                magic=bytes.fromhex(fields.get("magic", "")),
                mask=bytes.fromhex(fields.get("mask", "")),
            )
        )
    return entries


def register_line(interpreter: str) -> str:
    """``:name:M:offset:magic:mask:interpreter:flags``, every byte escaped."""

    def escaped(data: bytes) -> str:
        return "".join(f"\\x{byte:02x}" for byte in data)

    magic, mask = escaped(AARCH64_MAGIC), escaped(AARCH64_MASK)
    return f":{BINFMT_NAME}:M::{magic}:{mask}:{interpreter}:F"


@pytest.fixture(scope="module")
def arm64_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``run.c``, static for aarch64."""
    compiler = shutil.which(AARCH64_CC)
    require(f"{AARCH64_CC} (Debian: gcc-aarch64-linux-gnu)", compiler)
    binary = tmp_path_factory.mktemp("arm64") / "run"
    build = subprocess.run(
        [str(compiler), "-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(binary), SOURCE],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return binary


@pytest.fixture(scope="module")
def binfmt_aarch64(arm64_program: Path) -> BinfmtEntry | None:
    """The enabled binfmt entry, with flag F, that runs ``arm64_program`` here (None on an
    arm64 host, which runs it natively); registered with qemu-aarch64-static if none is."""
    if on_arm64():
        return None
    header = arm64_program.read_bytes()[:64]
    if not (BINFMT_DIR / "register").exists():
        if os.geteuid() != 0:
            pytest.skip(f"binfmt_misc is not mounted at {BINFMT_DIR} and only root may mount it")
        mounted = subprocess.run(
            ["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT_DIR)],
            capture_output=True,
            text=True,
        )
        if mounted.returncode != 0:
            pytest.skip(f"binfmt_misc cannot be mounted: {mounted.stderr.strip()}")
    if (BINFMT_DIR / "status").read_text().strip() != "enabled":
        pytest.skip("binfmt_misc is disabled on this host (left as it is)")
    found = [entry for entry in binfmt_entries() if entry.matches(header)]
    if not found:
        emulator = next((path for path in map(shutil.which, QEMU) if path), None)
        require("qemu-aarch64-static (Debian: qemu-user-static)", emulator)
        if os.geteuid() != 0:
            pytest.skip("no binfmt_misc entry runs arm64 ELF here and only root may register one")
        try:
            (BINFMT_DIR / "register").write_text(register_line(str(Path(str(emulator)).resolve())))
        except OSError as exc:  # taken by a disabled entry of that name, or refused
            if not any(entry.matches(header) for entry in binfmt_entries()):
                pytest.skip(f"binfmt_misc refused to register {BINFMT_NAME}: {exc}")
        found = [entry for entry in binfmt_entries() if entry.matches(header)]
        assert found, "a registered arm64 entry does not show in binfmt_misc"
    unfixed = [entry.name for entry in found if "F" not in entry.flags]
    if unfixed:
        pytest.skip(
            f"the binfmt_misc entry {', '.join(unfixed)} runs arm64 ELF without the F flag, so "
            "its emulator is not found inside a container (left as it is)"
        )
    return found[0]


@pytest.fixture(scope="module")
def arm64_image(arm64_program: Path) -> Iterator[str]:
    """An arm64 image of nothing but ``/submission/run``, built for ``linux/arm64``."""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for member, data, mode in (
            ("Dockerfile", b"FROM scratch\nCOPY run /submission/run\n", 0o644),
            ("run", arm64_program.read_bytes(), 0o755),
        ):
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    tag = f"podium-test/arm64-{uuid.uuid4().hex[:12]}:run"
    log: list[str] = []
    outcome = engine.build_image(
        context=context, tag=tag, on_log=log.append, timeout_s=120, platform="linux/arm64"
    )
    try:
        assert outcome.ok, f"{outcome.error}\n{''.join(log)}"
        inspected = engine.client().api.inspect_image(tag)
        assert (inspected["Os"], inspected["Architecture"]) == ("linux", "arm64"), inspected
        yield tag
    finally:
        engine.remove_image(tag)


@pytest.mark.docker
def test_an_arm64_submission_is_scored_under_emulation_by_the_native_supervisor(
    queued, supervisor_binary, binfmt_aarch64, arm64_image, settings, sent
):
    settings.PODIUM_SUPERVISOR = supervisor_binary
    benchmark = queued.benchmark
    benchmark.score_timeout_s = 60
    benchmark.run_memory_bytes = 256 << 20
    benchmark.run_pids_limit = 64
    benchmark.run_tmpfs_bytes = 16 << 20
    benchmark.run_output_tmpfs_bytes = 1 << 20
    benchmark.save()
    Submission.objects.filter(pk=queued.pk).update(image_tag=arm64_image)

    runner.score_submission(queued.pk)

    run = the_run(queued)
    assert run.status == Run.FINISHED, run.verdict_reason
    log_text = run_log(run)
    assert (run.verdict, run.matches, run.total) == ("passed", 10, 10), log_text
    assert run.exit_code == 0 and run.killed is False
    # The trusted time, inside the host's, is what ranks.
    assert (run.wall_time_ns or 0) > 0
    host_start, trusted_start, trusted_end, host_end = clock_readings(run)
    assert host_start <= trusted_start <= trusted_end <= host_end
    assert run.wall_time_ns == trusted_end - trusted_start
    entry = LeaderboardEntry.objects.get(benchmark=benchmark, entrant=queued.entrant)
    assert (entry.run_id, entry.wall_time_ns) == (run.pk, run.wall_time_ns)
    # It really was the arm64 program that answered (under qemu on an amd64 host), and the
    # supervisor's filter held for it.
    assert "scored 10 rows" in log_text
    assert f"== stderr ==\n{MACHINE_LINE}\n{REFUSED_LINE}\n" in log_text, log_text
    assert not engine.list_containers(label=f"podium.run={run.pk}")
