"""The EVA-02 starter kit: its ABI code (with a stand-in model), its Dockerfile, its ``run``.

The model itself needs torch, which this machine lacks: the ABI code is tested here with
a stand-in whose "images" are small text files holding their class, and ``run`` is
checked to stop with a clear message when torch is missing. The GPU path (torch, timm,
the DataLoader) runs in ``scripts/gpu-check``, and in the last test here where torch and
timm are installed.
"""

from __future__ import annotations

import importlib.util
import io
import os
import random
import secrets
import stat
import struct
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from podium_policy import dockerfile_policy
from portal.web.management.commands.seed_eva02 import ALLOWED_REGISTRIES

KIT = Path(__file__).resolve().parents[2] / "examples" / "eva02"


def load_abi() -> ModuleType:
    spec = importlib.util.spec_from_file_location("eva02_kit_abi", KIT / "abi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:  # no __pycache__ left in the kit's folder
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes_bytecode
    return module


abi = load_abi()


# A stand-in model: an "image" is a text file holding its class. -------------------------


class StandIn:
    """Records every batch it classifies."""

    def __init__(self, **fields: Any) -> None:
        self.batches: list[list[int]] = []
        self.fields = fields
        self.prepared = False

    def load(self, path: str) -> int:
        return int(Path(path).read_text())

    def infer(self, pixels: list[int]) -> list[int]:
        assert self.prepared, "infer before prepare"
        self.batches.append(list(pixels))
        return list(pixels)

    def prepare(self) -> None:
        self.prepared = True

    def model(self, settings: Any = None) -> Any:
        fields = {
            "load": self.load,
            "stack": list,
            "infer": self.infer,
            "prepare": self.prepare,
            "batch_size": 32,
            "description": "a stand-in",
        }
        return abi.Model(**{**fields, **self.fields})


def stage(tmp_path: Path, count: int, seed: int = 1) -> tuple[Path, Path, list[int]]:
    """Images staged as a scored run does: fresh names (some in subfolders) and request
    ids, in a shuffled order. Returns (manifest, image root, classes in manifest order)."""
    rng = random.Random(seed)
    classes = [rng.randrange(1000) for _ in range(count)]
    root = tmp_path / "input" / "images"
    root.mkdir(parents=True)
    lines = []
    for index, class_id in enumerate(classes):
        name = f"{index % 3}/{secrets.token_hex(6)}.jpg"
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_text(str(class_id))
        lines.append(f"{secrets.token_hex(8)}\t{name}\n")
    manifest = tmp_path / "input" / "manifest.tsv"
    manifest.write_text("".join(lines))
    return manifest, root, classes


def run_abi(
    tmp_path: Path, manifest: Path, root: Path, stand_in: StandIn, environ: dict[str, str] | None
) -> tuple[int, str, Path]:
    output = tmp_path / "predictions.i32"
    log = io.StringIO()
    status = abi.main(
        [str(manifest), str(root), str(output)], environ or {}, stand_in.model, log=log
    )
    return status, log.getvalue(), output


def read_output(output: Path) -> list[int]:
    data = output.read_bytes()
    return list(struct.unpack(f"<{len(data) // 4}i", data))


def manifest_rows(manifest: Path) -> list[str]:
    return [line.split("\t")[1] for line in manifest.read_text().splitlines()]


# The ABI ---------------------------------------------------------------------------------


def test_it_answers_every_row_in_manifest_order_as_int32(tmp_path) -> None:
    manifest, root, classes = stage(tmp_path, 70)
    stand_in = StandIn()

    status, log, output = run_abi(tmp_path, manifest, root, stand_in, None)

    assert status == 0, log
    assert output.stat().st_size == 4 * 70
    assert output.read_bytes() == struct.pack("<70i", *classes)
    # Batches of 32 in order, the remainder last.
    assert [len(batch) for batch in stand_in.batches] == [32, 32, 6]
    assert [c for batch in stand_in.batches for c in batch] == classes
    assert "70 images in" in log
    assert "0 unreadable" in log


@pytest.mark.parametrize(("count", "batch_size", "sizes"), [(5, 8, [5]), (16, 8, [8, 8])])
def test_batches_cover_exactly_the_manifest(tmp_path, count, batch_size, sizes) -> None:
    manifest, root, classes = stage(tmp_path, count)
    stand_in = StandIn(batch_size=batch_size)

    status, _, output = run_abi(tmp_path, manifest, root, stand_in, None)

    assert status == 0
    assert [len(batch) for batch in stand_in.batches] == sizes
    assert read_output(output) == classes


def test_the_paths_may_come_from_the_environment(tmp_path) -> None:
    manifest, root, classes = stage(tmp_path, 4)
    output = tmp_path / "out.i32"
    environ = {
        "CONTEST_MANIFEST": str(manifest),
        "CONTEST_IMAGE_ROOT": str(root),
        "CONTEST_OUTPUT": str(output),
    }

    assert abi.main([], environ, StandIn().model, log=io.StringIO()) == 0

    assert read_output(output) == classes


def reversed_loader(images: Any, batch_size: int, collate: Any) -> Iterable[Any]:
    """Delivers the batches last first, as a loader with workers may."""
    return list(abi.sequential_loader(images, batch_size, collate))[::-1]


def test_answers_follow_the_rows_not_the_order_batches_arrive_in(tmp_path) -> None:
    manifest, root, classes = stage(tmp_path, 50)

    status, _, output = run_abi(
        tmp_path, manifest, root, StandIn(loader=reversed_loader, batch_size=16), None
    )

    assert status == 0
    assert read_output(output) == classes


def test_a_missing_or_unreadable_image_costs_one_answer(tmp_path) -> None:
    manifest, root, classes = stage(tmp_path, 40)
    rows = manifest_rows(manifest)
    (root / rows[3]).unlink()
    (root / rows[35]).write_text("not an image")
    stand_in = StandIn()

    status, log, output = run_abi(tmp_path, manifest, root, stand_in, None)

    assert status == 0, log
    expected = list(classes)
    expected[3] = expected[35] = abi.FALLBACK_CLASS
    assert read_output(output) == expected
    assert f"{rows[3]}: FileNotFoundError" in log
    assert f"{rows[35]}: ValueError" in log
    assert "2 unreadable" in log
    assert [len(batch) for batch in stand_in.batches] == [31, 7]


def test_a_batch_of_only_unreadable_images_is_not_sent_to_the_model(tmp_path) -> None:
    manifest, root, _ = stage(tmp_path, 3)
    for row in manifest_rows(manifest):
        (root / row).write_text("?")
    stand_in = StandIn()

    status, log, output = run_abi(tmp_path, manifest, root, stand_in, None)

    assert status == 0
    assert stand_in.batches == []
    assert read_output(output) == [0, 0, 0]
    assert log.count("unreadable image") == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a\tx.jpg\nb y.jpg\n", "manifest line 2: expected '<request id><TAB><image path>'"),
        ("a\t\n", "manifest line 1: the image path is empty"),
        ("a\t/etc/passwd\n", "manifest line 1: the image path must stay inside IMAGE_ROOT"),
        ("a\tsub/../../x.jpg\n", "manifest line 1: the image path must stay inside"),
    ],
)
def test_a_bad_manifest_stops_the_run_with_no_output(tmp_path, text, message) -> None:
    manifest = tmp_path / "manifest.tsv"
    manifest.write_text(text)
    root = tmp_path / "images"
    root.mkdir()

    status, log, output = run_abi(tmp_path, manifest, root, StandIn(), None)

    assert status == 2
    assert message in log
    assert not output.exists()


def test_an_unreadable_manifest_or_root_stops_the_run(tmp_path) -> None:
    root = tmp_path / "images"
    root.mkdir()
    binary = tmp_path / "binary.tsv"
    binary.write_bytes(b"a\t\xff\xfe.jpg\n")
    manifest = tmp_path / "manifest.tsv"
    manifest.write_text("a\tx.jpg\n")

    for arguments, message in [
        ((tmp_path / "nowhere.tsv", root), "cannot read the manifest"),
        ((binary, root), "cannot read the manifest"),
        ((manifest, tmp_path / "nowhere"), "is not a folder"),
    ]:
        status, log, output = run_abi(tmp_path, *arguments, StandIn(), None)
        assert (status, message in log, output.exists()) == (2, True, False), log


def test_wrong_arguments_are_a_usage_error(tmp_path) -> None:
    log = io.StringIO()

    assert abi.main(["only-one"], {}, StandIn().model, log=log) == 2
    assert abi.main([], {"CONTEST_MANIFEST": "m"}, StandIn().model, log=log) == 2

    assert "usage: run MANIFEST IMAGE_ROOT OUTPUT" in log.getvalue()
    assert "CONTEST_IMAGE_ROOT, CONTEST_OUTPUT" in log.getvalue()


def short_by_one(pixels: list[int]) -> list[int]:
    return list(pixels)[:-1]


def dropping_loader(images: Any, batch_size: int, collate: Any) -> Iterable[Any]:
    return list(abi.sequential_loader(images, batch_size, collate))[:-1]


def repeating_loader(images: Any, batch_size: int, collate: Any) -> Iterable[Any]:
    batches = list(abi.sequential_loader(images, batch_size, collate))
    return [*batches, batches[0]]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"infer": short_by_one}, "the model answered 31 classes for a batch of 32 images"),
        ({"infer": lambda pixels: [1000] * len(pixels)}, "class 1000, outside [0, 999]"),
        ({"infer": lambda pixels: [-1] * len(pixels)}, "class -1, outside [0, 999]"),
        ({"infer": lambda pixels: ["cat"] * len(pixels)}, "answered 'cat', not a class"),
        ({"loader": dropping_loader}, "8 of 40 images got no class (first: manifest row 33)"),
        ({"loader": repeating_loader}, "manifest row 1 was answered twice"),
    ],
)
def test_a_wrong_count_or_class_from_the_model_writes_no_output(tmp_path, fields, message):
    manifest, root, _ = stage(tmp_path, 40)

    status, log, output = run_abi(tmp_path, manifest, root, StandIn(**fields), None)

    assert status == 1
    assert message in log
    assert "no output written" in log
    assert not output.exists()


def test_the_settings_come_from_eva02_variables() -> None:
    defaults = abi.Settings.from_environ({})
    assert defaults.model_name == "eva02_large_patch14_448.mim_m38m_ft_in22k_in1k"
    assert (defaults.random_weights, defaults.batch_size, defaults.device) == (False, 32, None)
    assert 0 <= defaults.workers <= 8

    chosen = abi.Settings.from_environ(
        {
            "EVA02_MODEL": "eva02_tiny_patch14_224.mim_in22k",
            "EVA02_RANDOM_WEIGHTS": "1",
            "EVA02_BATCH": "7",
            "EVA02_WORKERS": "0",
            "EVA02_DEVICE": "cpu",
            "EVA02_CHECKPOINT": "/elsewhere.pt",
        }
    )
    assert chosen == abi.Settings(
        model_name="eva02_tiny_patch14_224.mim_in22k",
        checkpoint="/elsewhere.pt",
        random_weights=True,
        batch_size=7,
        workers=0,
        device="cpu",
    )


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"EVA02_BATCH": "big"}, "EVA02_BATCH='big' is not a whole number"),
        ({"EVA02_BATCH": "0"}, "EVA02_BATCH=0 must be at least 1"),
        ({"EVA02_WORKERS": "-1"}, "EVA02_WORKERS=-1 must be at least 0"),
        ({"EVA02_RANDOM_WEIGHTS": "yes"}, "EVA02_RANDOM_WEIGHTS='yes': use 1"),
    ],
)
def test_a_bad_setting_is_a_setup_error(tmp_path, environ, message) -> None:
    manifest, root, _ = stage(tmp_path, 2)

    status, log, output = run_abi(tmp_path, manifest, root, StandIn(), environ)

    assert status == 3
    assert f"cannot run the model: {message}" in log
    assert not output.exists()


def test_the_settings_reach_the_model(tmp_path) -> None:
    manifest, root, _ = stage(tmp_path, 2)
    seen: list[Any] = []

    def make_model(settings: Any) -> Any:
        seen.append(settings)
        return StandIn().model()

    output = tmp_path / "o.i32"
    environ = {"EVA02_BATCH": "5", "EVA02_RANDOM_WEIGHTS": "1"}
    assert abi.main([str(manifest), str(root), str(output)], environ, make_model) == 0
    assert (seen[0].batch_size, seen[0].random_weights) == (5, True)


# The Dockerfile, build.sh and run -------------------------------------------------------


def test_the_kit_has_its_executables() -> None:
    for name in ("run", "build.sh"):
        assert (KIT / name).stat().st_mode & stat.S_IXUSR, f"{name} is not executable"
    build = (KIT / "build.sh").read_text()
    assert "compileall -q abi.py eva02_model.py" in build


def test_the_dockerfile_passes_the_flagships_policy() -> None:
    text = (KIT / "Dockerfile").read_text()
    flagship = [line for line in ALLOWED_REGISTRIES.splitlines() if line]

    assert dockerfile_policy.check_dockerfile(text, flagship) == []
    # ... and only because the flagship allows NVIDIA's images: not under the default.
    refused = dockerfile_policy.check_dockerfile(text, ["localhost/podium/", "docker.io/library/"])
    assert [violation.line for violation in refused] == [10]


def test_the_dockerfile_freezes_the_model_the_kit_loads() -> None:
    text = (KIT / "Dockerfile").read_text()

    assert "ARG BASE=nvcr.io/nvidia/pytorch:24.10-py3" in text  # arm64 and amd64
    assert f"ARG EVA02_MODEL={abi.DEFAULT_MODEL}" in text
    assert f"torch.save(model, '{abi.DEFAULT_CHECKPOINT}')" in text
    assert f"EVA02_CHECKPOINT={abi.DEFAULT_CHECKPOINT}" in text
    assert "ADD" not in text


def sandbox_env(**extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ left in the kit's folder
        **extra,
    }


def run_kit(
    arguments: Sequence[Path], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(KIT / "run"), *map(str, arguments)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_run_says_clearly_when_torch_is_missing(tmp_path) -> None:
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    manifest, root, _ = stage(tmp_path, 3)
    output = tmp_path / "predictions.i32"

    result = run_kit([manifest, root, output], sandbox_env(), tmp_path)

    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith(
        "eva02: cannot run the model: this kit needs PyTorch, timm, Pillow and NumPy, and "
        "there is no module named torch"
    )
    assert len(result.stderr.splitlines()) == 1
    assert not output.exists()


def test_run_checks_the_manifest_before_loading_anything(tmp_path) -> None:
    manifest = tmp_path / "manifest.tsv"
    manifest.write_text("no tab here\n")
    (tmp_path / "images").mkdir()

    result = run_kit([manifest, tmp_path / "images", tmp_path / "out.i32"], sandbox_env(), tmp_path)

    assert result.returncode == 2
    assert "manifest line 1: expected" in result.stderr


def test_run_classifies_jpegs_with_a_small_random_eva02(tmp_path) -> None:
    """Only where torch and timm are installed: the whole torch path, on the CPU."""
    pytest.importorskip("torch")
    pytest.importorskip("timm")
    from PIL import Image

    root = tmp_path / "images"
    root.mkdir()
    lines = []
    for index in range(10):
        Image.new("RGB", (40 + index, 30), (index * 20, 100, 200)).save(root / f"{index}.jpg")
        lines.append(f"id{index}\t{index}.jpg\n")
    (root / "9.jpg").write_bytes(b"truncated")
    manifest = tmp_path / "manifest.tsv"
    manifest.write_text("".join(lines))
    output = tmp_path / "out.i32"
    env = sandbox_env(
        EVA02_RANDOM_WEIGHTS="1",
        EVA02_MODEL="eva02_tiny_patch14_336.mim_in22k_ft_in1k",
        EVA02_BATCH="4",
        EVA02_WORKERS="2",
        EVA02_DEVICE="cpu",
    )

    result = run_kit([manifest, root, output], env, tmp_path)

    assert result.returncode == 0, result.stderr
    classes = read_output(output)
    assert len(classes) == 10
    assert all(0 <= class_id < 1000 for class_id in classes)
    assert classes[9] == 0
    assert "1 unreadable" in result.stderr
