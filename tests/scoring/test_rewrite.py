"""Verification re-encodes: the same picture to the eye, nothing exact left to look up."""

from __future__ import annotations

import hashlib
import io
import os
import random
import runpy
import secrets
import stat
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from PIL import Image

from portal.contests import democohort
from scoring.cohort import rewrite

STARTER_KIT = Path(__file__).resolve().parents[2] / "examples" / "starter-kit"


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


def photo(size: tuple[int, int] = (96, 80)) -> Image.Image:
    """A photo-like picture (noise over gradients), colourful down to single pixels."""
    noise = Image.effect_noise(size, 40)
    gradient = Image.linear_gradient("L").resize(size)
    return Image.merge("RGB", (noise, gradient, Image.blend(noise, gradient, 0.5)))


def pil_jpeg(size: tuple[int, int] = (96, 80), **save: object) -> bytes:
    """:func:`photo` saved by Pillow as a JPEG (quality 85 unless ``save`` says otherwise)."""
    mode = save.pop("mode", "RGB")
    save.setdefault("quality", 85)
    buffer = io.BytesIO()
    photo(size).convert(str(mode)).save(buffer, format="JPEG", **save)
    return buffer.getvalue()


def libjpeg_tool(arguments: list[str], data: bytes) -> bytes:
    """``data`` through jpegtran or cjpeg (libjpeg-turbo-progs, which the rewrite needs)."""
    return subprocess.run(arguments, input=data, capture_output=True, check=True).stdout


def cjpeg(sample: str, size: tuple[int, int] = (97, 61)) -> bytes:
    """:func:`photo` saved by cjpeg with the chroma sampling ``sample`` (Pillow has none)."""
    buffer = io.BytesIO()
    photo(size).save(buffer, format="PPM")
    return libjpeg_tool(["cjpeg", "-quality", "85", "-sample", sample], buffer.getvalue())


def with_fill_bytes(data: bytes) -> bytes:
    """``data`` with fill bytes (FF FF FF) before its frame header, as the standard allows."""
    sof = next(start for marker, start, _end in rewrite._segments(data) if marker in rewrite._SOF)
    return data[:sof] + b"\xff\xff\xff" + data[sof:]


def flat_gray() -> bytes:
    """A uniform mid-gray: every coefficient zero, so no table change shows by itself."""
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (128, 128, 128)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


# Every kind of JPEG the rewrite keeps as it is (see the module doc).
SHAPES: dict[str, Callable[[], bytes]] = {
    "demo": lambda: demo_jpegs(1)[0][0],
    "baseline-420": pil_jpeg,
    "progressive": lambda: pil_jpeg(progressive=True),
    "arithmetic": lambda: libjpeg_tool(["jpegtran", "-arithmetic"], pil_jpeg()),
    "arithmetic-progressive": lambda: libjpeg_tool(
        ["jpegtran", "-arithmetic", "-progressive"], pil_jpeg()
    ),
    "grayscale": lambda: pil_jpeg(mode="L"),
    "grayscale-progressive": lambda: pil_jpeg(mode="L", progressive=True),
    "cmyk": lambda: pil_jpeg(mode="CMYK"),  # with an Adobe segment that says how to read it
    "coded-in-rgb": lambda: pil_jpeg(keep_rgb=True),
    "444": lambda: pil_jpeg(subsampling=0),
    "422": lambda: pil_jpeg(subsampling=1),
    "440": lambda: cjpeg("1x2"),
    "odd-size": lambda: pil_jpeg((97, 61)),
    "odd-size-422": lambda: pil_jpeg((97, 61), subsampling=1),
    "odd-size-progressive": lambda: pil_jpeg((97, 61), progressive=True),
    "restart-markers": lambda: pil_jpeg(restart_marker_blocks=3),
    "optimized-with-metadata": lambda: pil_jpeg(
        optimize=True, exif=exif("a photo"), icc_profile=b"\0" * 200, comment=b"a photo"
    ),
    "fill-bytes": lambda: with_fill_bytes(pil_jpeg(progressive=True)),
    "quality-95": lambda: pil_jpeg(quality=95),
    "quality-20": lambda: pil_jpeg(quality=20),  # coarse tables: a finer DC step
    "one-block": lambda: pil_jpeg((8, 8)),
    "large": lambda: pil_jpeg((1600, 1200), quality=95),
    "flat-gray": flat_gray,
}


def decoded(data: bytes) -> tuple[str, tuple[int, int], bytes]:
    with Image.open(io.BytesIO(data)) as image:
        return image.mode, image.size, image.tobytes()


def markers(data: bytes) -> list[int]:
    """The marker of each header segment, SOI to SOS."""
    return [marker for marker, _start, _end in rewrite._segments(data)]


def frame_shape(data: bytes) -> tuple[int, tuple[tuple[int, int], ...]]:
    """The SOF marker (baseline, progressive, arithmetic...) and each component's sampling."""
    frame = rewrite._frame(data)
    sof = next(marker for marker in markers(data) if marker in rewrite._SOF)
    return sof, frame.factors


def quantization_tables(data: bytes) -> list[bytes]:
    """The bodies of the DQT segments: what a key on the tables would read."""
    return [
        data[start + 4 : end] for marker, start, end in rewrite._segments(data) if marker == 0xDB
    ]


def pixels_key(data: bytes) -> str:
    return hashlib.sha256(decoded(data)[2]).hexdigest()


def dc_picture(data: bytes) -> bytes:
    """The 1/8-scale decode, which libjpeg computes from the DC coefficients alone."""
    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        image.draft(image.mode, (max(1, width // 8), max(1, height // 8)))
        return image.tobytes()


def dc_key(data: bytes) -> str:
    """A key on the DC coefficients: the 1/8-scale decode hashed with the tables."""
    return hashlib.sha256(b"".join(quantization_tables(data)) + dc_picture(data)).hexdigest()


@pytest.mark.parametrize("make", SHAPES.values(), ids=SHAPES.keys())
def test_every_kind_of_jpeg_keeps_its_picture_and_shape_but_no_exact_key(make):
    original = make()

    rewritten = rewrite.rewrite_jpeg_data(original, random.Random(1))

    assert rewrite.psnr_db(original, rewritten) >= rewrite.PSNR_FLOOR_DB
    assert decoded(rewritten)[:2] == decoded(original)[:2]  # mode and size
    assert frame_shape(rewritten) == frame_shape(original)  # coding and chroma sampling
    assert rewritten[:8192] != original[:8192]
    assert quantization_tables(rewritten) != quantization_tables(original)
    assert pixels_key(rewritten) != pixels_key(original)
    assert dc_picture(rewritten) != dc_picture(original)
    assert dc_key(rewritten) != dc_key(original)
    again = rewrite.rewrite_jpeg_data(original, random.Random(2))
    assert again != rewritten
    assert quantization_tables(again) != quantization_tables(rewritten)


def test_demo_images_keep_their_class_size_and_picture():
    classify = runpy.run_path(str(STARTER_KIT / "predict.py"))["classify"]
    rng = random.Random(3)
    for original, class_id in demo_jpegs(300):
        rewritten = rewrite.rewrite_jpeg_data(original, rng)

        assert rewrite.psnr_db(original, rewritten) >= rewrite.PSNR_FLOOR_DB
        assert 0.8 <= len(rewritten) / len(original) <= 1.2
        assert classify(io.BytesIO(rewritten)) == classify(io.BytesIO(original)) == class_id
        assert democohort.decode_class_image(rewritten) == class_id
        assert pixels_key(rewritten) != pixels_key(original)


def test_two_rewrites_of_one_file_differ_from_each_other():
    original, _class_id = demo_jpegs(1)[0]
    rng = secrets.SystemRandom()

    variants = [rewrite.rewrite_jpeg_data(original, rng) for _ in range(20)]

    assert len(set(variants)) == 20
    assert len({pixels_key(variant) for variant in variants}) == 20
    assert all(rewrite.psnr_db(original, variant) >= rewrite.PSNR_FLOOR_DB for variant in variants)


def test_rewrites_run_at_once_on_a_thread_pool():
    originals = demo_jpegs(64, seed=11)
    rng = secrets.SystemRandom()

    with ThreadPoolExecutor(max_workers=8) as pool:
        rewritten = list(pool.map(lambda item: rewrite.rewrite_jpeg_data(item[0], rng), originals))

    for (original, class_id), data in zip(originals, rewritten, strict=True):
        assert rewrite.psnr_db(original, data) >= rewrite.PSNR_FLOOR_DB
        assert democohort.decode_class_image(data) == class_id


def test_a_sampling_pillow_cannot_write_becomes_444_and_keeps_the_floor():
    original = cjpeg("4x1")  # 4:1:1
    assert rewrite._frame(original).factors == ((4, 1), (1, 1), (1, 1))

    rewritten = rewrite.rewrite_jpeg_data(original, random.Random(1))

    assert rewrite._frame(rewritten).factors == ((1, 1), (1, 1), (1, 1))
    assert rewrite.psnr_db(original, rewritten) >= rewrite.PSNR_FLOOR_DB
    assert decoded(rewritten)[:2] == decoded(original)[:2]


def test_standard_huffman_tables_stay_standard_and_optimized_ones_optimized():
    # The entropy coding decides part of the decoding cost, which the timing rule compares.
    standard = pil_jpeg()
    optimized = pil_jpeg(optimize=True)
    assert not rewrite._frame(standard).optimized
    assert rewrite._frame(optimized).optimized

    assert not rewrite._frame(rewrite.rewrite_jpeg_data(standard, random.Random(1))).optimized
    assert rewrite._frame(rewrite.rewrite_jpeg_data(optimized, random.Random(1))).optimized


def test_a_draw_below_the_floor_is_never_returned(monkeypatch):
    monkeypatch.setattr(rewrite, "PSNR_FLOOR_DB", 200.0)  # no re-encode reaches it

    with pytest.raises(rewrite.RewriteError, match=r"no perturbation in 6 draws.*200 dB"):
        rewrite.rewrite_jpeg_data(pil_jpeg(), secrets.SystemRandom())


def test_psnr_db_compares_the_decoded_pictures():
    def png(level: int, mode: str = "L") -> bytes:
        buffer = io.BytesIO()
        Image.new(mode, (8, 8), level).save(buffer, format="PNG")
        return buffer.getvalue()

    assert rewrite.psnr_db(png(100), png(100)) == float("inf")
    assert rewrite.psnr_db(png(100), png(101)) == pytest.approx(48.13, abs=0.01)  # MSE 1
    with pytest.raises(ValueError, match="different shapes"):
        rewrite.psnr_db(png(100), png(100, "RGB"))


def test_the_tables_are_drawn_from_the_rng():
    original = pil_jpeg()

    same = [rewrite.rewrite_jpeg_data(original, random.Random(5)) for _ in range(2)]
    other = rewrite.rewrite_jpeg_data(original, random.Random(6))

    assert same[0] == same[1]
    assert other != same[0]
    assert quantization_tables(other) != quantization_tables(same[0])


def header_shape(data: bytes) -> list[tuple[int, bytes]]:
    """What a distinguisher reads in a header without the tables: each segment's marker,
    an APPn's tag, and the restart interval."""
    shape = []
    for marker, start, end in rewrite._segments(data):
        if 0xE0 <= marker <= 0xEF:
            shape.append((marker, data[start + 4 : start + 9]))
        elif marker == 0xDD:
            shape.append((marker, data[start + 4 : end]))
        else:
            shape.append((marker, b""))
    return shape


# Shapes whose re-encode is coded differently on purpose (see the module doc): 4:4:0
# comes back through a transpose, CMYK as Adobe CMYK.
RECODED = {"440", "cmyk"}


@pytest.mark.parametrize("shape", sorted(set(SHAPES) - RECODED))
def test_a_re_encode_carries_the_segments_of_its_staged_original_and_no_more(shape):
    """Hostile: a run that parses headers (APPn, COM, DRI, the segments' order) to tell a
    verification's re-encode from an official run's frozen file finds the same header."""
    original = SHAPES[shape]()

    rewritten = rewrite.rewrite_jpeg_data(original, secrets.SystemRandom())

    staged = rewrite.strip_metadata(original)
    assert header_shape(rewritten) == header_shape(staged)
    assert rewrite.strip_metadata(rewritten) == rewritten


def test_restart_markers_come_back_at_the_originals_interval():
    original = pil_jpeg(restart_marker_blocks=3)
    assert (0xDD, b"\x00\x03") in header_shape(original)

    rewritten = rewrite.rewrite_jpeg_data(original, secrets.SystemRandom())

    assert (0xDD, b"\x00\x03") in header_shape(rewritten)
    assert 0xDD not in markers(rewrite.rewrite_jpeg_data(pil_jpeg(), secrets.SystemRandom()))


def test_metadata_is_dropped():
    original = pil_jpeg(exif=exif("val_00000042"), comment=b"val_00000042")
    assert 0xE1 in markers(original)
    assert 0xFE in markers(original)

    rewritten = rewrite.rewrite_jpeg_data(original, secrets.SystemRandom())

    assert 0xE1 not in markers(rewritten)
    assert 0xFE not in markers(rewritten)
    assert b"val_00000042" not in rewritten


def test_staging_drops_metadata_and_keeps_the_coded_picture():
    original = pil_jpeg(exif=exif("val_00000042"), icc_profile=b"\1" * 300, comment=b"val_00000042")

    stripped = rewrite.strip_metadata(original)

    assert [
        marker for marker in markers(stripped) if 0xE1 <= marker <= 0xEF or marker == 0xFE
    ] == []
    assert stripped[:11] == b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"
    assert b"val_00000042" not in stripped
    assert decoded(stripped) == decoded(original)
    assert rewrite.strip_metadata(stripped) == stripped  # nothing left to drop
    assert rewrite.strip_metadata(b"\x89PNG\r\n") == b"\x89PNG\r\n"  # not a JPEG: as is


def rewrite_file(src: Path, dest: Path) -> None:
    """What staging does with a set's member: its re-encoded bytes into a new file."""
    rewrite.write_file(dest, rewrite.rewrite_jpeg_data(src.read_bytes(), secrets.SystemRandom()))


def test_rewrite_jpeg_writes_a_new_world_readable_file(tmp_path):
    original, class_id = demo_jpegs(1)[0]
    src = tmp_path / "member.jpg"
    src.write_bytes(original)
    dest = tmp_path / "staged.jpg"
    old_umask = os.umask(0o077)
    try:
        rewrite_file(src, dest)
    finally:
        os.umask(old_umask)

    assert stat.S_IMODE(dest.stat().st_mode) == 0o644
    assert dest.stat().st_ino != src.stat().st_ino
    assert rewrite.psnr_db(original, dest.read_bytes()) >= rewrite.PSNR_FLOOR_DB
    assert democohort.decode_class_image(dest.read_bytes()) == class_id
    assert src.read_bytes() == original


def test_rewrite_jpeg_refuses_a_file_that_is_not_a_jpeg(tmp_path):
    src = tmp_path / "member.jpg"  # the name says JPEG; the bytes say PNG
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, format="PNG")
    src.write_bytes(buffer.getvalue())

    assert not rewrite.is_jpeg(src.read_bytes())
    with pytest.raises(rewrite.RewriteError, match="not a JPEG"):
        rewrite_file(src, tmp_path / "staged.jpg")
    assert not (tmp_path / "staged.jpg").exists()


def test_a_truncated_jpeg_is_refused_not_rewritten_from_half_a_picture():
    original = pil_jpeg()
    truncated = original[: len(original) * 2 // 3]  # the header is intact

    with pytest.raises(rewrite.RewriteError, match="cannot decode it"):
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
