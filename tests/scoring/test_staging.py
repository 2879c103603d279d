"""Cohort staging: one fixed order, fresh names and ids per run, fresh copies checked
against their hashes, one timestamp, and inputs that no run can tell apart by kind.

Verification runs: the same members in a fresh order, copied from the prepared set the
run took in its claim (``scoring.cohort.verifysets``, ``portal.submissions.pool``), which is
deleted once staged, whether or not staging succeeded.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import stat
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone
from PIL import Image

from portal.contests import democohort
from portal.contests.models import Benchmark, Cohort, CohortItem
from portal.core import storage
from portal.environments.models import Environment
from portal.submissions import pool
from portal.submissions.models import AttemptLedger, Run, Submission, VerificationSet
from scoring.cohort import rewrite, staging, verifysets


def make_cohort(
    benchmark: Benchmark,
    classes: list[int],
    *,
    kind: str = Cohort.OFFICIAL,
    jpeg: bool = False,
    suffix: str = ".jpg",
    seed: int | None = None,
) -> Cohort:
    """A cohort whose files sit at ``cohort_dir(id)/canonical_name`` with real hashes.

    Positions run opposite to the names' order, so a test can tell position order from
    name or insertion order. The files are short random texts named ``.jpg``, or with
    ``jpeg`` demo JPEGs that spell their class (``democohort``), no two alike.
    """
    cohort = Cohort.objects.create(benchmark=benchmark, kind=kind)
    root = storage.cohort_dir(cohort.pk)
    rng = random.Random(len(classes) if seed is None else seed)
    for index, reference_class in enumerate(classes):
        name = f"part00/val_{index:08d}{suffix}"
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
    kind: str = Submission.OFFICIAL,
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
        kind=kind,
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


def make_run(
    submission: Submission, cohort: Cohort, try_number: int = 1, *, purpose: str = Run.SCORE
) -> Run:
    return Run.objects.create(
        submission=submission,
        cohort=cohort,
        try_number=try_number,
        purpose=purpose,
        status=Run.STAGING,
    )


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def shown_members(staged: staging.StagedRun, cohort: Cohort) -> list[CohortItem]:
    """Which cohort member each staged file is (by its SHA-256), in manifest order."""
    by_sha = {item.sha256: item for item in cohort.items.all()}
    assert len(by_sha) == cohort.items.count()  # every member tells itself apart
    return [by_sha[sha((staged.images_dir / name).read_bytes())] for name in staged.staged_names]


CLASSES = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 383, 279, 502, 884, 197, 169, 399]


@pytest.fixture
def cohort(benchmark: Benchmark) -> Cohort:
    return make_cohort(benchmark, CLASSES)


@pytest.fixture
def jpeg_cohort(benchmark: Benchmark) -> Cohort:
    return make_cohort(benchmark, CLASSES, jpeg=True)


# What no run can tell apart -----------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """What a run's container can ``stat`` in its input, read before anything opens it
    (reading a file may move its atime)."""

    files: set[tuple[int, int, int, int, int]]  # images and manifest: type, mode, links, uid, gid
    folders: list[tuple[int, int, int, int, int]]  # the input folder, then its images folder
    times: dict[str, tuple[int, int]]  # (atime, mtime) of every file and folder, by name
    inodes: set[tuple[int, int]]
    entries: tuple[set[str], set[str]]  # what the input folder and images folder list


def signature(info: os.stat_result) -> tuple[int, int, int, int, int]:
    return (
        stat.S_IFMT(info.st_mode),
        stat.S_IMODE(info.st_mode),
        info.st_nlink,
        info.st_uid,
        info.st_gid,
    )


def look(staged: staging.StagedRun) -> Seen:
    files = [staged.images_dir / name for name in staged.staged_names] + [staged.manifest]
    folders = [staged.input_dir, staged.images_dir]
    infos = {path: path.lstat() for path in [*files, *folders]}
    entries = (
        {path.name for path in staged.input_dir.iterdir()},
        {path.name for path in staged.images_dir.iterdir()},
    )
    return Seen(
        files={signature(infos[path]) for path in files},
        folders=[signature(infos[path]) for path in folders],
        times={
            str(path.relative_to(staged.root)): (info.st_atime_ns, info.st_mtime_ns)
            for path, info in infos.items()
        },
        inodes={(info.st_dev, info.st_ino) for info in infos.values()},
        entries=entries,
    )


def inodes_under(*roots: Path) -> set[tuple[int, int]]:
    found = set()
    for root in roots:
        for path in [root, *root.rglob("*")]:
            info = path.lstat()
            found.add((info.st_dev, info.st_ino))
    return found


def take_prepared_set(run: Run) -> dict[int, str]:
    """Prepare a set of ``run``'s cohort and take it for ``run`` as its claim does; the
    SHA-256 of each of the set's files by position, read from the files themselves."""
    set_id = verifysets.prepare(int(run.cohort_id))
    assert set_id is not None
    with transaction.atomic():
        taken = pool.set_take(run)
    assert taken is not None
    folder = storage.verification_set_dir(int(taken.pk))
    return {
        int(path.name): sha(path.read_bytes())
        for path in folder.iterdir()
        if path.name != staging.SET_MEMBERS and not path.name.startswith(staging.CANARY_PREFIX)
    }


def staged_timed(
    stage: Callable[[], staging.StagedRun],
) -> tuple[staging.StagedRun, Seen, int, int]:
    before = time.time_ns()
    staged = stage()
    after = time.time_ns()
    return staged, look(staged), before, after


def test_no_kind_of_run_can_tell_its_inputs_from_another_kinds_by_stat(
    alice, bob, benchmark, jpeg_cohort, tmp_path
):
    practice_cohort = make_cohort(benchmark, CLASSES[:9], kind=Cohort.PRACTICE, jpeg=True)
    verification = make_run(
        make_submission(bob, benchmark, status=Submission.VERIFYING),
        jpeg_cohort,
        purpose=Run.VERIFY,
    )
    take_prepared_set(verification)
    # Everything a staged file must not share an inode with, taken while it all exists
    # (the set is deleted once the verification is staged, so that is staged last).
    originals = inodes_under(
        storage.cohort_dir(jpeg_cohort.pk),
        storage.cohort_dir(practice_cohort.pk),
        storage.verification_sets_dir(),
    )
    practice_submission = make_submission(alice, benchmark, kind=Submission.PRACTICE)
    slice_items = list(jpeg_cohort.items.order_by("-position")[:7])

    kinds = {
        "official": staged_timed(
            lambda: staging.stage(make_run(make_submission(alice, benchmark), jpeg_cohort))
        ),
        "practice": staged_timed(
            lambda: staging.stage(make_run(practice_submission, practice_cohort))
        ),
        "round slice": staged_timed(lambda: staging.stage_items(slice_items, tmp_path / "slice0")),
        "verification": staged_timed(lambda: staging.stage(verification, verification=True)),
    }

    uid, gid = os.getuid(), os.getgid()
    seen_all = [seen for _staged, seen, _before, _after in kinds.values()]
    for name, (staged, seen, before, after) in kinds.items():
        assert seen.files == {(stat.S_IFREG, 0o644, 1, uid, gid)}, name
        assert seen.folders == seen_all[0].folders, name
        assert [folder[:2] for folder in seen.folders] == [(stat.S_IFDIR, 0o755)] * 2, name
        # One fixed timestamp, atime and mtime alike: never the moment of staging.
        stamps = {mtime for _atime, mtime in seen.times.values()}
        assert stamps == {staging.STAMP_NS}, name
        stamp = staging.STAMP_NS
        assert not before <= stamp <= after, name
        assert [path for path, (atime, _m) in seen.times.items() if atime != stamp] == [], name
        assert not seen.inodes & originals, name
        assert seen.entries == ({"images", "manifest.tsv"}, set(staged.staged_names)), name
    for name, (_staged, seen, _before, _after) in kinds.items():
        for other, (_other_staged, other_seen, _b, _a) in kinds.items():
            if other != name:
                assert not seen.inodes & other_seen.inodes, (name, other)
    official, verified = kinds["official"][0], kinds["verification"][0]
    assert verified.rows == official.rows == len(CLASSES)
    assert verified.rewritten == len(CLASSES)


def with_metadata(cohort: Cohort) -> None:
    """Give every member of ``cohort`` what a camera or a data set leaves in a file (EXIF,
    an ICC profile, a comment) and restart markers, its recorded hash updated."""
    exif = Image.Exif()
    exif[0x010E] = "val_00000042"
    for item in cohort.items.all():
        path = storage.cohort_dir(cohort.pk) / item.canonical_name
        buffer = io.BytesIO()
        with Image.open(path) as image:
            image.save(
                buffer,
                format="JPEG",
                quality=90,
                exif=exif.tobytes(),
                icc_profile=b"\1" * 300,
                comment=b"taken 2012-05-01",
                restart_marker_blocks=2,
            )
        path.write_bytes(buffer.getvalue())
        item.sha256 = sha(buffer.getvalue())
        item.save(update_fields=["sha256"])


def segments(data: bytes) -> tuple[tuple[int, bytes], ...]:
    """Each header segment's marker, with an APPn's tag and a DRI's interval."""
    found = []
    for marker, start, end in rewrite._segments(data):
        if 0xE0 <= marker <= 0xEF:
            found.append((marker, data[start + 4 : start + 9]))
        elif marker == 0xDD:
            found.append((marker, data[start + 4 : end]))
        else:
            found.append((marker, b""))
    return tuple(found)


@dataclass(frozen=True)
class Looks:
    headers: frozenset[tuple[tuple[int, bytes], ...]]
    stamps: frozenset[int]
    rows_follow_names: bool
    suffixes: frozenset[str]
    entries: frozenset[str]


def distinguisher(staged: staging.StagedRun) -> Looks:
    """What a program inside the container could key "official or verification" on:
    its files' header segments (APPn and COM segments, restart intervals, their order),
    their timestamps, whether the rows follow the names' order, and what lies beside."""
    files = [staged.images_dir / name for name in staged.staged_names]
    return Looks(
        headers=frozenset(segments(path.read_bytes()) for path in files),
        stamps=frozenset(path.stat().st_mtime_ns for path in [*files, staged.manifest]),
        rows_follow_names=staged.staged_names == sorted(staged.staged_names),
        suffixes=frozenset(path.suffix for path in files),
        entries=frozenset(path.name for path in staged.input_dir.iterdir()),
    )


def test_a_program_cannot_tell_an_official_staging_from_a_verification_by_its_files(
    alice, bob, benchmark, jpeg_cohort
):
    """Hostile: files that carried metadata and restart markers, staged for an official
    run and for a verification, look alike to everything but their pictures."""
    with_metadata(jpeg_cohort)
    verification = make_run(
        make_submission(bob, benchmark, status=Submission.VERIFYING),
        jpeg_cohort,
        purpose=Run.VERIFY,
    )
    take_prepared_set(verification)

    official = staging.stage(make_run(make_submission(alice, benchmark), jpeg_cohort))
    official_seen = distinguisher(official)
    verified = staging.stage(verification, verification=True)

    assert distinguisher(verified) == official_seen
    assert verified.rewritten == len(CLASSES)
    (shape,) = official_seen.headers  # one header shape: no marker of metadata left
    assert [m for m, _ in shape if 0xE1 <= m <= 0xEF or m == 0xFE] == []
    assert (0xDD, b"\x00\x02") in shape  # the originals' restart interval, kept by both
    assert official_seen.stamps == {staging.STAMP_NS}
    for name in official.staged_names:
        assert b"val_00000042" not in (official.images_dir / name).read_bytes()


def test_a_staged_file_is_a_copy_of_its_own_with_the_frozen_bytes(alice, benchmark, cohort):
    staged = staging.stage(make_run(make_submission(alice, benchmark), cohort))

    cohort_root = storage.cohort_dir(cohort.pk)
    for item, name in zip(shown_members(staged, cohort), staged.staged_names, strict=True):
        mine = (staged.images_dir / name).lstat()
        frozen = (cohort_root / item.canonical_name).lstat()
        assert stat.S_ISREG(mine.st_mode)
        assert (mine.st_nlink, stat.S_IMODE(mine.st_mode)) == (1, 0o644)
        assert (mine.st_dev, mine.st_ino) != (frozen.st_dev, frozen.st_ino)
        assert frozen.st_nlink == 1  # nothing links to the cohort's file
    assert stat.S_IMODE(staged.manifest.stat().st_mode) == 0o644


# Scored runs (official and practice) -----------------------------------------------------


def test_every_run_sees_the_cohort_in_a_fresh_order_under_fresh_names(
    alice, bob, benchmark, cohort
):
    runs = [
        staging.stage(make_run(make_submission(entrant, benchmark), cohort))
        for entrant in (alice, bob, alice, bob)
    ]

    by_position = list(cohort.items.order_by("position"))
    orders = set()
    for staged in runs:
        shown = shown_members(staged, cohort)
        assert sorted(shown, key=lambda item: item.position) == by_position
        assert staged.references == [item.reference_class for item in shown]
        assert staged.positions == [item.position for item in shown]
        assert staged.rows == len(CLASSES)
        assert len(set(staged.request_ids)) == len(CLASSES)
        orders.add(tuple(staged.positions))
    # The row of an image says nothing: four runs of 20 members all in one order would
    # happen once in 20!^3 (about 10^55) draws.
    assert len(orders) > 1
    first, second = runs[0], runs[1]
    assert not set(first.staged_names) & set(second.staged_names)
    assert not set(first.request_ids) & set(second.request_ids)


def test_round_slices_see_their_items_in_the_order_given(benchmark, cohort, tmp_path):
    items = list(cohort.items.order_by("?")[:8])

    staged = staging.stage_items(items, tmp_path / "slice3")

    assert shown_members(staged, cohort) == items
    assert staged.positions == [item.position for item in items]
    assert staged.references == [item.reference_class for item in items]
    assert staged.input_dir == tmp_path / "slice3" / "input"


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
    run = make_run(make_submission(alice, benchmark), cohort)

    with pytest.raises(staging.StagingError, match="not a regular file"):
        staging.stage(run)
    assert not (storage.run_dir(run.pk) / "input").exists()


def test_a_leftover_input_of_a_crashed_attempt_is_replaced(alice, benchmark, cohort):
    run = make_run(make_submission(alice, benchmark), cohort)
    leftover = storage.run_dir(run.pk) / "input" / "images"
    leftover.mkdir(parents=True)
    (leftover / "stale.jpg").write_bytes(b"from the attempt before")

    staged = staging.stage(run)

    assert {path.name for path in staged.images_dir.iterdir()} == set(staged.staged_names)


def test_unstage_removes_the_copies_and_keeps_the_cohort_and_the_run_folder(
    alice, benchmark, cohort
):
    cohort_root = storage.cohort_dir(cohort.pk)
    before = {
        item.canonical_name: (cohort_root / item.canonical_name).stat().st_ino
        for item in cohort.items.all()
    }
    staged = staging.stage(make_run(make_submission(alice, benchmark), cohort))

    staging.unstage(staged)

    assert not staged.input_dir.exists()
    assert staged.root.is_dir()
    assert (staged.root / "private" / "mapping.tsv").is_file()
    for item in cohort.items.all():
        path = cohort_root / item.canonical_name
        assert (path.stat().st_ino, path.stat().st_nlink) == (before[item.canonical_name], 1)
        assert sha(path.read_bytes()) == item.sha256
    # The cohort stays intact and stageable.
    again = staging.stage(make_run(make_submission(alice, benchmark), cohort))
    assert again.rows == len(CLASSES)


def test_a_scored_run_records_its_positions_and_is_no_verification(alice, benchmark, cohort):
    staged = staging.stage(make_run(make_submission(alice, benchmark), cohort))

    assert sorted(staged.positions) == list(range(len(CLASSES)))
    assert staged.verification is False
    assert staged.rewritten == 0


# Verification runs ------------------------------------------------------------------


def size(data: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return image.size


def verification_run(entrant, benchmark: Benchmark, cohort: Cohort) -> Run:
    return make_run(
        make_submission(entrant, benchmark, status=Submission.VERIFYING),
        cohort,
        purpose=Run.VERIFY,
    )


def test_a_verification_run_sees_its_set_in_a_fresh_order_under_new_bytes(
    alice, benchmark, jpeg_cohort
):
    run = verification_run(alice, benchmark, jpeg_cohort)
    set_files = take_prepared_set(run)

    staged = staging.stage(run, verification=True)

    by_position = {item.position: item for item in jpeg_cohort.items.all()}
    # 20 members: the fresh order is the cohort's with probability 1/20!, about 4e-19.
    assert staged.positions != sorted(staged.positions)
    assert sorted(staged.positions) == sorted(by_position)
    assert staged.references == [by_position[p].reference_class for p in staged.positions]
    assert staged.verification is True
    assert staged.rows == staged.rewritten == len(CLASSES)
    cohort_root = storage.cohort_dir(jpeg_cohort.pk)
    for position, name in zip(staged.positions, staged.staged_names, strict=True):
        data = (staged.images_dir / name).read_bytes()
        frozen = (cohort_root / by_position[position].canonical_name).read_bytes()
        assert sha(data) == set_files[position]  # this member's file of the set
        assert data != frozen
        assert size(data) == size(frozen)


def test_a_verification_runs_manifest_and_mapping_follow_its_order(alice, benchmark, jpeg_cohort):
    run = verification_run(alice, benchmark, jpeg_cohort)
    set_files = take_prepared_set(run)

    staged = staging.stage(run, verification=True)

    rows = [line.split("\t") for line in staged.manifest.read_text().splitlines()]
    assert rows == [
        [rid, name] for rid, name in zip(staged.request_ids, staged.staged_names, strict=True)
    ]
    by_position = {item.position: item for item in jpeg_cohort.items.all()}
    mapping = (staged.root / "private" / "mapping.tsv").read_text().splitlines()
    assert mapping == [
        f"{position}\t{rid}\t{name}\t{by_position[position].canonical_name}"
        for position, rid, name in zip(
            staged.positions, staged.request_ids, staged.staged_names, strict=True
        )
    ]
    shown = [sha((staged.images_dir / name).read_bytes()) for name in staged.staged_names]
    assert shown == [set_files[position] for position in staged.positions]
    mounted_text = "\n".join(
        [str(path.relative_to(staged.input_dir)) for path in staged.input_dir.rglob("*")]
        + [staged.manifest.read_text()]
    )
    for item in by_position.values():
        assert Path(item.canonical_name).stem not in mounted_text


def test_two_verification_runs_differ_in_order_names_and_bytes(alice, bob, benchmark, jpeg_cohort):
    first_run = verification_run(alice, benchmark, jpeg_cohort)
    second_run = verification_run(bob, benchmark, jpeg_cohort)
    take_prepared_set(first_run)
    take_prepared_set(second_run)

    first = staging.stage(first_run, verification=True)
    second = staging.stage(second_run, verification=True)

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
        assert size(again) == size(first_bytes[position])


def test_verification_leaves_the_cohort_files_as_they_were(alice, benchmark, jpeg_cohort):
    root = storage.cohort_dir(jpeg_cohort.pk)
    guarded = root / jpeg_cohort.items.get(position=4).canonical_name
    guarded.chmod(0o640)

    def frozen() -> dict[Path, tuple[bytes, int, int, int, int]]:
        state = {}
        for path in sorted(root.rglob("*.jpg")):
            info = path.stat()
            state[path] = (
                path.read_bytes(),
                info.st_ino,
                info.st_nlink,
                info.st_mode,
                info.st_mtime_ns,
            )
        return state

    before = frozen()
    run = verification_run(alice, benchmark, jpeg_cohort)
    take_prepared_set(run)
    staged = staging.stage(run, verification=True)
    staging.unstage(staged)

    assert not staged.input_dir.exists()
    assert frozen() == before
    assert all(nlink == 1 for _data, _ino, nlink, _mode, _mtime in before.values())
    assert stat.S_IMODE(guarded.stat().st_mode) == 0o640


def test_members_that_are_not_jpegs_are_copied_unchanged_under_fresh_names(
    alice, benchmark, cohort
):
    # The fixture's members are short texts named .jpg: their bytes, not names, decide.
    run = verification_run(alice, benchmark, cohort)
    take_prepared_set(run)

    staged = staging.stage(run, verification=True)

    shown = shown_members(staged, cohort)
    assert shown != list(cohort.items.order_by("position"))
    assert staged.positions == [item.position for item in shown]
    assert staged.rewritten == 0
    assert staged.references == [item.reference_class for item in shown]
    for item, name in zip(shown, staged.staged_names, strict=True):
        assert name.endswith(".jpg")
        assert Path(item.canonical_name).stem not in name


def set_gone(set_id: int) -> bool:
    return (
        not storage.verification_set_dir(set_id).exists()
        and not VerificationSet.objects.filter(pk=set_id).exists()
    )


def test_a_staged_set_is_deleted_and_the_rest_of_the_pool_is_left(alice, benchmark, jpeg_cohort):
    run = verification_run(alice, benchmark, jpeg_cohort)
    take_prepared_set(run)
    taken = pool.set_of_run(run.pk)
    assert taken is not None
    spare = verifysets.prepare(jpeg_cohort.pk)
    assert spare is not None

    staged = staging.stage(run, verification=True)

    assert staged.rows == len(CLASSES)
    assert set_gone(taken.pk)
    assert VerificationSet.objects.get(pk=spare).status == VerificationSet.READY
    assert (storage.verification_set_dir(spare) / staging.SET_MEMBERS).is_file()


def test_a_verification_run_without_a_set_of_its_own_stops(alice, bob, benchmark, jpeg_cohort):
    # Sets ready in the pool, and one taken by another run: none is this run's.
    other = verification_run(bob, benchmark, jpeg_cohort)
    take_prepared_set(other)
    ready = verifysets.prepare(jpeg_cohort.pk)
    assert ready is not None
    run = verification_run(alice, benchmark, jpeg_cohort)

    with pytest.raises(staging.StagingError, match="missing"):
        staging.stage(run, verification=True)

    assert not (storage.run_dir(run.pk) / "input").exists()
    assert VerificationSet.objects.get(pk=ready).status == VerificationSet.READY
    others = pool.set_of_run(other.pk)
    assert others is not None
    assert (storage.verification_set_dir(others.pk) / staging.SET_MEMBERS).is_file()
    # A scored run on the same cohort needs no set and leaves the pool alone.
    assert staging.stage(make_run(make_submission(alice, benchmark), jpeg_cohort)).rows == 20
    assert VerificationSet.objects.filter(status=VerificationSet.READY).count() == 1


def _tamper(folder: Path) -> None:
    # Still a valid JPEG: only the hash the set recorded can tell.
    (folder / "11").write_bytes(democohort.encode_class_image(7, random.Random(1)))


def _unlink(folder: Path) -> None:
    (folder / "0").unlink()


def _symlink(folder: Path) -> None:
    path = folder / "2"
    outside = folder.parent / "elsewhere"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)


def _members_short(folder: Path) -> None:
    lines = (folder / staging.SET_MEMBERS).read_text().splitlines()
    (folder / staging.SET_MEMBERS).write_text("".join(f"{line}\n" for line in lines[:-1]))


def _members_foreign(folder: Path) -> None:
    with (folder / staging.SET_MEMBERS).open("a") as members:
        members.write(f"{len(CLASSES)}\t{'0' * 64}\n")


def _members_garbled(folder: Path) -> None:
    (folder / staging.SET_MEMBERS).write_text("0 1 2\n")


def _members_missing(folder: Path) -> None:
    (folder / staging.SET_MEMBERS).unlink()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_tamper, "no longer matches"),
        (_unlink, "missing"),
        (_symlink, "not a regular file"),
        (_members_short, "does not match its cohort"),
        (_members_foreign, "does not match its cohort"),
        (_members_garbled, "could not be read"),
        (_members_missing, "could not be read"),
    ],
)
def test_a_damaged_set_stops_the_verification_and_is_deleted(
    alice, benchmark, jpeg_cohort, damage, reason
):
    run = verification_run(alice, benchmark, jpeg_cohort)
    take_prepared_set(run)
    taken = pool.set_of_run(run.pk)
    assert taken is not None
    damage(storage.verification_set_dir(taken.pk))

    with pytest.raises(staging.StagingError, match=reason) as err:
        staging.stage(run, verification=True)

    for item in jpeg_cohort.items.all():
        assert Path(item.canonical_name).stem not in str(err.value)
    assert not (storage.run_dir(run.pk) / "input").exists()
    assert set_gone(taken.pk)
    # A retry of the run takes a fresh set; the one it had is not there to reuse.
    with pytest.raises(staging.StagingError, match="missing"):
        staging.stage(run, verification=True)


# Canaries -----------------------------------------------------------------------------

# A canary pool larger than half the cohort, named otherwise than its members.
CANARY_CLASSES = [500 + index for index in range(15)]


@pytest.fixture
def canary_cohort(benchmark: Benchmark) -> Cohort:
    return make_cohort(
        benchmark, CANARY_CLASSES, kind=Cohort.CANARY, jpeg=True, suffix=".JPEG", seed=99
    )


def shown_items(staged: staging.StagedRun, *cohorts: Cohort) -> list[CohortItem]:
    """Which item (of any of ``cohorts``) each staged row is, by its position and flag."""
    members = {item.position: item for item in cohorts[0].items.all()}
    canaries = {item.position: item for cohort in cohorts[1:] for item in cohort.items.all()}
    flags = staged.canaries or [False] * staged.rows
    return [
        (canaries if canary else members)[position]
        for position, canary in zip(staged.positions, flags, strict=True)
    ]


def test_a_verification_carries_half_its_rows_as_canaries_that_look_like_members(
    alice, benchmark, jpeg_cohort, canary_cohort
):
    """Hostile: a program that keys on the files' headers or names to tell the canaries
    (images no table holds) from the members it could look up finds nothing."""
    run = make_run(
        make_submission(alice, benchmark, status=Submission.VERIFYING),
        jpeg_cohort,
        purpose=Run.VERIFY,
    )
    take_prepared_set(run)

    staged = staging.stage(run, verification=True)

    assert staged.rows == len(CLASSES)
    assert sum(staged.canaries) == len(CLASSES) // 2
    assert staged.rewritten == len(CLASSES)  # canaries re-encoded like the members
    shown = shown_items(staged, jpeg_cohort, canary_cohort)
    canaries = [item for item, flag in zip(shown, staged.canaries, strict=True) if flag]
    members = [item for item, flag in zip(shown, staged.canaries, strict=True) if not flag]
    assert {item.cohort_id for item in canaries} == {canary_cohort.pk}
    assert len(set(canaries)) == len(canaries) and len(set(members)) == len(members)
    assert {item.cohort_id for item in members} == {jpeg_cohort.pk}
    assert staged.references == [item.reference_class for item in shown]
    paths = [staged.images_dir / name for name in staged.staged_names]
    looks = {
        flag: {
            (segments(path.read_bytes()), path.suffix)
            for path, f in zip(paths, staged.canaries, strict=True)
            if f == flag
        }
        for flag in (True, False)
    }
    assert looks[True] == looks[False] == {(next(iter(looks[False]))[0], ".jpg")}
    frozen = {
        sha(cohort_path.read_bytes())
        for cohort_path in storage.cohort_dir(canary_cohort.pk).rglob("*.JPEG")
    }
    assert not {sha(path.read_bytes()) for path in paths} & frozen  # re-encoded
    mapping = (storage.run_private_dir(run.pk) / storage.RUN_MAPPING).read_text().splitlines()
    assert sum(line.startswith("canary:") for line in mapping) == len(CLASSES) // 2


def test_a_final_run_carries_frozen_canaries_in_members_places(
    alice, benchmark, jpeg_cohort, canary_cohort
):
    run = make_run(
        make_submission(alice, benchmark, status=Submission.PASSED), jpeg_cohort, purpose=Run.FINAL
    )

    staged = staging.stage(run, canaries=True)

    assert staged.rows == len(CLASSES) and sum(staged.canaries) == len(CLASSES) // 2
    shown = shown_items(staged, jpeg_cohort, canary_cohort)
    for item, name in zip(shown, staged.staged_names, strict=True):
        frozen = storage.cohort_dir(item.cohort_id) / item.canonical_name
        assert (staged.images_dir / name).read_bytes() == frozen.read_bytes()
        assert name.endswith(".jpg")
    assert staged.references == [item.reference_class for item in shown]


def test_a_scored_run_never_carries_canaries(alice, benchmark, jpeg_cohort, canary_cohort):
    staged = staging.stage(make_run(make_submission(alice, benchmark), jpeg_cohort))

    assert staged.canaries == []
    assert sorted(staged.positions) == list(range(len(CLASSES)))


def test_without_a_canary_pool_a_verification_carries_none(alice, benchmark, jpeg_cohort):
    run = make_run(
        make_submission(alice, benchmark, status=Submission.VERIFYING),
        jpeg_cohort,
        purpose=Run.VERIFY,
    )
    take_prepared_set(run)

    staged = staging.stage(run, verification=True)

    assert staged.canaries == []
    assert sorted(staged.positions) == list(range(len(CLASSES)))


def test_a_set_whose_canary_pool_was_imported_again_stops_the_verification(
    alice, benchmark, jpeg_cohort, canary_cohort
):
    """The set's canaries were answered by the pool it was prepared from: a pool imported
    again (other images at the same positions) would judge them against other answers."""
    run = make_run(
        make_submission(alice, benchmark, status=Submission.VERIFYING),
        jpeg_cohort,
        purpose=Run.VERIFY,
    )
    take_prepared_set(run)
    canary_cohort.delete()
    make_cohort(benchmark, [c + 1 for c in CANARY_CLASSES], kind=Cohort.CANARY, jpeg=True, seed=98)

    with pytest.raises(staging.StagingError, match="does not match its cohort"):
        staging.stage(run, verification=True)
    assert not VerificationSet.objects.exists()  # deleted whatever happened
