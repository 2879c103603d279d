"""The control token never reaches the container, and the entrant's own budget_open and
budget_close are refused, whatever it finds to try as a token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scoring import engine
from scoring.estimation.grade import running
from scoring.estimation.runner import METER_DIR, SUBMISSION_DIR
from tests.estimation.conftest import DEPTH, WIDTH, limits, write_submission

pytestmark = pytest.mark.docker

# Collects every 64-hex-digit string it can read (environment, mounted folders, /proc)
# and tries each, and none, as the control token; says what the server answered.
SEEKS_THE_TOKEN = """
import json
import os
import re
import flopscope as flops
from flopscope._connection import get_connection
from flopscope._protocol import encode_budget_close, encode_budget_open
from whestbench.estimators import MeanPropagationEstimator

HEX = re.compile(r"[0-9a-f]{64}")


def readable():
    yield "\\n".join(f"{k}={v}" for k, v in os.environ.items())
    for name in ("self/environ", "self/cmdline", "1/environ", "1/cmdline"):
        try:
            yield open("/proc/" + name, "rb").read().decode("latin-1")
        except OSError:
            pass
    for root in ("METER_DIR", "SUBMISSION_DIR", "/tmp", "/opt/podium"):
        for folder, _, files in os.walk(root):
            for name in files:
                try:
                    yield open(os.path.join(folder, name), "rb").read().decode("latin-1")
                except OSError:
                    pass


def outcome(call):
    try:
        call()
    except Exception as exc:
        return type(exc).__name__
    return "ACCEPTED"


class Estimator(MeanPropagationEstimator):
    def predict(self, mlp, budget):
        found = sorted({m for text in readable() for m in HEX.findall(text)})
        conn = get_connection()
        tried = {
            "BudgetContext": outcome(lambda: flops.BudgetContext(flop_budget=10**15).__enter__()),
            "budget_close": outcome(lambda: conn.send_recv(encode_budget_close())),
            "budget_open": outcome(lambda: conn.send_recv(encode_budget_open(10**15))),
            "summary_reset": outcome(lambda: flops.budget_reset()),
        }
        for token in found[:50]:
            close = encode_budget_close()
            import msgpack

            message = msgpack.unpackb(close, raw=False)
            message["kwargs"] = {**(message.get("kwargs") or {}), "control_token": token}
            tried["close with " + token[:8]] = outcome(
                lambda: conn.send_recv(msgpack.packb(message, use_bin_type=True))
            )
        raise RuntimeError("tried " + json.dumps({"found": len(found), "tried": tried}))
""".replace("METER_DIR", METER_DIR).replace("SUBMISSION_DIR", SUBMISSION_DIR)


def test_the_token_is_nowhere_the_entrant_reaches(grader_image: str, tmp_path: Path) -> None:
    submission = write_submission(tmp_path / "seeker", SEEKS_THE_TOKEN)
    with running(submission, limits(), width=WIDTH, depth=DEPTH, image=grader_image) as runner:
        token = runner.meter._token
        assert len(token) == 64
        assert runner.container_id is not None
        inspected = engine.inspect_container(runner.container_id)
        assert token not in json.dumps(inspected)
        mounted = [runner.meter.folder, runner.submission_dir]
        assert {m["Source"] for m in inspected["Mounts"]} == {str(p) for p in mounted}
        assert all(not m["RW"] for m in inspected["Mounts"])
        for folder in mounted:
            for path in folder.rglob("*"):
                if path.is_file():
                    assert token.encode() not in path.read_bytes(), path
        # The listening harness socket is gone once the harness connected.
        assert sorted(p.name for p in runner.meter.folder.iterdir()) == ["meter.sock"]


def test_the_entrants_own_budget_controls_are_refused(
    grader_image: str, suite: Path, tmp_path: Path
) -> None:
    from scoring.estimation.grade import grade

    submission = write_submission(tmp_path / "seeker", SEEKS_THE_TOKEN)
    result = grade(submission, suite, limits(), image=grader_image, indices=[0])
    (entry,) = result["per_mlp"]
    assert entry["error_code"] == "PREDICT_ERROR"
    message = str(entry["error"])
    report = json.loads(message[message.index("{") : message.rindex("}") + 1])
    tried = report["tried"]
    assert tried["BudgetContext"] == "UnauthorizedControlError"
    assert tried["budget_close"] == "UnauthorizedControlError"
    assert tried["budget_open"] == "UnauthorizedControlError"
    assert "ACCEPTED" not in {v for k, v in tried.items() if k != "summary_reset"}
    assert all(v == "UnauthorizedControlError" for k, v in tried.items() if k.startswith("close"))
