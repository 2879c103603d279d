"""The trusted FLOP meter of one grading: a flopscope-server process on the grader's side
(``meter_server.py``: the server's own ``main``, its refusals counted) and the control
connection that opens and closes its budget sessions.

The server binds an ipc socket in a fresh private folder that the grader container
mounts read-only; the entrant's flopscope-client connects to it there. Only this side
holds the control token: the server writes it once to a pipe it inherits (``--token-fd``)
and this process reads it, so it is in no environment, no argument and no file. The
server refuses ``budget_open`` and ``budget_close`` without it, and every other operation
outside an open session.

The folder belongs to the grader's user, mode 0755: the entrant (uid 65534) may reach
what is in it, write nothing there, and connect only to the sockets, which are made
0666. The runner (``scoring.estimation.runner``) listens on the harness socket in the
same folder and writes each MLP's weights there (0644).
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import zmq

# The server's socket, by name, in the meter folder.
SOCKET_NAME = "meter.sock"
# How long the server may take to start (import NumPy, write its token, bind).
START_TIMEOUT_S = 60.0
# How long one control request may wait for its answer. The server answers requests one
# at a time, so an entrant's operation in progress delays it: this is far longer than
# any one operation the server accepts (an array of at most 100 MB).
CONTROL_TIMEOUT_S = 120.0
# What the server's own process needs beyond the arrays it holds for the entrant
# (Python, NumPy and its BLAS threads' address space): its address-space bound is this
# plus the entrant's memory limit.
SERVER_BASE_BYTES = 4 << 30
# The server's scheduling priority (a nice value; the grader's own is 0).
SERVER_NICE = -10


class MeterError(Exception):
    """The meter failed (it did not start, died, or refused the grader): a platform fault."""


class Meter:
    """A running flopscope-server and its control connection.

    :meth:`start` makes the folder and starts the server; :meth:`open` and :meth:`close`
    open and close one budget session (``close`` returns the server's summary:
    ``budget_breakdown`` with the FLOPs and wall, backend, overhead and residual times,
    ``comms_summary``, and ``refused``, the refused operations by error type); :meth:`stop`
    ends the server and removes the folder.
    """

    def __init__(self, folder: Path, process: subprocess.Popen[bytes], token: str) -> None:
        self.folder = folder
        self._process = process
        self._token = token
        self._context = zmq.Context()
        self._socket: zmq.Socket[bytes] | None = None
        self.session_open = False

    @property
    def socket_path(self) -> Path:
        return self.folder / SOCKET_NAME

    @property
    def url(self) -> str:
        return f"ipc://{self.socket_path}"

    @classmethod
    def start(
        cls,
        *,
        session_timeout_s: float,
        memory_bytes: int | None = None,
        cpuset: str | None = None,
        parent: Path | None = None,
    ) -> Meter:
        """Start a server in a fresh private folder (under ``parent``, else the system's
        temporary folder). ``session_timeout_s`` is the server's idle reaping of a session,
        kept above the wall cap. ``memory_bytes`` bounds the server's address space (plus
        :data:`SERVER_BASE_BYTES`), so an entrant's arrays cannot exhaust the host; with
        ``cpuset`` the server computes on the entrant's CPUs."""
        folder = Path(tempfile.mkdtemp(prefix="podium-meter-", dir=parent))
        folder.chmod(0o755)
        read_end, write_end = os.pipe()
        cpus = parse_cpuset(cpuset) if cpuset else None
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).with_name("meter_server.py")),
                    "--url",
                    f"ipc://{folder / SOCKET_NAME}",
                    "--timeout",
                    str(session_timeout_s),
                    "--token-fd",
                    str(write_end),
                ],
                pass_fds=(write_end,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=_server_env(cpus),
                preexec_fn=_server_bounds(memory_bytes, cpus),
                start_new_session=True,
            )
        except OSError as exc:
            os.close(read_end)
            os.close(write_end)
            shutil.rmtree(folder, ignore_errors=True)
            raise MeterError(f"the meter did not start: {exc}") from exc
        os.close(write_end)
        try:
            token = _read_token(read_end, process)
            _wait_for_socket(folder / SOCKET_NAME, process)
        except MeterError:
            process.kill()
            process.wait()
            shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            os.close(read_end)
        (folder / SOCKET_NAME).chmod(0o666)
        return cls(folder, process, token)

    # Sessions --------------------------------------------------------------------

    def open(self, budget: int, namespace: str | None = None) -> None:
        """Open a budget session of ``budget`` FLOPs (at least 1: the server refuses 0)."""
        self._control("budget_open", {"flop_budget": max(1, int(budget)), "namespace": namespace})
        self.session_open = True

    def close(self) -> dict[str, Any]:
        """Close the open session; the server's summary of it."""
        self.session_open = False
        result = self._control("budget_close", {})
        if not isinstance(result, dict) or not isinstance(result.get("budget_breakdown"), dict):
            raise MeterError("the meter closed a session without a summary")
        return result

    def refuses(self, op: str, kwargs: dict[str, Any]) -> str:
        """Send ``op`` as an entrant would, without the token; the error type the server
        answers, "" when it accepted (for checks of the token gate)."""
        answer = self._send({"op": op, "kwargs": kwargs})
        return "" if answer.get("status") == "ok" else str(answer.get("error_type", ""))

    def alive(self) -> bool:
        return self._process.poll() is None

    def stop(self) -> None:
        """End the server and remove the folder (idempotent)."""
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None
        self._context.term()
        if self._process.poll() is None:
            self._process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)

    # The control connection --------------------------------------------------------

    def _control(self, op: str, kwargs: dict[str, Any]) -> Any:
        answer = self._send({"op": op, "kwargs": {**kwargs, "control_token": self._token}})
        if answer.get("status") != "ok":
            raise MeterError(
                f"the meter refused {op}: {answer.get('error_type')}: {answer.get('message')}"
            )
        return answer.get("result")

    def _send(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._socket is None:
            sock = self._context.socket(zmq.REQ)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDTIMEO, int(CONTROL_TIMEOUT_S * 1000))
            sock.setsockopt(zmq.RCVTIMEO, int(CONTROL_TIMEOUT_S * 1000))
            sock.connect(self.url)
            self._socket = sock
        try:
            self._socket.send(msgpack.packb(message, use_bin_type=True))
            raw = self._socket.recv()
        except zmq.ZMQError as exc:
            # A REQ socket that timed out is stuck mid-exchange: start a fresh one.
            self._socket.close(linger=0)
            self._socket = None
            state = "is gone" if not self.alive() else "did not answer"
            raise MeterError(f"the meter {state} ({message['op']}): {exc}") from exc
        answer = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        if not isinstance(answer, dict):
            raise MeterError("the meter answered something other than a mapping")
        return answer


def parse_cpuset(cpuset: str) -> set[int]:
    """The CPUs of a cpuset string (``"3"``, ``"2-3"``, ``"0,2-3"``); ValueError when it
    is not one."""
    cpus: set[int] = set()
    for part in cpuset.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"not a cpuset: {cpuset!r}")
        low, high = int(first), int(last or first)
        if high < low:
            raise ValueError(f"not a cpuset: {cpuset!r}")
        cpus.update(range(low, high + 1))
    return cpus


def _server_env(cpus: set[int] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOPSCOPE_")}
    if cpus:
        # The BLAS pool sized to the entrant's CPUs, not the host's.
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[name] = str(len(cpus))
    return env


def _server_bounds(memory_bytes: int | None, cpus: set[int] | None) -> Callable[[], None]:
    def bound() -> None:
        # The entrant's time waits on the server's answers: on a busy host the server
        # must not wait for a CPU behind other work (only a privileged grader can ask).
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, SERVER_NICE)
        if memory_bytes is not None:
            limit = memory_bytes + SERVER_BASE_BYTES
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if cpus:
            os.sched_setaffinity(0, cpus)

    return bound


def _read_token(read_end: int, process: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise MeterError("the meter wrote no control token in time")
        ready, _, _ = select.select([read_end], [], [], min(left, 0.5))
        if not ready:
            if process.poll() is not None:
                raise MeterError(f"the meter exited ({process.returncode}) before its token")
            continue
        chunk = os.read(read_end, 256)
        if not chunk:
            raise MeterError("the meter closed its token pipe without a token")
        data += chunk
    token = data.decode("ascii", "replace").strip()
    if len(token) < 32:
        raise MeterError("the meter's control token is malformed")
    return token


def _wait_for_socket(path: Path, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not path.exists():
        if process.poll() is not None:
            raise MeterError(f"the meter exited ({process.returncode}) before binding")
        if time.monotonic() > deadline:
            raise MeterError("the meter did not bind its socket in time")
        time.sleep(0.01)
