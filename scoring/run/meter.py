"""The meter: a scored container's resource use, from its cgroup files (pure: no Django).

The supervisor (``supervise.c``) reads a fixed allow-list of the container's cgroup
files once the entrant's whole process tree is reaped and after its clock's second
reading, and carries them on its result line as ``"cgroup": {FILE: BASE64}`` (only the
files it could read whole, ``{}`` when it did not run as PID 1) and ``"meter_ns"`` (the
time the reading took, never part of ``wall_ns``). :func:`from_line` turns them into
:class:`Resources`, for cgroup v2 and v1 alike:

========================  ===============================  ==================================
reading                   v2                               v1
========================  ===============================  ==================================
CPU user / system         ``cpu.stat`` user_usec,          ``cpuacct.usage`` split in the
                          system_usec                      proportion of ``usage_user`` /
                                                           ``usage_sys`` (or ``cpuacct.stat``)
memory peak               ``memory.peak``                  ``memory.max_usage_in_bytes``
PIDs peak                 ``pids.peak``                    ``pids.peak`` (recent kernels only)
I/O bytes read / written  ``io.stat`` rbytes / wbytes      ``blkio.throttle.io_service_bytes``
                          summed over devices              (or ``io_service_bytes_recursive``)
                                                           Read / Write summed over devices
OOM events                ``memory.events`` the larger     ``memory.oom_control`` oom_kill
                          of oom and oom_kill
========================  ===============================  ==================================

What the readings cover: the container's cgroup over its whole life, so besides the
entrant's processes also the engine's start (``runc init``: a few threads, a few MiB),
the supervisor itself (its set-up before the clock, its memory reserve, and the page
cache its warm start reads: up to its byte budget, ``scoring.run.prewarm``) and the
container's tmpfs pages (files count as memory). I/O counts block devices only: page
cache hits and tmpfs do not show.

A reading the kernel does not offer, or whose file is odd, is ``None``: nothing here
raises for a file's contents. Only a line that is not the supervisor's (no ``cgroup``
dict of base64 strings, no integer ``meter_ns``) raises :class:`ValueError`.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import asdict, dataclass
from typing import Any

# The kernel's USER_HZ (the unit of v1's cpuacct.stat): 100 on every architecture we run.
USER_HZ = 100
# The kernel's counters are 64-bit: at most 20 digits (int() refuses over 4,300).
_NUMBER = re.compile(r"[0-9]{1,20}")
_DEVICE = re.compile(r"[0-9]+:[0-9]+")


@dataclass(frozen=True)
class Resources:
    """What one scored container used, as published with the run (see the module)."""

    cgroup_version: int  # 2 or 1; 0 when no cgroup file was read (not PID 1)
    cpu_user_s: float | None
    cpu_system_s: float | None
    memory_peak_bytes: int | None
    pids_peak: int | None
    io_read_bytes: int | None
    io_write_bytes: int | None
    oom_events: int | None
    meter_ms: float  # how long the supervisor took to read the files

    def as_dict(self) -> dict[str, int | float | None]:
        """JSON-ready, keyed by the field names."""
        return asdict(self)


def from_line(data: dict[str, Any]) -> Resources:
    """The readings in the supervisor's decoded result line (``json.loads`` of it).

    Raises :class:`ValueError` when ``data["cgroup"]`` is missing or not a dict of
    base64 strings, or ``data["meter_ns"]`` is missing or not a non-negative integer.
    """
    files = _decoded_files(data.get("cgroup"))
    meter_ns = data.get("meter_ns")
    if type(meter_ns) is not int or meter_ns < 0:
        raise ValueError("the supervisor's result has no valid 'meter_ns'")
    version = _version(files)
    readings = _readings_v2(files) if version == 2 else _readings_v1(files)
    return Resources(cgroup_version=version, meter_ms=meter_ns / 1e6, **readings)


def cpu_per_wall(resources: Resources, wall_ns: int) -> float | None:
    """CPU-seconds per wall-second (user + system over the trusted wall time); None
    when either CPU reading is missing or the wall time is not positive."""
    if resources.cpu_user_s is None or resources.cpu_system_s is None or wall_ns <= 0:
        return None
    return (resources.cpu_user_s + resources.cpu_system_s) / (wall_ns / 1e9)


# Decoding -----------------------------------------------------------------------------


def _decoded_files(raw: object) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ValueError("the supervisor's result has no valid 'cgroup'")
    files: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ValueError("the supervisor's 'cgroup' is not a dict of base64 strings")
        try:
            contents = base64.b64decode(value, validate=True)
        except binascii.Error:
            raise ValueError(f"the supervisor's 'cgroup' has no valid {name!r}") from None
        # Odd bytes stay odd (and parse to None) rather than raise.
        files[name] = contents.decode("utf-8", errors="replace")
    return files


def _version(files: dict[str, str]) -> int:
    """v1 names are CONTROLLER/FILE; v2's are bare (our cgroup's own folder)."""
    if not files:
        return 0
    return 1 if all("/" in name for name in files) else 2


def _readings_v2(files: dict[str, str]) -> dict[str, Any]:
    cpu = _keyed(files.get("cpu.stat"))
    user_usec, system_usec = cpu.get("user_usec"), cpu.get("system_usec")
    io = _io_stat_v2(files.get("io.stat"))
    events = _keyed(files.get("memory.events"))
    counts = [events[key] for key in ("oom", "oom_kill") if key in events]
    return {
        "cpu_user_s": None if user_usec is None else user_usec / 1e6,
        "cpu_system_s": None if system_usec is None else system_usec / 1e6,
        "memory_peak_bytes": _single(files.get("memory.peak")),
        "pids_peak": _single(files.get("pids.peak")),
        "io_read_bytes": None if io is None else io[0],
        "io_write_bytes": None if io is None else io[1],
        # oom: the limit was hit and an allocation was about to fail (a kill or not);
        # oom_kill: processes the OOM killer took (one event may take several).
        "oom_events": max(counts) if counts else None,
    }


def _readings_v1(files: dict[str, str]) -> dict[str, Any]:
    cpu = _cpu_v1(files)
    io = _blkio_v1(files.get("blkio/blkio.throttle.io_service_bytes"))
    if io is None:
        io = _blkio_v1(files.get("blkio/blkio.io_service_bytes_recursive"))
    return {
        "cpu_user_s": None if cpu is None else cpu[0],
        "cpu_system_s": None if cpu is None else cpu[1],
        "memory_peak_bytes": _single(files.get("memory/memory.max_usage_in_bytes")),
        "pids_peak": _single(files.get("pids/pids.peak")),
        "io_read_bytes": None if io is None else io[0],
        "io_write_bytes": None if io is None else io[1],
        "oom_events": _keyed(files.get("memory/memory.oom_control")).get("oom_kill"),
    }


def _cpu_v1(files: dict[str, str]) -> tuple[float, float] | None:
    """(user, system) seconds. v1's split is sampled (at the tick, on most kernels),
    its total (cpuacct.usage) is the scheduler's exact runtime: the total is split in
    the sampled proportion, as the kernel itself does for v2's cpu.stat and for a
    process's rusage. Without the total, the samples as they are."""
    user_ns = _single(files.get("cpuacct/cpuacct.usage_user"))
    system_ns = _single(files.get("cpuacct/cpuacct.usage_sys"))
    if user_ns is None or system_ns is None:
        ticks = _keyed(files.get("cpuacct/cpuacct.stat"))
        if "user" not in ticks or "system" not in ticks:
            return None
        user_ns = ticks["user"] * 1_000_000_000 // USER_HZ
        system_ns = ticks["system"] * 1_000_000_000 // USER_HZ
    total_ns = _single(files.get("cpuacct/cpuacct.usage"))
    if total_ns is not None:
        sampled = user_ns + system_ns
        # No sample yet (under a tick): all of it is user time, as the kernel says.
        user_ns = total_ns * user_ns // sampled if sampled else total_ns
        system_ns = total_ns - user_ns
    return user_ns / 1e9, system_ns / 1e9


# File formats -----------------------------------------------------------------------


def _single(text: str | None) -> int | None:
    """A file of one non-negative integer (memory.peak, pids.peak, cpuacct.usage...)."""
    if text is None:
        return None
    value = text.strip()
    return int(value) if _NUMBER.fullmatch(value) else None


def _keyed(text: str | None) -> dict[str, int]:
    """A flat keyed file: "KEY VALUE" lines (cpu.stat, memory.events, cpuacct.stat,
    memory.oom_control). Lines that are not that are skipped: a key the caller needs
    is then missing, and its reading None."""
    values: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and _NUMBER.fullmatch(parts[1]):
            values[parts[0]] = int(parts[1])
    return values


def _io_stat_v2(text: str | None) -> tuple[int, int] | None:
    """(read, written) bytes of io.stat: "MAJ:MIN rbytes=N wbytes=N rios=N ..." per
    device (only those with I/O: an empty file is none). Other keys (dbytes, iocost's
    cost.*) are ignored; a line without rbytes and wbytes makes the sum unknown."""
    if text is None:
        return None
    read = written = 0
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if not _DEVICE.fullmatch(parts[0]):
            return None
        stats = {key: value for key, _, value in (part.partition("=") for part in parts[1:])}
        rbytes, wbytes = stats.get("rbytes", ""), stats.get("wbytes", "")
        if not (_NUMBER.fullmatch(rbytes) and _NUMBER.fullmatch(wbytes)):
            return None
        read += int(rbytes)
        written += int(wbytes)
    return read, written


def _blkio_v1(text: str | None) -> tuple[int, int] | None:
    """(read, written) bytes of a v1 blkio io_service_bytes file: "MAJ:MIN OP N" per
    device and operation (Read, Write, Sync, Async, Discard, Total), then "Total N"."""
    if text is None:
        return None
    read = written = 0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "Total" and _NUMBER.fullmatch(parts[1]):
            continue
        if len(parts) != 3 or not _DEVICE.fullmatch(parts[0]) or not _NUMBER.fullmatch(parts[2]):
            return None
        if parts[1] == "Read":
            read += int(parts[2])
        elif parts[1] == "Write":
            written += int(parts[2])
    return read, written
