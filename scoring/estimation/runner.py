"""The trusted runner of metered estimation: whestbench's runner protocol (``start``,
``predict``, ``last_predict_stats``, ``close``, ``enforces_wall_time_limit``) over one
sandboxed grader container and the meter (docs/architecture.md, "Metered estimation: the
grader").

The container runs the harness (``harness.py``, in the grader image) and the entrant's
estimator in one process: uid 65534, read-only root, no network, no capabilities, a
bounded tmpfs at ``/tmp``, memory and PID limits, the entrant's CPUs, the submission
read-only at ``/submission`` and the meter folder read-only at ``/podium/meter``, where
it reaches the meter's socket and the harness socket this side listens on (accepted
once, then removed, so nothing else connects).

Per MLP:

1. the weights are written to the meter folder; a session of the least budget the
   server takes (1 FLOP) is opened; the harness drops the last MLP and loads this one
   (array uploads are free); the session is closed. Anything metered or refused in it
   is the entrant's work off the clock (a thread of its own): that MLP fails;
2. a session of the MLP's budget is opened, ``predict`` is sent, its answer awaited at
   most the wall cap plus :data:`PREDICT_GRACE_S`, and the session closed. The meter's
   summary gives the FLOPs and the wall, backend, overhead and residual times this runner
   reports: never numbers the sandbox sent;
3. an operation the meter refused for the budget fails the MLP as
   ``BudgetExhaustedError`` even when the entrant caught the error; no answer in time
   kills the container (``TimeExhaustedError``); a container that died fails the MLP
   (``MEMORY_EXHAUSTED`` when the engine says the memory limit killed it). A killed or
   dead container is started again, with its ``setup``, before the next MLP.

``setup`` runs inside a session of the per-MLP budget that is not charged, within the
setup timeout (whestbench's 5 s). A setup that fails is not raised by :meth:`start`: every
MLP then fails with it (the zero prediction), as one failing later does for the MLPs after
it. An engine or meter failure is a platform fault and is raised
(:class:`GraderFault`, :class:`~scoring.engine.EngineError`,
:class:`~scoring.estimation.meter.MeterError`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import flopscope as flops
import flopscope.numpy as fnp
import numpy as np
from whestbench.runner import PredictStats, RunnerError, RunnerErrorDetail

from scoring import engine
from scoring.estimation.meter import Meter

log = logging.getLogger(__name__)

# Paths inside the grader container.
METER_DIR = "/podium/meter"
SUBMISSION_DIR = "/submission"
SCRATCH_DIR = "/tmp"  # noqa: S108 - a path inside the container
SHM_DIR = "/dev/shm"  # noqa: S108 - a path inside the container
GRADER_HOME = "/opt/podium"
HARNESS_PATH = f"{GRADER_HOME}/harness.py"
# In the meter folder (the host's side of METER_DIR).
HARNESS_SOCKET = "harness.sock"
WEIGHTS_NAME = "weights.f32"
# The entrant's uid and gid in the container (nobody).
ENTRANT_UID = 65534
# The scratch tmpfs (it counts against the memory limit too).
TMPFS_BYTES = 64 << 20
TMPFS_INODES = 4_096
LOG_MAX_SIZE = "4m"
# whestbench's SetupContext.api_version, as its own runners pass it.
API_VERSION = "1.0"
# How long past the wall cap a predict's answer is still awaited: the cap is judged on
# the meter's own wall time, this only bounds the wait for a predict that never ends.
PREDICT_GRACE_S = 1.0
# The harness's start (the container, Python) and an MLP's upload: not the entrant's time.
HARNESS_START_S = 60.0
LOAD_TIMEOUT_S = 60.0
# The load session's budget: the least the server accepts.
LOAD_BUDGET = 1
# Labels of the grader's containers.
LABELS = {"podium.grader": "whest"}


class GraderFault(Exception):
    """The grader's own machinery failed (not the entrant): a platform fault."""


@dataclass(frozen=True)
class Sandbox:
    """What confines the grader container: its image, memory (swap included), PIDs,
    scratch tmpfs and, when given, the entrant's CPUs (a cpuset string)."""

    image: str
    memory_bytes: int
    pids_limit: int
    cpuset: str | None = None
    tmpfs_bytes: int = TMPFS_BYTES
    # Called with each container's id after it is created, before it starts: a score
    # holding the machine spares it from the freezer (``machine.Session.spare``).
    on_container: Callable[[str], None] | None = None


def container_spec(
    sandbox: Sandbox, *, meter_dir: Path, submission_dir: Path, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The keyword arguments of ``engine.create_container`` for one grader container."""
    spec: dict[str, Any] = {
        "image": sandbox.image,
        "entrypoint": ["python3", "-s", HARNESS_PATH],
        "command": [f"{METER_DIR}/{HARNESS_SOCKET}", SUBMISSION_DIR],
        "user": f"{ENTRANT_UID}:{ENTRANT_UID}",
        "working_dir": SCRATCH_DIR,
        # The whole environment: the image's PYTHONPATH, the meter's address, a home.
        "environment": {
            "PYTHONPATH": f"{GRADER_HOME}/site",
            "PYTHONDONTWRITEBYTECODE": "1",
            "FLOPSCOPE_SERVER_URL": f"ipc://{METER_DIR}/meter.sock",
            "HOME": SCRATCH_DIR,
        },
        "labels": {**LABELS, **labels},
        "network_mode": "none",
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "healthcheck": {"test": ["NONE"]},
        "pids_limit": sandbox.pids_limit,
        "mem_limit": sandbox.memory_bytes,
        "memswap_limit": sandbox.memory_bytes,
        "tmpfs": {
            SCRATCH_DIR: (
                f"rw,noexec,nosuid,nodev,size={sandbox.tmpfs_bytes},nr_inodes={TMPFS_INODES},"
                f"uid={ENTRANT_UID},gid={ENTRANT_UID},mode=0700"
            ),
            SHM_DIR: f"rw,noexec,nosuid,nodev,size={1 << 20},nr_inodes=16",
        },
        "mounts": [
            {
                "Type": "bind",
                "Source": str(submission_dir),
                "Target": SUBMISSION_DIR,
                "ReadOnly": True,
            },
            {"Type": "bind", "Source": str(meter_dir), "Target": METER_DIR, "ReadOnly": True},
        ],
        "log_config": {"type": "json-file", "config": {"max-size": LOG_MAX_SIZE}},
        "init": False,
    }
    if sandbox.cpuset:
        spec["cpuset_cpus"] = sandbox.cpuset
    return spec


class ChannelTimeout(Exception):
    """The harness did not answer in time."""


class ChannelClosed(Exception):
    """The harness's end of the socket is gone (its process died)."""


class Channel:
    """The harness socket: one JSON object per line each way, every answer awaited
    within a deadline and bounded in size."""

    def __init__(self, sock: socket.socket, max_line_bytes: int) -> None:
        self._sock = sock
        self._max = max_line_bytes
        self._buffer = bytearray()

    def send(self, payload: dict[str, Any]) -> None:
        self._sock.settimeout(LOAD_TIMEOUT_S)
        try:
            self._sock.sendall(json.dumps(payload).encode() + b"\n")
        except OSError as exc:
            raise ChannelClosed(str(exc)) from exc

    def receive(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelTimeout
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(1 << 20)
            except TimeoutError as exc:
                raise ChannelTimeout from exc
            except OSError as exc:
                raise ChannelClosed(str(exc)) from exc
            if not chunk:
                raise ChannelClosed("end of stream")
            self._buffer += chunk
            if len(self._buffer) > self._max and b"\n" not in self._buffer:
                raise ChannelClosed(f"an answer longer than {self._max} bytes")
        end = self._buffer.index(b"\n")
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        try:
            answer = json.loads(line)
        except (ValueError, RecursionError):
            answer = None
        if not isinstance(answer, dict):
            return {"ok": False, "error_type": "ProtocolError", "message": "malformed answer"}
        return answer

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def runner_error(stage: str, code: str, message: str, **more: Any) -> RunnerError:
    return RunnerError(stage, RunnerErrorDetail(code=code, message=message, **more))


def stats_from(summary: dict[str, Any]) -> PredictStats:
    """The trusted statistics of one predict: the meter's summary of its session."""
    breakdown = summary["budget_breakdown"]
    return PredictStats(
        flops_used=int(breakdown.get("flops_used", 0)),
        wall_time_s=float(breakdown.get("wall_time_s") or 0.0),
        flopscope_backend_time_s=float(breakdown.get("flopscope_backend_time_s") or 0.0),
        flopscope_overhead_time_s=float(breakdown.get("flopscope_overhead_time_s") or 0.0),
        residual_wall_time_s=float(breakdown.get("residual_wall_time_s") or 0.0),
        budget_breakdown=breakdown,
    )


class GraderRunner:
    """whestbench's runner protocol for one grading, over the grader container and the
    meter (see the module's docstring)."""

    # The wall cap is enforced here, on the meter's clock, around predict alone.
    enforces_wall_time_limit: bool = True

    def __init__(self, *, sandbox: Sandbox, meter: Meter, submission_dir: Path) -> None:
        self.sandbox = sandbox
        self.meter = meter
        self.submission_dir = submission_dir
        self.container_id: str | None = None
        self.restarts = 0
        self._channel: Channel | None = None
        self._entry: dict[str, Any] | None = None
        self._context: dict[str, Any] | None = None
        self._setup_timeout_s = 5.0
        self._wall_cap_s = 0.0
        self._started = False
        self._broken: RunnerError | None = None
        self._last: PredictStats | None = None

    # whestbench's runner protocol -----------------------------------------------------

    def start(self, entrypoint: Any, context: Any, limits: Any) -> None:
        """Start the container and run ``setup`` (see the module's docstring: a failed
        setup fails every MLP instead of raising)."""
        path = Path(entrypoint.file_path).resolve()
        relative = path.relative_to(self.submission_dir.resolve()).with_suffix("")
        self._entry = {"module": ".".join(relative.parts), "class": entrypoint.class_name}
        self._context = {
            "width": int(context.width),
            "depth": int(context.depth),
            "flop_budget": int(context.flop_budget),
            "api_version": str(context.api_version),
            "scratch_dir": SCRATCH_DIR,
            "seed": int(context.seed),
        }
        self._setup_timeout_s = float(limits.setup_timeout_s)
        self._wall_cap_s = float(limits.wall_time_limit_s or limits.predict_timeout_s)
        self._launch()

    def predict(self, mlp: Any, budget: int) -> Any:
        self._last = None
        if self._broken is not None:
            raise self._broken
        if not self._started:
            self.restarts += 1
            self._launch()
            if self._broken is not None:
                raise self._broken
        self._load(mlp)
        return self._predict(mlp, int(budget))

    def last_predict_stats(self) -> PredictStats | None:
        return self._last

    def close(self) -> None:
        if self._channel is not None and self._started:
            with contextlib.suppress(ChannelClosed, ChannelTimeout):
                self._channel.send({"cmd": "close"})
                self._channel.receive(1.0)
        self._stop_container()

    # The container --------------------------------------------------------------

    def _launch(self) -> None:
        """A fresh container, its harness connected, and its setup run; a failed setup is
        kept in ``_broken``."""
        self._stop_container()
        listener_path = self.meter.folder / HARNESS_SOCKET
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            listener_path.unlink()
        listener.bind(str(listener_path))
        listener_path.chmod(0o666)
        listener.listen(1)
        try:
            spec = container_spec(
                self.sandbox,
                meter_dir=self.meter.folder,
                submission_dir=self.submission_dir,
                labels={},
            )
            self.container_id = engine.create_container(**spec)
            if self.sandbox.on_container is not None:
                self.sandbox.on_container(self.container_id)
            engine.start(self.container_id)
            conn = self._accept(listener, self.container_id)
        finally:
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                listener_path.unlink()
        width, depth = self._contextual()["width"], self._contextual()["depth"]
        self._channel = Channel(conn, max_line_bytes=64 * width * depth + (1 << 20))
        try:
            hello = self._channel.receive(HARNESS_START_S)
        except (ChannelTimeout, ChannelClosed) as exc:
            raise GraderFault(f"the harness did not greet: {exc}") from exc
        if not hello.get("ready"):
            raise GraderFault("the harness did not greet")
        self._setup()

    def _contextual(self) -> dict[str, Any]:
        if self._context is None:
            raise GraderFault("the runner was not started")
        return self._context

    def _connected(self) -> Channel:
        if self._channel is None:
            raise GraderFault("the harness is not connected")
        return self._channel

    def _accept(self, listener: socket.socket, container_id: str) -> socket.socket:
        deadline = time.monotonic() + HARNESS_START_S
        listener.settimeout(0.2)
        while True:
            try:
                conn, _ = listener.accept()
                return conn
            except TimeoutError:
                pass
            if not engine.state(container_id).get("Running"):
                tail = engine.logs(container_id, stdout=True, stderr=True)[-2000:]
                raise GraderFault(f"the grader container stopped before its harness: {tail!r}")
            if time.monotonic() > deadline:
                raise GraderFault("the harness did not connect in time")

    def _setup(self) -> None:
        channel, context = self._connected(), self._contextual()
        self.meter.open(context["flop_budget"], "podium.setup")
        try:
            channel.send({"cmd": "setup", "entrypoint": self._entry, "context": context})
            answer = channel.receive(self._setup_timeout_s)
        except ChannelTimeout:
            self._kill()
            self._broken = runner_error(
                "setup",
                "SETUP_TIMEOUT",
                f"setup took longer than {self._setup_timeout_s:g} s",
            )
            return
        except ChannelClosed:
            self._broken = self._death("setup")
            return
        finally:
            self._close_session()
        if not answer.get("ok"):
            self._broken = runner_error(
                "setup",
                "SETUP_ERROR",
                f"{answer.get('error_type')}: {answer.get('message')}",
                traceback=answer.get("traceback"),
            )
            return
        self._started = True

    def _kill(self) -> None:
        if self.container_id is not None:
            engine.kill(self.container_id)
        self._started = False

    def _stop_container(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self.container_id is not None:
            engine.kill(self.container_id)
            engine.remove_container(self.container_id)
            self.container_id = None
        self._started = False

    def _death(self, stage: str) -> RunnerError:
        """The error of a harness whose process died: the memory limit's, when the
        engine says it killed the container."""
        self._started = False
        oom = False
        if self.container_id is not None:
            engine.wait(self.container_id, 10.0)
            oom = bool(engine.state(self.container_id).get("OOMKilled"))
        if oom:
            return runner_error(
                stage,
                "MEMORY_EXHAUSTED",
                f"memory: the estimator passed its memory limit "
                f"({self.sandbox.memory_bytes} bytes) and was killed",
            )
        return runner_error(stage, "WORKER_EOF", "the estimator's process ended")

    def _close_session(self) -> dict[str, Any]:
        if not self.meter.session_open:
            return {}
        return self.meter.close()

    # One MLP ------------------------------------------------------------------------

    def _load(self, mlp: Any) -> None:
        channel = self._connected()
        weights = self.meter.folder / WEIGHTS_NAME
        partial = weights.with_suffix(".partial")
        with open(partial, "wb") as out:
            for layer in mlp.weights:
                out.write(np.ascontiguousarray(np.asarray(layer), dtype=np.float32).tobytes())
        partial.chmod(0o644)
        os.replace(partial, weights)
        self.meter.open(LOAD_BUDGET, "podium.load")
        try:
            channel.send({"cmd": "free"})
            freed = channel.receive(LOAD_TIMEOUT_S)
            channel.send(
                {
                    "cmd": "load",
                    "path": f"{METER_DIR}/{WEIGHTS_NAME}",
                    "width": int(mlp.width),
                    "depth": int(mlp.depth),
                    "seed": int(mlp.seed),
                    "name": str(mlp.name),
                }
            )
            loaded = channel.receive(LOAD_TIMEOUT_S)
        except ChannelTimeout as exc:
            self._kill()
            raise runner_error("predict", "LOAD_TIMEOUT", "the MLP's upload did not end") from exc
        except ChannelClosed as exc:
            raise self._death("predict") from exc
        finally:
            summary = self._close_session()
            weights.unlink(missing_ok=True)
        breakdown = summary.get("budget_breakdown") or {}
        refused = {k: v for k, v in (summary.get("refused") or {}).items() if v}
        if int(breakdown.get("flops_used", 0)) > 0 or refused:
            raise runner_error(
                "predict",
                "OFF_CLOCK_COMPUTE",
                "flopscope operations ran outside predict (while the MLP was loaded): "
                f"{int(breakdown.get('flops_used', 0))} FLOPs metered, refused: {refused}",
            )
        for answer in (freed, loaded):
            if not answer.get("ok"):
                raise runner_error(
                    "predict",
                    "LOAD_ERROR",
                    f"loading the MLP failed: {answer.get('error_type')}: {answer.get('message')}",
                )

    def _predict(self, mlp: Any, budget: int) -> Any:
        channel = self._connected()
        wait_s = self._wall_cap_s + PREDICT_GRACE_S
        self.meter.open(budget)
        try:
            channel.send({"cmd": "predict", "budget": budget})
            answer = channel.receive(wait_s)
        except ChannelTimeout:
            self._kill()
            self._last = stats_from(self.meter.close())
            raise flops.TimeExhaustedError(
                "predict (no answer: the container was stopped)",
                elapsed_s=wait_s,
                limit_s=self._wall_cap_s,
            ) from None
        except ChannelClosed:
            summary = self._close_session()
            if summary:
                self._last = stats_from(summary)
            raise self._death("predict") from None
        summary = self.meter.close()
        self._last = stats = stats_from(summary)
        refused = summary.get("refused") or {}
        if refused.get("BudgetExhaustedError") or answer.get("error_type") in (
            "BudgetExhaustedError",
        ):
            raise flops.BudgetExhaustedError(
                f"predict (the meter refused {int(refused.get('BudgetExhaustedError', 0))} "
                "operation(s) past the budget)",
                flop_cost=budget - stats.flops_used + 1,
                flops_remaining=budget - stats.flops_used,
            )
        if refused.get("MemoryError") or answer.get("error_type") == "MemoryError":
            raise runner_error(
                "predict",
                "MEMORY_EXHAUSTED",
                f"memory: {answer.get('message') or 'the meter could not hold its arrays'}",
            )
        if not answer.get("ok"):
            raise runner_error(
                "predict",
                "PREDICT_ERROR",
                f"{answer.get('error_type')}: {answer.get('message')}",
                details=answer.get("details") if isinstance(answer.get("details"), dict) else None,
                traceback=answer.get("traceback")
                if isinstance(answer.get("traceback"), str)
                else None,
            )
        values = answer.get("values")
        if values is None:
            raise runner_error("predict", "PREDICT_NO_DATA", "no predictions in the answer")
        try:
            return fnp.asarray(values, dtype=fnp.float32)
        except (TypeError, ValueError, OverflowError) as exc:
            raise runner_error(
                "predict", "PREDICT_BAD_OUTPUT", f"predictions are not numbers: {exc}"
            ) from exc
