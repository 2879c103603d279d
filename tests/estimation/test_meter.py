"""The trusted meter without Docker: only the grader holds the control token, a session's
closing summary is the server's own, and what the server refused in it is counted."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import zmq

from scoring.estimation.meter import Meter


@pytest.fixture
def meter() -> Iterator[Meter]:
    started = Meter.start(session_timeout_s=30.0, memory_bytes=256 << 20)
    yield started
    started.stop()


def entrant_call(meter: Meter, message: dict[str, Any]) -> dict[str, Any]:
    """One request as the entrant's client sends it: its own connection, no token."""
    context = zmq.Context()
    sock = context.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 10_000)
    sock.connect(meter.url)
    try:
        sock.send(msgpack.packb(message, use_bin_type=True))
        answer: dict[str, Any] = msgpack.unpackb(sock.recv(), raw=False, strict_map_key=False)
    finally:
        sock.close()
        context.term()
    return answer


def test_the_folder_lets_the_entrant_connect_and_write_nothing(meter: Meter) -> None:
    assert meter.folder.stat().st_mode & 0o777 == 0o755
    assert meter.socket_path.stat().st_mode & 0o777 == 0o666
    assert meter.folder.stat().st_uid == os.getuid()
    assert [p.name for p in meter.folder.iterdir()] == ["meter.sock"]
    assert meter.url.startswith("ipc://")


def test_only_the_token_opens_and_closes_sessions(meter: Meter) -> None:
    assert meter.refuses("budget_open", {"flop_budget": 10**9}) == "UnauthorizedControlError"
    assert meter.refuses("budget_close", {}) == "UnauthorizedControlError"
    guess = {"flop_budget": 10**9, "control_token": "0" * 64}
    assert meter.refuses("budget_open", guess) == "UnauthorizedControlError"
    # Nothing runs outside a session.
    assert meter.refuses("zeros", {"shape": [4]}) == "NoBudgetContextError"
    meter.open(1000, "tests")
    assert meter.refuses("budget_close", {}) == "UnauthorizedControlError"
    assert meter.refuses("budget_summary_reset", {}) == "UnauthorizedControlError"
    summary = meter.close()
    assert summary["budget_breakdown"]["flop_budget"] == 1000
    assert summary["refused"] == {}


def test_refusals_past_the_budget_are_counted(meter: Meter) -> None:
    meter.open(1)
    created = entrant_call(meter, {"op": "create_from_data", "args": [bytes(64), [16], "float32"]})
    assert created["status"] == "ok"
    handle = {"__handle__": created["result"]["id"]}
    for _ in range(3):
        refused = entrant_call(meter, {"op": "add", "args": [handle, handle]})
        assert refused["error_type"] == "BudgetExhaustedError"
    summary = meter.close()
    # The server recorded nothing of the refused operations: only the count says so.
    assert summary["budget_breakdown"]["flops_used"] == 0
    assert summary["budget_breakdown"]["flops_remaining"] == 1
    assert summary["refused"] == {"BudgetExhaustedError": 3}
    # The next session starts its own count.
    meter.open(10**6)
    assert entrant_call(meter, {"op": "add", "args": [handle, handle]})["status"] == "ok"
    summary = meter.close()
    assert summary["refused"] == {}
    assert summary["budget_breakdown"]["flops_used"] == 16


def test_a_stopped_meter_leaves_nothing(meter: Meter) -> None:
    folder = meter.folder
    meter.stop()
    assert not folder.exists()
    assert not meter.alive()
