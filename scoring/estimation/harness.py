"""Podium's in-sandbox harness of metered estimation: the one process in the grader
container, running the entrant's estimator as the entrant's uid.

It is copied into the grader image (``scripts/base-images whest-grader``) and runs there
under the image's Python with flopscope-client, never under Podium's own environment:
it imports the standard library, flopscope-client and whestbench's numpy-free modules
only. NumPy is not installed in the image, so every array here is a proxy for data the
trusted flopscope-server holds, and every operation on one is metered there.

whestbench's package ``__init__`` imports NumPy, so the harness registers a
``whestbench`` package module without running it (its ``__path__`` points at the
installed folder) and puts ``BaseEstimator``, ``SetupContext`` and ``MLP`` on it: an
entrant's ``from whestbench import BaseEstimator, MLP`` and
``from whestbench.estimators import MeanPropagationEstimator`` work unchanged, and the
entrypoint is loaded by whestbench's own ``load_estimator_from_path``.

It talks to the trusted runner (``scoring.estimation.runner``) over the unix socket the
runner listens on in the meter folder, one JSON object per line each way. Nothing it
sends is trusted: the runner takes the FLOPs and times from the meter's own summary,
and only the predictions from here. Commands:

- ``setup``: load the entrypoint, call ``setup(SetupContext(...))``.
- ``free``: drop the current MLP and send every pending free (in the load session).
- ``load``: read one MLP's weights (raw native float32, ``depth`` matrices of
  ``width x width``) from a file the runner wrote, into flopscope arrays.
- ``predict``: call ``predict(mlp, budget)``, cast the result to float32 inside the
  metered window as whestbench's worker does, and send it back as nested lists, or
  send the exception's type and message.
- ``close``: call ``teardown()`` and exit.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import socket
import sys
import traceback
import types
from pathlib import Path
from typing import Any

# flopscope-client sends the frees of dropped arrays as a round trip of their own before
# the next operation; the harness lets them gather until this many are pending, so an
# estimator's temporaries do not double its round trips (and its residual time).
FREE_BATCH = 16
# Bounds on what an exception's text may carry back.
MESSAGE_CHARS = 4_000
TRACEBACK_CHARS = 16_000


def register_whestbench() -> types.ModuleType:
    """Register the ``whestbench`` package without running its ``__init__`` (which
    imports NumPy) and expose the entrant-facing names on it."""
    existing = sys.modules.get("whestbench")
    if existing is not None:
        return existing
    spec = importlib.util.find_spec("whestbench")
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError("whestbench is not installed in this image")
    package = types.ModuleType("whestbench")
    package.__path__ = list(spec.submodule_search_locations)
    package.__file__ = spec.origin
    package.__package__ = "whestbench"
    package.__spec__ = spec
    sys.modules["whestbench"] = package
    from whestbench.domain import MLP
    from whestbench.sdk import BaseEstimator, SetupContext

    package.MLP = MLP  # type: ignore[attr-defined]
    package.BaseEstimator = BaseEstimator  # type: ignore[attr-defined]
    package.SetupContext = SetupContext  # type: ignore[attr-defined]
    return package


def batch_frees(threshold: int = FREE_BATCH) -> None:
    """Let flopscope-client's frees of dropped arrays gather until ``threshold`` are
    pending before it sends them (on the next operation's round trip, as it does)."""
    from flopscope import _connection, _handles

    flush = _connection.Connection._flush_pending_frees

    def gathered(self: Any, *, force: bool = False) -> None:
        if force or _handles.pending_count() >= threshold:
            flush(self)

    _connection.Connection._flush_pending_frees = gathered


def copying_array() -> None:
    """``fnp.array`` of a flopscope array as flopscope's own ``array`` does it: a new array,
    its elements charged. flopscope-client hands back the same array, uncharged, so an
    estimator calling it would meter fewer FLOPs here than under ``whest run``; the call is
    sent to the meter as the ``array`` operation instead. Every other call is the
    client's own."""
    import flopscope
    import flopscope.numpy
    from flopscope._connection import get_connection
    from flopscope._protocol import encode_request
    from flopscope._remote_array import RemoteArray, _result_from_response

    client_array = flopscope.array

    def array(object: Any, dtype: Any = None, **kwargs: Any) -> Any:
        if isinstance(object, RemoteArray) and dtype is None:
            request = encode_request(
                "array", args=[{"__handle__": object.handle_id}], kwargs=kwargs
            )
            return _result_from_response(get_connection().send_recv(request))
        return client_array(object, dtype=dtype, **kwargs)

    flopscope.array = array
    flopscope.numpy.array = array


def flush_frees() -> None:
    """Send every pending free now."""
    from flopscope import _connection

    _connection.get_connection()._flush_pending_frees(force=True)


class Harness:
    """The estimator and the MLP of the moment, driven by the runner's commands."""

    def __init__(self, submission_dir: Path) -> None:
        self.submission_dir = submission_dir
        self.estimator: Any = None
        self.mlp: Any = None

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        command = request.get("cmd")
        if command == "setup":
            return self.setup(request)
        if command == "free":
            self.mlp = None
            gc.collect()
            try:
                flush_frees()
            except Exception as exc:
                return failure(exc)
            return {"ok": True}
        if command == "load":
            return self.load(request)
        if command == "predict":
            return self.predict(request)
        if command == "close":
            teardown = getattr(self.estimator, "teardown", None)
            if callable(teardown):
                try:
                    teardown()
                except Exception as exc:
                    return failure(exc)
            return {"ok": True}
        return {"ok": False, "error_type": "ProtocolError", "message": f"unknown {command!r}"}

    def setup(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            register_whestbench()
            from whestbench.loader import load_estimator_from_path
            from whestbench.sdk import SetupContext

            entry = request["entrypoint"]
            module_file = self.submission_dir.joinpath(*str(entry["module"]).split("."))
            estimator, _ = load_estimator_from_path(
                module_file.with_suffix(".py"), class_name=entry.get("class")
            )
            context = request["context"]
            estimator.setup(
                SetupContext(
                    width=int(context["width"]),
                    depth=int(context["depth"]),
                    flop_budget=int(context["flop_budget"]),
                    api_version=str(context["api_version"]),
                    scratch_dir=context.get("scratch_dir"),
                    submission_dir=str(self.submission_dir),
                    seed=int(context.get("seed", 0)),
                )
            )
        except BaseException as exc:
            return failure(exc)
        self.estimator = estimator
        return {"ok": True}

    def load(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            import flopscope.numpy as fnp
            from whestbench.domain import MLP

            width = int(request["width"])
            depth = int(request["depth"])
            data = Path(str(request["path"])).read_bytes()
            layer = width * width * 4
            if len(data) != depth * layer:
                raise ValueError(f"weights file holds {len(data)} bytes, not {depth * layer}")
            view = memoryview(data)
            # A buffer goes to the server as its raw bytes: one message per matrix.
            weights = [
                fnp.array(view[i * layer : (i + 1) * layer].cast("f", [width, width]))
                for i in range(depth)
            ]
            mlp = MLP(
                width=width,
                depth=depth,
                weights=weights,
                seed=int(request.get("seed", 0)),
                name=str(request.get("name", "")),
            )
            mlp.validate()
        except BaseException as exc:
            return failure(exc)
        self.mlp = mlp
        return {"ok": True}

    def predict(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.estimator is None or self.mlp is None:
            return {"ok": False, "error_type": "ProtocolError", "message": "nothing loaded"}
        try:
            import flopscope.numpy as fnp

            predictions = self.estimator.predict(self.mlp, int(request["budget"]))
            # As whestbench's worker materialises inside the metered window: the cast
            # is whestbench's, the fetch of the values is the entrant's wall time.
            array = fnp.asarray(predictions, dtype=fnp.float32)
            del predictions
            shape = [int(n) for n in array.shape]
            values = array.tolist()
            del array
        except BaseException as exc:
            return failure(exc)
        return {"ok": True, "shape": shape, "values": values}


def failure(exc: BaseException) -> dict[str, Any]:
    """What the runner is told of an exception: its type, message and traceback."""
    details = getattr(exc, "details", None)
    try:
        json.dumps(details)
    except (TypeError, ValueError):
        details = None
    return {
        "ok": False,
        "error_type": type(exc).__name__,
        "message": str(exc)[:MESSAGE_CHARS],
        "details": details if isinstance(details, dict) else None,
        "traceback": traceback.format_exc()[-TRACEBACK_CHARS:],
    }


def encode(payload: dict[str, Any]) -> bytes:
    try:
        return json.dumps(payload, allow_nan=True).encode() + b"\n"
    except (TypeError, ValueError) as exc:
        return json.dumps(failure(exc)).encode() + b"\n"


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: harness.py SOCKET SUBMISSION_DIR", file=sys.stderr)
        return 2
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    channel.connect(argv[1])
    batch_frees()
    copying_array()
    harness = Harness(Path(argv[2]))
    stream = channel.makefile("rwb")
    stream.write(encode({"ok": True, "ready": True}))
    stream.flush()
    for line in stream:
        try:
            request = json.loads(line)
        except ValueError:
            request = {}
        if not isinstance(request, dict):
            request = {}
        reply = harness.handle(request)
        stream.write(encode(reply))
        stream.flush()
        if request.get("cmd") == "close":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
