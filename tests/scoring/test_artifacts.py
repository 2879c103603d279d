"""The listing of a reviewed image for staff: its largest files with their SHA-256, and the
files shaped like a table with one entry per validation image."""

from __future__ import annotations

import hashlib
import io
import tarfile
import uuid
from collections.abc import Iterator

import pytest
from django.utils import timezone

from portal.submissions.models import ProvenanceReview
from scoring import engine
from scoring.images import artifacts
from tests.web.boards import official_run

NPY_HEADER = (
    b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (50000, 8), }"
)


def tar_of(files: dict[str, bytes], extra: list[tarfile.TarInfo] | None = None) -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        for info in extra or []:
            tar.addfile(info)
    return data.getvalue()


def chunked(data: bytes, size: int = 7_777) -> Iterator[bytes]:
    """The export arrives in chunks of any size, cut anywhere."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_tables_of_one_entry_per_validation_image_are_flagged_and_nothing_else():
    lookup = b"".join(b"ILSVRC2012_val_%08d.JPEG\t%d\n" % (n, n % 1000) for n in range(50_000))
    files = {
        "opt/lookup.tsv": lookup,  # one line per validation image
        "opt/with_header.csv": b"path,class\n" + lookup,
        "opt/classes.bin": bytes(50_000 * 4),  # an int32 per image
        "opt/hashes.bin": bytes(10_000 * 32),  # a SHA-256 per image of the cohort
        "opt/embeddings.npy": NPY_HEADER + bytes(64),
        "opt/imagenet_classes.txt": b"".join(b"class %d\n" % n for n in range(1_000)),
        "opt/model.bin": bytes(50_000 * 4 + 1),
        "usr/lib/notes.txt": b"hello\n" * 49_000,
    }
    link = tarfile.TarInfo("opt/link")
    link.type, link.linkname = tarfile.SYMTYPE, "/opt/lookup.tsv"

    found = artifacts.listing(chunked(tar_of(files, [link])))

    flagged = {table["path"]: table["why"] for table in found["tables"]}
    assert set(flagged) == {
        "/opt/lookup.tsv",
        "/opt/with_header.csv",
        "/opt/classes.bin",
        "/opt/hashes.bin",
        "/opt/embeddings.npy",
    }
    assert flagged["/opt/lookup.tsv"] == "50,000 lines: one per image of 50,000?"
    assert flagged["/opt/classes.bin"] == "200,000 bytes: 4 per image of 50,000?"
    assert flagged["/opt/embeddings.npy"] == "a NumPy array of 50,000 rows"
    assert (found["files"], found["bytes"]) == (len(files), sum(map(len, files.values())))
    table = next(t for t in found["tables"] if t["path"] == "/opt/lookup.tsv")
    assert table["sha256"] == hashlib.sha256(lookup).hexdigest()


def test_the_largest_files_come_first_with_their_digests_and_the_list_is_bounded():
    files = {f"data/{n:03d}.bin": bytes([n % 256]) * (n + 1) * 100 for n in range(30)}

    found = artifacts.listing(chunked(tar_of(files), size=1_000))

    largest = found["largest"]
    assert len(largest) == artifacts.LARGEST
    assert [entry["path"] for entry in largest[:3]] == [
        "/data/029.bin",
        "/data/028.bin",
        "/data/027.bin",
    ]
    assert largest[0]["bytes"] == 3_000
    assert largest[0]["sha256"] == hashlib.sha256(files["data/029.bin"]).hexdigest()


def test_the_export_waits_for_a_score_before_it_starts_and_every_so_many_bytes():
    data = tar_of({"a.bin": bytes(5_000), "b.bin": bytes(5_000)})
    pauses: list[int] = []
    taken: list[int] = []

    def chunks() -> Iterator[bytes]:
        for chunk in chunked(data, size=1_000):
            taken.append(len(chunk))
            yield chunk

    found = artifacts.listing(
        artifacts.paced(chunks(), pause=lambda: pauses.append(sum(taken)), every=4_000)
    )

    assert found["files"] == 2
    assert pauses[0] == 0  # before anything is read
    assert pauses[1:] == list(range(4_000, len(data) + 1, 4_000))  # each after 4,000 more


@pytest.mark.docker
def test_a_real_image_is_listed_through_the_engine_and_its_container_removed():
    tag = f"podium-test/artifacts-{uuid.uuid4().hex[:12]}:1"
    big = bytes(4096 * 1024)
    files = {
        # COPY, not RUN: the build needs no network (the default bridge may be gone).
        "Dockerfile": (
            b"FROM localhost/podium/busybox:1\nCOPY opt.tsv /opt.tsv\nCOPY big.bin /big.bin\n"
        ),
        "opt.tsv": b"".join(b"%d\n" % n for n in range(1, 50_001)),
        "big.bin": big,
    }
    outcome = engine.build_image(
        context=io.BytesIO(tar_of(files)), tag=tag, on_log=lambda _: None, timeout_s=120
    )
    assert outcome.ok, outcome.error
    try:
        before = {c["Id"] for c in engine.list_containers(status="")}

        found = artifacts.list_image(tag)

        assert {c["Id"] for c in engine.list_containers(status="")} == before  # removed
        assert found["largest"][0]["path"] == "/big.bin"
        assert found["largest"][0]["sha256"] == hashlib.sha256(big).hexdigest()
        assert [t["path"] for t in found["tables"]] == ["/opt.tsv"]
    finally:
        engine.remove_image(tag)


@pytest.fixture
def reviewed(benchmark, alice):
    """An official submission under review whose image this engine may or may not have."""
    submission = official_run(benchmark, alice, 100).submission
    submission.image_digest = "sha256:" + "b" * 64
    submission.image_ref = "registry.invalid/podium/sub-1@sha256:" + "b" * 64
    submission.save(update_fields=["image_digest", "image_ref"])
    ProvenanceReview.objects.create(
        submission=submission, opened_at=timezone.now(), opened_because="first place"
    )
    return submission


def listing_of(submission):
    submission.provenance_review.refresh_from_db()
    return submission.provenance_review.artifacts


def test_an_image_kept_nowhere_is_said_so_on_the_review(reviewed, monkeypatch):
    monkeypatch.setattr(engine, "image_exists", lambda _image: False)
    pulled: list[str] = []
    monkeypatch.setattr(engine, "pull_image", pulled.append)

    artifacts.review_listing(reviewed.pk)

    assert pulled == [reviewed.image_ref]  # tried the registry first
    assert listing_of(reviewed) == {"error": "the submission's image is no longer kept"}


def test_an_engine_failure_is_kept_on_the_review_not_raised(reviewed, monkeypatch):
    def refuse(_image):
        raise engine.EngineError("connection refused")

    monkeypatch.setattr(engine, "image_exists", refuse)

    artifacts.review_listing(reviewed.pk)

    assert listing_of(reviewed) == {
        "error": "the engine could not list the image: connection refused"
    }


def test_an_image_found_only_in_the_registry_is_pulled_and_listed(reviewed, monkeypatch):
    present: set[str] = set()
    monkeypatch.setattr(engine, "image_exists", lambda image: image in present)
    monkeypatch.setattr(engine, "pull_image", present.add)
    listed: list[str] = []

    def list_image(image, _pause):
        listed.append(image)
        return {"files": 0}

    monkeypatch.setattr(artifacts, "list_image", list_image)

    artifacts.review_listing(reviewed.pk)

    assert listed == [reviewed.image_ref]
    assert listing_of(reviewed) == {"files": 0}
