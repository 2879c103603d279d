"""Cohort staging: one fixed order, fresh names and ids per run, hard links, frozen hashes."""

from __future__ import annotations

import hashlib
import os
import stat
import uuid
from pathlib import Path

import pytest
from django.utils import timezone

from portal import storage
from portal.contests.models import Benchmark, Cohort, CohortItem
from portal.environments.models import Environment
from portal.submissions.models import AttemptLedger, Run, Submission
from scoring import staging


def make_cohort(benchmark: Benchmark, classes: list[int], *, kind: str = Cohort.OFFICIAL) -> Cohort:
    """A cohort whose files sit at ``cohort_dir(id)/canonical_name`` with real hashes.

    Positions run opposite to the names' order, so a test can tell position order from
    name or insertion order.
    """
    cohort = Cohort.objects.create(benchmark=benchmark, kind=kind)
    root = storage.cohort_dir(cohort.pk)
    for index, reference_class in enumerate(classes):
        name = f"part00/val_{index:08d}.jpg"
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
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
