"""Cohort staging: one fixed order, fresh names and ids per run, hard links, frozen hashes.

Verification runs: the same members in a fresh order, as rewritten (pixel-identical) copies.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import stat
import uuid
from pathlib import Path

import pytest
from django.utils import timezone
from PIL import Image

from portal import storage
from portal.contests import democohort
from portal.contests.models import Benchmark, Cohort, CohortItem
from portal.environments.models import Environment
from portal.submissions.models import AttemptLedger, Run, Submission
from scoring import staging


def make_cohort(
    benchmark: Benchmark, classes: list[int], *, kind: str = Cohort.OFFICIAL, jpeg: bool = False
) -> Cohort:
    """A cohort whose files sit at ``cohort_dir(id)/canonical_name`` with real hashes.

    Positions run opposite to the names' order, so a test can tell position order from
    name or insertion order. The files are short random texts named ``.jpg``, or with
    ``jpeg`` demo JPEGs that spell their class (``democohort``), no two alike.
    """
    cohort = Cohort.objects.create(benchmark=benchmark, kind=kind)
    root = storage.cohort_dir(cohort.pk)
    rng = random.Random(len(classes))
    for index, reference_class in enumerate(classes):
        name = f"part00/val_{index:08d}.jpg"
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if jpeg:
            data = democohort.encode_class_image(reference_class, rng)
        else:
            data = f"image {index} of class {reference_class}\n".encode() + os.urandom(64)
        path.write_bytes(data)
        path.chmod(0o644)
        CohortItem.objects.create(
            cohort=cohort,
            position=len(classes) - 1 - index,
            canonical_name=name,
            sha256=hashlib.sha256(data).hexdigest(),
            reference_class=reference_class,
        )
    return cohort


def make_submission(
    entrant,
    benchmark: Benchmark,
    *,
    image_tag: str = "localhost/podium/busybox:1",
    status: str = Submission.QUEUED,
) -> Submission:
    """A submission that passed its build (queued for scoring), with its attempt charged."""
    environment = Environment.objects.create(
        owner=entrant,
        benchmark=benchmark,
        name=f"env-{uuid.uuid4().hex[:8]}",
        status=Environment.READY,
        dockerfile="FROM localhost/podium/busybox:1\n",
        image_tag="localhost/podium/busybox:1",
    )
    now = timezone.now()
    submission = Submission.objects.create(
        entrant=entrant,
        benchmark=benchmark,
        environment=environment,
        kind=Submission.OFFICIAL,
        status=status,
        submitted_at=now,
        source_name="src.tar.gz",
        source_format="tar.gz",
        source_sha256="0" * 64,
        source_bytes=1,
        image_tag=image_tag,
    )
    AttemptLedger.objects.create(
        entrant=entrant,
        benchmark=benchmark,
        submission=submission,
        kind=submission.kind,
        attempt_day=now.date(),
        delta=AttemptLedger.CHARGE,
        reason="upload accepted",
        at=now,
    )
    return submission


def make_run(submission: Submission, cohort: Cohort, try_number: int = 1) -> Run:
    return Run.objects.create(
        submission=submission, cohort=cohort, try_number=try_number, status=Run.STAGING
    )


def canonical_order(staged: staging.StagedRun, cohort: Cohort) -> list[str]:
    """Which cohort member each staged name hard-links to (same inode), in manifest order."""
    root = storage.cohort_dir(cohort.pk)
    by_inode = {
        (root / item.canonical_name).stat().st_ino: item.canonical_name
        for item in cohort.items.all()
    }
    return [
        by_inode[(staged.input_dir / "images" / name).stat().st_ino] for name in staged.staged_names
    ]


CLASSES = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 383, 279, 502, 884, 197, 169, 399]


@pytest.fixture
def cohort(benchmark: Benchmark) -> Cohort:
    return make_cohort(benchmark, CLASSES)


def test_every_run_sees_the_cohort_in_its_fixed_order_under_fresh_names(
    alice, bob, benchmark, cohort
):
    first = staging.stage(make_run(make_submission(alice, benchmark), cohort))
    second = staging.stage(make_run(make_submission(bob, benchmark), cohort))

    by_position = list(cohort.items.order_by("position").values_list("canonical_name", flat=True))
    assert canonical_order(first, cohort) == by_position
    assert canonical_order(second, cohort) == by_position
    assert (
        first.references
        == second.references
        == [item.reference_class for item in cohort.items.order_by("position")]
    )
    assert first.rows == second.rows == len(CLASSES)
    assert not set(first.staged_names) & set(second.staged_names)
    assert not set(first.request_ids) & set(second.request_ids)
    assert len(set(first.request_ids)) == len(CLASSES)


def test_the_manifest_lists_request_id_and_path_relative_to_the_image_root(
    alice, benchmark, cohort
):
    staged = staging.stage(make_run(make_submission(alice, benchmark), cohort))

    assert staged.manifest == staged.input_dir / "manifest.tsv"
    rows = [line.split("\t") for line in staged.manifest.read_text().splitlines()]
    assert rows == [
        [rid, name] for rid, name in zip(staged.request_ids, staged.staged_names, strict=True)
    ]
    assert all((staged.input_dir / "images" / name).is_file() for _rid, name in rows)
    assert all(name.endswith(".jpg") for name in staged.staged_names)


def test_staged_files_are_world_readable_hard_links_not_copies(alice, benchmark, cohort):
    staged = staging.stage(make_run(make_submission(alice, benchmark), cohort))

    images = staged.input_dir / "images"
    for name in staged.staged_names:
        info = (images / name).lstat()
        assert stat.S_ISREG(info.st_mode)
        assert info.st_nlink == 2  # the cohort's name and this run's
        assert stat.S_IMODE(info.st_mode) == 0o644
    for folder in (staged.input_dir, images):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert stat.S_IMODE(staged.manifest.stat().st_mode) == 0o644


def test_nothing_under_the_mounted_input_names_a_cohort_member(alice, benchmark, cohort):
    staged = staging.stage(make_run(make_submission(alice, benchmark), cohort))

    canonical_stems = [Path(item.canonical_name).stem for item in cohort.items.all()]
    mounted_text = "\n".join(
        [str(path.relative_to(staged.input_dir)) for path in staged.input_dir.rglob("*")]
        + [staged.manifest.read_text()]
    )
    for stem in [*canonical_stems, "part00", "val_"]:
        assert stem not in mounted_text
    # The private mapping exists for staff, next to (never inside) the mounted folder.
    mapping = (staged.root / "private" / "mapping.tsv").read_text()
    assert all(stem in mapping for stem in canonical_stems)
    assert not staged.input_dir.is_relative_to(staged.root / "private")


def test_a_cohort_file_changed_after_import_stops_the_run(alice, benchmark, cohort):
    item = cohort.items.get(position=7)
    (storage.cohort_dir(cohort.pk) / item.canonical_name).write_bytes(b"tampered")
    run = make_run(make_submission(alice, benchmark), cohort)

    with pytest.raises(staging.StagingError, match="no longer matches its frozen sha256") as err:
        staging.stage(run)

    assert item.canonical_name not in str(err.value)  # the entrant sees this reason
    assert not (storage.run_dir(run.pk) / "input").exists()


def test_a_missing_cohort_file_stops_the_run(alice, benchmark, cohort):
    item = cohort.items.get(position=0)
    (storage.cohort_dir(cohort.pk) / item.canonical_name).unlink()
    run = make_run(make_submission(alice, benchmark), cohort)

    with pytest.raises(staging.StagingError, match="missing"):
        staging.stage(run)
    assert not (storage.run_dir(run.pk) / "input").exists()


def test_a_symlinked_cohort_file_is_refused_even_with_the_right_hash(
    alice, benchmark, cohort, tmp_path
):
    item = cohort.items.get(position=3)
    path = storage.cohort_dir(cohort.pk) / item.canonical_name
    outside = tmp_path / "elsewhere.jpg"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)

    with pytest.raises(staging.StagingError, match="not a regular file"):
        staging.stage(make_run(make_submission(alice, benchmark), cohort))


def test_unstage_removes_the_links_and_keeps_the_cohort_and_the_run_folder(
    alice, benchmark, cohort
):
    staged = staging.stage(make_run(make_submission(alice, benchmark), cohort))

    staging.unstage(staged)

    assert not staged.input_dir.exists()
    assert staged.root.is_dir()
    for item in cohort.items.all():
        info = (storage.cohort_dir(cohort.pk) / item.canonical_name).stat()
        assert info.st_nlink == 1
    # The cohort stays intact and stageable.
    again = staging.stage(make_run(make_submission(alice, benchmark), cohort, try_number=1))
    assert again.rows == len(CLASSES)


def test_a_scored_run_records_its_positions_and_is_no_verification(alice, benchmark, cohort):
    staged = staging.stage(make_run(make_submission(alice, benchmark), cohort))

    assert staged.positions == list(range(len(CLASSES)))
    assert staged.verification is False
    assert staged.rewritten == 0


# Verification runs ------------------------------------------------------------------


def pixels(data: bytes) -> tuple[str, tuple[int, int], bytes]:
    with Image.open(io.BytesIO(data)) as image:
        return image.mode, image.size, image.tobytes()


def members_by_content(staged: staging.StagedRun, cohort: Cohort) -> list[CohortItem]:
    """Which cohort member each staged file shows (same pixels, or same bytes for files
    that are not JPEGs), in manifest order."""
    root = storage.cohort_dir(cohort.pk)

    def key(data: bytes) -> object:
        return pixels(data) if data.startswith(b"\xff\xd8\xff") else data

    by_content = {
        key((root / item.canonical_name).read_bytes()): item for item in cohort.items.all()
    }
    assert len(by_content) == cohort.items.count()  # every member tells itself apart
    return [
        by_content[key((staged.images_dir / name).read_bytes())] for name in staged.staged_names
    ]


@pytest.fixture
def jpeg_cohort(benchmark: Benchmark) -> Cohort:
    return make_cohort(benchmark, CLASSES, jpeg=True)


def test_a_verification_run_sees_the_members_in_a_fresh_order_under_new_bytes(
    alice, benchmark, jpeg_cohort
):
    staged = staging.stage(
        make_run(make_submission(alice, benchmark), jpeg_cohort), verification=True
    )

    shown = members_by_content(staged, jpeg_cohort)
    by_position = list(jpeg_cohort.items.order_by("position"))
    # 20 members: the fresh order is the cohort's with probability 1/20!, about 4e-19.
    assert shown != by_position
    assert sorted(shown, key=lambda item: item.position) == by_position
    assert staged.references == [item.reference_class for item in shown]
    assert staged.positions == [item.position for item in shown]
    assert staged.verification is True
    assert staged.rows == staged.rewritten == len(CLASSES)
    root = storage.cohort_dir(jpeg_cohort.pk)
    for item, name, reference in zip(shown, staged.staged_names, staged.references, strict=True):
        staged_data = (staged.images_dir / name).read_bytes()
        cohort_data = (root / item.canonical_name).read_bytes()
        assert staged_data != cohort_data
        assert hashlib.sha256(staged_data).hexdigest() != item.sha256
        assert pixels(staged_data) == pixels(cohort_data)
        assert democohort.decode_class_image(staged_data) == reference
        info = (staged.images_dir / name).lstat()
        assert info.st_nlink == 1  # a copy of its own, not a link to the cohort's file
        assert stat.S_IMODE(info.st_mode) == 0o644


def test_a_verification_runs_manifest_and_mapping_follow_its_order(alice, benchmark, jpeg_cohort):
    staged = staging.stage(
        make_run(make_submission(alice, benchmark), jpeg_cohort), verification=True
    )

    shown = members_by_content(staged, jpeg_cohort)
    rows = [line.split("\t") for line in staged.manifest.read_text().splitlines()]
    assert rows == [
        [rid, name] for rid, name in zip(staged.request_ids, staged.staged_names, strict=True)
    ]
    mapping = (staged.root / "private" / "mapping.tsv").read_text().splitlines()
    assert mapping == [
        f"{item.position}\t{rid}\t{name}\t{item.canonical_name}"
        for item, rid, name in zip(shown, staged.request_ids, staged.staged_names, strict=True)
    ]
    mounted_text = "\n".join(
        [str(path.relative_to(staged.input_dir)) for path in staged.input_dir.rglob("*")]
        + [staged.manifest.read_text()]
    )
    for item in shown:
        assert Path(item.canonical_name).stem not in mounted_text


def test_two_verification_runs_differ_in_order_names_and_bytes(alice, bob, benchmark, jpeg_cohort):
    first = staging.stage(
        make_run(make_submission(alice, benchmark), jpeg_cohort), verification=True
    )
    second = staging.stage(
        make_run(make_submission(bob, benchmark), jpeg_cohort), verification=True
    )

    assert first.positions != second.positions
    assert not set(first.staged_names) & set(second.staged_names)
    assert not set(first.request_ids) & set(second.request_ids)
    first_bytes = {
        position: (first.images_dir / name).read_bytes()
        for position, name in zip(first.positions, first.staged_names, strict=True)
    }
    for position, name in zip(second.positions, second.staged_names, strict=True):
        again = (second.images_dir / name).read_bytes()
        assert again != first_bytes[position]
        assert pixels(again) == pixels(first_bytes[position])


def test_verification_leaves_the_cohort_files_as_they_were(alice, benchmark, jpeg_cohort):
    root = storage.cohort_dir(jpeg_cohort.pk)
    guarded = root / jpeg_cohort.items.get(position=4).canonical_name
    guarded.chmod(0o640)
    before = {path: (path.read_bytes(), path.stat()) for path in root.rglob("*.jpg")}

    staged = staging.stage(
        make_run(make_submission(alice, benchmark), jpeg_cohort), verification=True
    )
    staging.unstage(staged)

    assert not staged.input_dir.exists()
    for path, (data, info) in before.items():
        now = path.stat()
        assert path.read_bytes() == data
        assert (now.st_ino, now.st_nlink, now.st_mode) == (info.st_ino, 1, info.st_mode)
    assert stat.S_IMODE(guarded.stat().st_mode) == 0o640


def test_members_that_are_not_jpegs_are_copied_unchanged_under_fresh_names(
    alice, benchmark, cohort
):
    # The fixture's members are short texts named .jpg: their bytes, not names, decide.
    staged = staging.stage(make_run(make_submission(alice, benchmark), cohort), verification=True)

    shown = members_by_content(staged, cohort)
    assert shown != list(cohort.items.order_by("position"))
    assert staged.rewritten == 0
    assert staged.references == [item.reference_class for item in shown]
    for item, name in zip(shown, staged.staged_names, strict=True):
        path = staged.images_dir / name
        assert hashlib.sha256(path.read_bytes()).hexdigest() == item.sha256
        assert path.lstat().st_nlink == 1
        assert stat.S_IMODE(path.lstat().st_mode) == 0o644
        assert name.endswith(".jpg")
        assert Path(item.canonical_name).stem not in name


def test_verification_still_refuses_a_tampered_member(alice, benchmark, jpeg_cohort):
    item = jpeg_cohort.items.get(position=11)
    path = storage.cohort_dir(jpeg_cohort.pk) / item.canonical_name
    # Still a valid JPEG that jpegtran would rewrite happily: only the hash can tell.
    path.write_bytes(democohort.encode_class_image(item.reference_class, random.Random(1)))
    run = make_run(make_submission(alice, benchmark), jpeg_cohort)

    with pytest.raises(staging.StagingError, match="no longer matches its frozen sha256") as err:
        staging.stage(run, verification=True)

    assert item.canonical_name not in str(err.value)
    assert not (storage.run_dir(run.pk) / "input").exists()


def test_verification_refuses_a_symlinked_member(alice, benchmark, jpeg_cohort, tmp_path):
    item = jpeg_cohort.items.get(position=2)
    path = storage.cohort_dir(jpeg_cohort.pk) / item.canonical_name
    outside = tmp_path / "elsewhere.jpg"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    run = make_run(make_submission(alice, benchmark), jpeg_cohort)

    with pytest.raises(staging.StagingError, match="not a regular file"):
        staging.stage(run, verification=True)
    assert not (storage.run_dir(run.pk) / "input").exists()


def test_a_member_jpegtran_cannot_rewrite_stops_the_verification(alice, benchmark, jpeg_cohort):
    # Damaged before import, so its frozen hash matches: the rewrite is what fails.
    item = jpeg_cohort.items.get(position=5)
    path = storage.cohort_dir(jpeg_cohort.pk) / item.canonical_name
    data = path.read_bytes()
    damaged = data[: len(data) * 2 // 3]
    path.write_bytes(damaged)
    CohortItem.objects.filter(pk=item.pk).update(sha256=hashlib.sha256(damaged).hexdigest())
    run = make_run(make_submission(alice, benchmark), jpeg_cohort)

    with pytest.raises(staging.StagingError, match="could not be rewritten") as err:
        staging.stage(run, verification=True)

    assert item.canonical_name not in str(err.value)
    assert not (storage.run_dir(run.pk) / "input").exists()


def test_a_scoring_host_without_jpegtran_cannot_verify(
    alice, benchmark, jpeg_cohort, monkeypatch, tmp_path
):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    run = make_run(make_submission(alice, benchmark), jpeg_cohort)
    leftover = storage.run_dir(run.pk) / "input" / "images"
    leftover.mkdir(parents=True)  # from a crashed earlier attempt

    with pytest.raises(staging.StagingError, match=r"jpegtran\) is not installed"):
        staging.stage(run, verification=True)

    assert not (storage.run_dir(run.pk) / "input").exists()
    # A scored run needs no jpegtran.
    assert staging.stage(run).rows == len(CLASSES)
