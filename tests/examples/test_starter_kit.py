"""The example starter kit honours the runtime ABI and reads the demo cohort correctly."""

from __future__ import annotations

import os
import random
import secrets
import shutil
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("PIL")
pytest.importorskip("numpy")

from portal.contests import democohort

KIT = Path(__file__).resolve().parents[2] / "examples" / "starter-kit"


@pytest.fixture
def kit(tmp_path: Path) -> Path:
    """A copy of the kit, so running it leaves no __pycache__ in the repository."""
    copy = tmp_path / "submission"
    shutil.copytree(KIT, copy)
    return copy


def stage(tmp_path: Path, count: int, seed: int) -> tuple[Path, Path, list[int]]:
    """Stage a generated cohort the way a scored run does: fresh random names and ids,
    shuffled order. Returns (manifest, image root, classes in manifest order)."""
    canonical = tmp_path / "cohort"
    members = democohort.generate(canonical, count, seed)
    random.Random(seed).shuffle(members)
    image_root = tmp_path / "input" / "images"
    image_root.mkdir(parents=True)
    lines = []
    for index, (relative_path, _) in enumerate(members):
        staged_name = f"{index % 3}/{secrets.token_hex(8)}.jpg"
        (image_root / staged_name).parent.mkdir(exist_ok=True)
        os.link(canonical / relative_path, image_root / staged_name)
        lines.append(f"{secrets.token_hex(12)}\t{staged_name}\n")
    manifest = tmp_path / "input" / "manifest.tsv"
    manifest.write_text("".join(lines))
    return manifest, image_root, [class_id for _, class_id in members]


def sandbox_env() -> dict[str, str]:
    """No HOME, nothing of the test's own environment."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}


def read_predictions(output: Path) -> list[int]:
    data = output.read_bytes()
    return list(struct.unpack(f"<{len(data) // 4}i", data))


def test_the_kit_has_its_executables() -> None:
    for name in ("run", "build.sh"):
        assert (KIT / name).stat().st_mode & stat.S_IXUSR, f"{name} is not executable"
    instructions = [
        line for line in (KIT / "Dockerfile").read_text().splitlines() if line and line[0] != "#"
    ]
    assert instructions == ["ARG BASE=localhost/podium/python:bookworm", "FROM ${BASE}"]


def test_run_answers_every_image_in_manifest_order(kit: Path, tmp_path: Path) -> None:
    manifest, image_root, classes = stage(tmp_path, 200, seed=3)
    output = tmp_path / "output" / "predictions.i32"
    output.parent.mkdir()

    result = subprocess.run(
        [sys.executable, str(kit / "run"), str(manifest), str(image_root), str(output)],
        env=sandbox_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert output.stat().st_size == 4 * 200
    assert read_predictions(output) == classes
    assert "200 images" in result.stderr


def test_run_takes_its_paths_from_the_environment(kit: Path, tmp_path: Path) -> None:
    manifest, image_root, classes = stage(tmp_path, 20, seed=4)
    output = tmp_path / "predictions.i32"
    env = sandbox_env() | {
        "CONTEST_MANIFEST": str(manifest),
        "CONTEST_IMAGE_ROOT": str(image_root),
        "CONTEST_OUTPUT": str(output),
    }

    result = subprocess.run(
        [sys.executable, str(kit / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert read_predictions(output) == classes


def test_a_broken_image_still_gives_valid_output(kit: Path, tmp_path: Path) -> None:
    manifest, image_root, classes = stage(tmp_path, 5, seed=5)
    first_image = image_root / manifest.read_text().splitlines()[0].split("\t")[1]
    first_image.unlink()
    first_image.write_bytes(b"not a jpeg")
    output = tmp_path / "predictions.i32"

    result = subprocess.run(
        [sys.executable, str(kit / "run"), str(manifest), str(image_root), str(output)],
        env=sandbox_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert read_predictions(output) == [0, *classes[1:]]
    assert "cannot identify image file" in result.stderr
