"""A local run's verdict and readings, worded as the portal words a scored run's.

The supervisor writes one JSON result line; this module decodes what a local run shows
from it: the verdict (``podium_policy.verdict``, the scoring host's own rules, so a local
failure reads as the scored one would), the wall time, the resource readings and the log
tails.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from podium_policy.verdict import Verdict, decide


class LineError(ValueError):
    """The container's output holds no valid supervisor result line."""


@dataclass(frozen=True)
class Result:
    """The supervisor's result line, decoded as far as a local run shows it."""

    wall_ns: int
    exit_code: int | None
    signal: int | None
    killed: bool
    output: bytes | None
    output_bytes: int
    output_error: str
    stdout_tail: bytes
    stderr_tail: bytes
    rusage: dict[str, int]
    resources: dict[str, float | int | None]
    prewarm_ms: float | None


def parse_line(stdout: bytes) -> Result:
    """The LAST non-empty line of the container's stdout, the supervisor's JSON object."""
    lines = [line for line in stdout.split(b"\n") if line.strip()]
    if not lines:
        raise LineError("the supervisor wrote no result line")
    try:
        data = json.loads(lines[-1])
    except ValueError:
        raise LineError("the supervisor's result line is not JSON") from None
    if not isinstance(data, dict) or data.get("podium_supervisor") != 1:
        raise LineError("the last line of the container's output is not the supervisor's")
    try:
        output_error = str(data["output_error"])
        output = base64.b64decode(data["output_b64"], validate=True)
        result = Result(
            wall_ns=int(data["wall_ns"]),
            exit_code=data.get("exit_code"),
            signal=data.get("signal"),
            killed=bool(data["killed"]),
            output=None if output_error else output,
            output_bytes=int(data["output_bytes"]),
            output_error=output_error,
            stdout_tail=base64.b64decode(data["stdout_tail_b64"], validate=True),
            stderr_tail=base64.b64decode(data["stderr_tail_b64"], validate=True),
            rusage={key: int(value) for key, value in dict(data["rusage"]).items()},
            resources=_resources(data.get("cgroup")),
            prewarm_ms=(
                data["prewarm_ns"] / 1e6 if isinstance(data.get("prewarm_ns"), int) else None
            ),
        )
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        raise LineError(f"the supervisor's result line is incomplete ({exc})") from None
    return result


def _keyed(text: str | None) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            found[parts[0]] = int(parts[1])
    return found


def _single(text: str | None) -> int | None:
    value = (text or "").strip()
    return int(value) if value.isdigit() else None


def _resources(raw: object) -> dict[str, float | int | None]:
    """The cgroup v2 readings (CPU, peak memory, peak PIDs); empty elsewhere."""
    if not isinstance(raw, dict):
        return {}
    files: dict[str, str] = {}
    for name, value in raw.items():
        try:
            files[str(name)] = base64.b64decode(str(value)).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            continue
    if "cpu.stat" not in files:
        return {}
    cpu = _keyed(files.get("cpu.stat"))
    user, system = cpu.get("user_usec"), cpu.get("system_usec")
    return {
        "cpu_user_s": None if user is None else user / 1e6,
        "cpu_system_s": None if system is None else system / 1e6,
        "memory_peak_bytes": _single(files.get("memory.peak")),
        "pids_peak": _single(files.get("pids.peak")),
    }


def judge(result: Result, references: Sequence[int], needed: int) -> Verdict:
    rows = len(references)
    output_error = result.output_error
    if not output_error and result.output_bytes > 4 * rows:
        output_error = (
            f"The output has {result.output_bytes} bytes; 4 x {rows} = {4 * rows} were expected."
        )
    return decide(
        output=result.output,
        output_error=output_error,
        exit_code=result.exit_code,
        signal=result.signal,
        killed=result.killed,
        references=references,
        needed=needed,
    )


def readings(result: Result) -> dict[str, Any]:
    """The resource readings a run shows: the cgroup's where there are, the rusage's else."""
    found: dict[str, Any] = dict(result.resources)
    if found.get("cpu_user_s") is None:
        found["cpu_user_s"] = result.rusage.get("utime_us", 0) / 1e6
        found["cpu_system_s"] = result.rusage.get("stime_us", 0) / 1e6
    if found.get("memory_peak_bytes") is None and "maxrss_kb" in result.rusage:
        found["memory_peak_bytes"] = result.rusage["maxrss_kb"] * 1024
    cpu = (found.get("cpu_user_s") or 0) + (found.get("cpu_system_s") or 0)
    found["cpu_per_wall"] = cpu / (result.wall_ns / 1e9) if result.wall_ns > 0 else None
    found["prewarm_ms"] = result.prewarm_ms
    return found
