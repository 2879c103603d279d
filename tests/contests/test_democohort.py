"""The demo images spell their class in the pixels, and the decoder reads it back."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from portal.contests import democohort


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_class_survives_jpeg_encoding(seed: int) -> None:
    rng = random.Random(seed)
    for class_id in range(democohort.CLASS_COUNT):
        data = democohort.encode_class_image(class_id, rng)
        assert data[:2] == b"\xff\xd8"  # a JPEG
        assert democohort.decode_class_image(data) == class_id


@pytest.mark.parametrize("size", [16, 48, 100, 224])
def test_other_sizes_decode_too(size: int) -> None:
    rng = random.Random(size)
    for class_id in (0, 9, 90, 123, 505, 909, 999):
        image = democohort.encode_class_image(class_id, rng, size=size)
        assert democohort.decode_class_image(image) == class_id


def test_images_of_one_class_differ() -> None:
    rng = random.Random(7)
    images = {democohort.encode_class_image(421, rng) for _ in range(20)}
    assert len(images) == 20


def test_classes_outside_the_range_are_refused() -> None:
    rng = random.Random(0)
    for class_id in (-1, 1000):
        with pytest.raises(ValueError, match="outside"):
            democohort.encode_class_image(class_id, rng)


def test_generate_writes_labelled_files_reproducibly(tmp_path: Path) -> None:
    first = democohort.generate(tmp_path / "a", 600, seed=5)
    second = democohort.generate(tmp_path / "b", 600, seed=5)

    assert first == second
    assert len(first) == 600
    assert len({path for path, _ in first}) == 600
    assert {path.split("/")[0] for path, _ in first} == {"part00", "part01"}
    assert first[42][0] == "part00/val_00000042.jpg"
    for relative_path, class_id in first:
        data = (tmp_path / "a" / relative_path).read_bytes()
        assert data == (tmp_path / "b" / relative_path).read_bytes()
        assert democohort.decode_class_image(data) == class_id
    assert len({class_id for _, class_id in first}) > 300  # classes spread over the range


def test_another_seed_gives_another_cohort(tmp_path: Path) -> None:
    assert democohort.generate(tmp_path / "a", 20, seed=1) != democohort.generate(
        tmp_path / "b", 20, seed=2
    )
