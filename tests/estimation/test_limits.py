"""The grader's pure parts: the limits, the seeds of a phase's suites, the manifest's
entrypoint, cpusets and the container's spec (no Docker, no database)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from portal.estimation.rules import derive_seeds
from scoring.estimation.grade import read_entrypoint
from scoring.estimation.meter import parse_cpuset
from scoring.estimation.meter_server import refusal_kind
from scoring.estimation.runner import ENTRANT_UID, Sandbox, container_spec
from tests.estimation.conftest import limits


def test_seeds_are_keyed_deterministic_int63_and_distinct() -> None:
    public = derive_seeds("contest-secret", "public", 50)
    assert public == derive_seeds("contest-secret", "public", 50)
    assert len(set(public)) == 50
    assert all(isinstance(s, int) and 0 <= s < 2**63 for s in public)
    # A prefix is stable: growing a suite keeps its first MLPs.
    assert derive_seeds("contest-secret", "public", 10) == public[:10]
    # Another role or another private seed shares nothing.
    assert not set(public) & set(derive_seeds("contest-secret", "withheld", 50))
    assert not set(public) & set(derive_seeds("other-secret", "public", 50))
    assert derive_seeds("contest-secret", "final", 0) == []


@pytest.mark.parametrize(
    ("private", "role", "n"), [("", "public", 3), ("s", "", 3), ("s", "a\nb", 3), ("s", "p", -1)]
)
def test_seeds_refuse_empty_keys_and_counts(private: str, role: str, n: int) -> None:
    with pytest.raises(ValueError):
        derive_seeds(private, role, n)


def test_limits_hold_one_residual_rule() -> None:
    gated = limits()
    assert gated.residual_cap_s == 0.4 and gated.lambda_flops_per_second == 0
    priced = limits(residual_cap_s=None, lambda_flops_per_second=1e11)
    assert priced.residual_cap_s is None
    assert gated.setup_timeout_s == 5.0
    with pytest.raises(ValueError, match="priced"):
        limits(residual_cap_s=None, lambda_flops_per_second=0.0)
    with pytest.raises(ValueError, match="lambda"):
        limits(residual_cap_s=0.4, lambda_flops_per_second=1e11)
    with pytest.raises(AttributeError):
        gated.flop_budget = 1


@pytest.mark.parametrize(
    "change",
    [
        {"flop_budget": 0},
        {"flop_budget": 1.5},
        {"flop_budget": True},
        {"wall_cap_s": 0.0},
        {"wall_cap_s": float("inf")},
        {"residual_cap_s": -1.0},
        {"residual_cap_s": float("nan")},
        {"lambda_flops_per_second": -1.0, "residual_cap_s": None},
        {"memory_bytes": 1 << 20},
        {"pids_limit": 1},
        {"cpuset": "two"},
        {"cpuset": "3-1"},
        {"setup_timeout_s": 0.0},
    ],
)
def test_limits_refuse_what_cannot_be_graded(change: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        limits(**change)


def test_cpusets() -> None:
    assert parse_cpuset("3") == {3}
    assert parse_cpuset("0,2-3") == {0, 2, 3}
    for bad in ("", "a", "1-", "-1", "2-1", "1,,2"):
        with pytest.raises(ValueError):
            parse_cpuset(bad)


def test_entrypoint_comes_from_the_manifest(tmp_path: Path) -> None:
    manifest = {"entrypoint": {"module": "estimator", "class": "MyEstimator"}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert read_entrypoint(tmp_path) == ("estimator", "MyEstimator")
    for entry in ({"module": "../x", "class": "E"}, {"module": "e", "class": "a b"}, None):
        (tmp_path / "manifest.json").write_text(json.dumps({"entrypoint": entry}))
        with pytest.raises(ValueError):
            read_entrypoint(tmp_path)
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(ValueError):
        read_entrypoint(tmp_path)


def test_the_container_is_confined(tmp_path: Path) -> None:
    sandbox = Sandbox(image="img", memory_bytes=256 << 20, pids_limit=64, cpuset="3")
    spec = container_spec(
        sandbox, meter_dir=tmp_path / "meter", submission_dir=tmp_path / "sub", labels={}
    )
    assert spec["user"] == f"{ENTRANT_UID}:{ENTRANT_UID}"
    assert spec["read_only"] is True
    assert spec["network_mode"] == "none"
    assert spec["cap_drop"] == ["ALL"]
    assert spec["mem_limit"] == spec["memswap_limit"] == 256 << 20
    assert spec["pids_limit"] == 64
    assert spec["cpuset_cpus"] == "3"
    assert all("size=" in options for options in spec["tmpfs"].values())
    assert all(mount["ReadOnly"] for mount in spec["mounts"])
    assert not any("TOKEN" in key.upper() for key in spec["environment"])
    assert "cpuset_cpus" not in container_spec(
        Sandbox(image="img", memory_bytes=1 << 28, pids_limit=8),
        meter_dir=tmp_path,
        submission_dir=tmp_path,
        labels={},
    )


def test_refusals_are_counted_by_kind() -> None:
    assert refusal_kind({"error_type": "BudgetExhaustedError"}) == "BudgetExhaustedError"
    assert refusal_kind({"error_type": "MemoryError"}) == "MemoryError"
    allocation = {
        "error_type": "FlopscopeServerError",
        "message": "internal server error: _ArrayMemoryError: Unable to allocate 8 GiB",
    }
    assert refusal_kind(allocation) == "MemoryError"
    assert refusal_kind({}) == "FlopscopeServerError"
