"""Fixtures shared by the worker-side tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scoring import engine


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[str]]]:
    """Records every build tag and container the code under test asks for; removes them."""
    seen: dict[str, list[str]] = {"tags": [], "containers": [], "images": []}
    real_build, real_create = engine.build_image, engine.create_container

    def build_spy(**kw: Any) -> engine.BuildOutcome:
        seen["tags"].append(kw["tag"])
        return real_build(**kw)

    def create_spy(**spec: Any) -> str:
        container_id = real_create(**spec)
        seen["containers"].append(container_id)
        return container_id

    monkeypatch.setattr(engine, "build_image", build_spy)
    monkeypatch.setattr(engine, "create_container", create_spy)
    yield seen
    for container_id in seen["containers"]:
        engine.remove_container(container_id)
    for ref in seen["tags"] + seen["images"]:
        engine.remove_image(ref)
