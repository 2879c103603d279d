"""Lossless JPEG rewriting: the same pixels under new bytes, never the same bytes twice."""

from __future__ import annotations

import hashlib
import io
import os
import random
import secrets
import stat
import struct
import subprocess
import time
from pathlib import Path

import pytest
from PIL import Image

from portal.contests import democohort
from scoring import rewrite


def demo_jpegs(count: int, seed: int = 7) -> list[tuple[bytes, int]]:
    rng = random.Random(seed)
    classes = [rng.randrange(democohort.CLASS_COUNT) for _ in range(count)]
    return [(democohort.encode_class_image(class_id, rng), class_id) for class_id in classes]


def exif(description: str) -> bytes:
    """EXIF with an orientation and a description, as a camera or a data set might leave."""
    data = Image.Exif()
    data[0x0112] = 1  # orientation: upright
    data[0x010E] = description
    return data.tobytes()


def pil_jpeg(**save: object) -> bytes:
    """A photo-like 96x80 JPEG (noise over gradients) saved by Pillow with ``save``."""
    noise = Image.effect_noise((96, 80), 40)
    gradient = Image.linear_gradient("L").resize((96, 80))
    image = Image.merge("RGB", (noise, gradient, Image.blend(noise, gradient, 0.5)))
    mode = save.pop("mode", "RGB")
    buffer = io.BytesIO()
    image.convert(str(mode)).save(buffer, format="JPEG", quality=85, **save)
    return buffer.getvalue()


def decoded(data: bytes) -> tuple[str, tuple[int, int], bytes]:
    with Image.open(io.BytesIO(data)) as image:
        return image.mode, image.size, image.tobytes()


def markers(data: bytes) -> list[int]:
    """The marker of each header segment, SOI to SOS."""
    return [marker for marker, _start, _end in rewrite._segments(data)]


def test_demo_jpegs_keep_their_pixels_and_classes_under_new_bytes():
    rng = secrets.SystemRandom()
    for original, class_id in demo_jpegs(25):
        rewritten = rewrite.rewrite_jpeg_data(original, rng)

        assert decoded(rewritten) == decoded(original)
        assert democohort.decode_class_image(rewritten) == class_id
        assert rewritten != original
        assert hashlib.sha256(rewritten).digest() != hashlib.sha256(original).digest()


@pytest.mark.parametrize(
    ("save", "mode"),
    [
        ({"progressive": True}, "RGB"),
        ({"mode": "L"}, "L"),
        ({"mode": "CMYK"}, "CMYK"),  # with an Adobe segment that says how to read it
        ({"subsampling": 0}, "RGB"),  # 4:4:4
        ({"optimize": True, "exif": exif("a photo")}, "RGB"),
    ],
    ids=["progressive", "grayscale", "cmyk", "444", "optimized-with-exif"],
)
def test_other_kinds_of_jpeg_keep_their_pixels(save, mode):
    original = pil_jpeg(**save)

    rewritten = rewrite.rewrite_jpeg_data(original, secrets.SystemRandom())

    assert decoded(rewritten)[0] == mode
    assert decoded(rewritten) == decoded(original)
    assert rewritten != original


def test_a_progressive_jpeg_stays_progressive_and_a_baseline_one_baseline():
    # Decoding a progressive file costs more: the verification run must not get cheaper
    # (or dearer) images than the official run it is compared with.
    progressive = rewrite.rewrite_jpeg_data(pil_jpeg(progressive=True), secrets.SystemRandom())
    baseline = rewrite.rewrite_jpeg_data(pil_jpeg(), secrets.SystemRandom())

    assert 0xC2 in markers(progressive)
    assert 0xC0 in markers(baseline)
    assert 0xC2 not in markers(baseline)


def test_an_arithmetic_coded_jpeg_stays_arithmetic_coded(tmp_path):
    source = tmp_path / "huffman.jpg"
    source.write_bytes(pil_jpeg())
    arithmetic = subprocess.run(
        ["jpegtran", "-arithmetic", str(source)], capture_output=True, check=True
    ).stdout
    assert 0xC9 in markers(arithmetic)

    rewritten = rewrite.rewrite_jpeg_data(arithmetic, secrets.SystemRandom())

    assert 0xC9 in markers(rewritten)
    assert decoded(rewritten) == decoded(arithmetic)


def test_two_rewrites_of_one_file_differ_from_each_other():
    original, _class_id = demo_jpegs(1)[0]
    rng = secrets.SystemRandom()

    variants = {rewrite.rewrite_jpeg_data(original, rng) for _ in range(20)}

    assert len(variants) == 20
    assert len({decoded(variant) for variant in variants}) == 1


def test_the_restart_interval_and_comment_are_drawn_from_the_rng():
    original = pil_jpeg()

    same = [rewrite.rewrite_jpeg_data(original, random.Random(5)) for _ in range(2)]
    other = rewrite.rewrite_jpeg_data(original, random.Random(6))

    assert same[0] == same[1]
    assert other != same[0]
    for data in (*same, other):
        found = markers(data)
        assert 0xDD in found  # DRI: restart markers
        assert found.count(0xFE) == 1  # one COM segment, ours


def test_the_comment_goes_after_the_jfif_segment_so_format_sniffers_still_see_it():
    original, _class_id = demo_jpegs(1)[0]

    rewritten = rewrite.rewrite_jpeg_data(original, secrets.SystemRandom())

    assert rewritten[:4] == b"\xff\xd8\xff\xe0"
    assert rewritten[6:11] == b"JFIF\x00"
    assert markers(rewritten)[:3] == [0xD8, 0xE0, 0xFE]
    (length,) = struct.unpack_from(">H", rewritten, 22)
    assert 16 + 2 <= length <= 64 + 2


def test_metadata_is_dropped():
    original = pil_jpeg(exif=exif("val_00000042"), comment=b"val_00000042")
    assert 0xE1 in markers(original)
    assert 0xFE in markers(original)

    rewritten = rewrite.rewrite_jpeg_data(original, secrets.SystemRandom())

    assert 0xE1 not in markers(rewritten)
    assert markers(rewritten).count(0xFE) == 1  # ours
    assert b"val_00000042" not in rewritten


def test_rewrite_jpeg_writes_a_new_world_readable_file(tmp_path):
    original, _class_id = demo_jpegs(1)[0]
    src = tmp_path / "member.jpg"
    src.write_bytes(original)
    dest = tmp_path / "staged.jpg"
    old_umask = os.umask(0o077)
    try:
        rewrite.rewrite_jpeg(src, dest, secrets.SystemRandom())
    finally:
        os.umask(old_umask)

    assert stat.S_IMODE(dest.stat().st_mode) == 0o644
    assert dest.stat().st_ino != src.stat().st_ino
    assert decoded(dest.read_bytes()) == decoded(original)
    assert src.read_bytes() == original


def test_rewrite_jpeg_refuses_a_file_that_is_not_a_jpeg(tmp_path):
    src = tmp_path / "member.jpg"  # the name says JPEG; the bytes say PNG
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, format="PNG")
    src.write_bytes(buffer.getvalue())

    assert not rewrite.is_jpeg(src.read_bytes())
    with pytest.raises(rewrite.RewriteError, match="not a JPEG"):
        rewrite.rewrite_jpeg(src, tmp_path / "staged.jpg", secrets.SystemRandom())
    assert not (tmp_path / "staged.jpg").exists()


def test_a_damaged_jpeg_is_refused_not_rewritten():
    original = pil_jpeg()
    # The header is intact, so the damage is only found by jpegtran (which only warns).
    truncated = original[: len(original) * 2 // 3]

    with pytest.raises(rewrite.RewriteError, match="jpegtran"):
        rewrite.rewrite_jpeg_data(truncated, secrets.SystemRandom())


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xff\xd8\xff\xe0\x00\x04ab\xff\xda\x00\x02", "no frame header"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "bad segment length"),
        (b"\xff\xd8\xff\xe0\x00\x04ab", "ends before its first scan"),
    ],
    ids=["no-sof", "cut-segment", "no-scan"],
)
def test_a_broken_jpeg_header_is_refused(data, reason):
    with pytest.raises(rewrite.RewriteError, match=reason):
        rewrite.rewrite_jpeg_data(data, secrets.SystemRandom())


def test_a_host_without_jpegtran_gets_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    original, _class_id = demo_jpegs(1)[0]

    with pytest.raises(rewrite.JpegtranMissing, match=r"jpegtran is not installed.*libjpeg-turbo"):
        rewrite.find_jpegtran()
    with pytest.raises(rewrite.JpegtranMissing, match="not installed"):
        rewrite.rewrite_jpeg_data(original, secrets.SystemRandom())
    with pytest.raises(rewrite.JpegtranMissing, match="not installed"):
        rewrite.rewrite_jpeg_data(
            original, secrets.SystemRandom(), jpegtran=str(tmp_path / "jpegtran")
        )


def test_fill_bytes_before_a_marker_are_read_as_the_standard_allows():
    original = pil_jpeg(progressive=True)
    sof = next(start for marker, start, _end in rewrite._segments(original) if marker == 0xC2)
    padded = original[:sof] + b"\xff\xff\xff" + original[sof:]

    rewritten = rewrite.rewrite_jpeg_data(padded, secrets.SystemRandom())

    assert 0xC2 in markers(rewritten)  # the frame was found: still progressive
    assert decoded(rewritten) == decoded(original)


def fake_jpegtran(folder: Path, script: str) -> str:
    path = folder / "jpegtran"
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return str(path)


def test_a_jpegtran_that_hangs_is_stopped(monkeypatch, tmp_path):
    monkeypatch.setattr(rewrite, "TIMEOUT_S", 0.3)
    hanging = fake_jpegtran(tmp_path, "exec sleep 30")
    original, _class_id = demo_jpegs(1)[0]

    started = time.monotonic()
    with pytest.raises(rewrite.RewriteError, match="took more than"):
        rewrite.rewrite_jpeg_data(original, secrets.SystemRandom(), jpegtran=hanging)
    assert time.monotonic() - started < 5


def test_a_jpegtran_that_writes_no_jpeg_is_refused(tmp_path):
    broken = fake_jpegtran(tmp_path, "cat >/dev/null; echo not a jpeg")
    original, _class_id = demo_jpegs(1)[0]

    with pytest.raises(rewrite.RewriteError, match="not a JPEG"):
        rewrite.rewrite_jpeg_data(original, secrets.SystemRandom(), jpegtran=broken)


def test_a_large_jpeg_passes_through_whole(tmp_path):
    # Bigger than any pipe or page: the streams are files, read back to the last byte.
    noise = Image.effect_noise((1600, 1200), 60).convert("RGB")
    buffer = io.BytesIO()
    noise.save(buffer, format="JPEG", quality=95)
    original = buffer.getvalue()
    assert len(original) > 1 << 20

    rewritten = rewrite.rewrite_jpeg_data(original, secrets.SystemRandom())

    assert decoded(rewritten) == decoded(original)
