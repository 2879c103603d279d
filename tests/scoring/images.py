"""Submission images made of one shell script each, for tests that run real containers."""

from __future__ import annotations

import io
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from scoring import engine

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = b"FROM localhost/podium/busybox:1\nCOPY run /submission/run\n"


def build_dockerfile(tag: str, dockerfile: str) -> None:
    """Build ``dockerfile`` (no other context) as ``tag`` on the real engine."""
    data = dockerfile.encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    outcome = engine.build_image(context=context, tag=tag, on_log=lambda _: None, timeout_s=120)
    assert outcome.ok, outcome.error


def supervisor() -> Path:
    """The supervisor, built by the Makefile when missing or stale."""
    subprocess.run(
        ["make", "scoring/supervisor/supervise"], cwd=REPO, check=True, capture_output=True
    )
    return REPO / "scoring" / "supervisor" / "supervise"


@contextmanager
def script_images(prefix: str, scripts: dict[str, str]) -> Iterator[dict[str, str]]:
    """One image per script (localhost/podium/busybox:1 plus the script as
    /submission/run), tagged ``podium-test/<prefix>-<random>:<name>``; removed after."""
    repository = f"podium-test/{prefix}-{uuid.uuid4().hex[:12]}"
    built: dict[str, str] = {}
    try:
        for name, script in scripts.items():
            context = io.BytesIO()
            with tarfile.open(fileobj=context, mode="w") as tar:
                for member, data, mode in (
                    ("Dockerfile", DOCKERFILE, 0o644),
                    ("run", script.encode(), 0o755),
                ):
                    info = tarfile.TarInfo(member)
                    info.size, info.mode = len(data), mode
                    tar.addfile(info, io.BytesIO(data))
            context.seek(0)
            tag = f"{repository}:{name}"
            outcome = engine.build_image(
                context=context, tag=tag, on_log=lambda _: None, timeout_s=120
            )
            assert outcome.ok, outcome.error
            built[name] = tag
        yield built
    finally:
        for tag in built.values():
            engine.remove_image(tag)
