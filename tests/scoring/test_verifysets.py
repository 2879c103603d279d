"""The pool of prepared verification sets: what a set holds, how a pool fills without
overfilling, who takes a set, what the sweep deletes, which cohorts keep a pool, and the
claim that steps over a verification until a set of its cohort is ready."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
import random
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.utils import timezone
from PIL import Image

from portal.contests.models import Benchmark, Cohort, CohortItem
from portal.core import jobs, storage
from portal.hosts.leases import machine_lease_acquire, machine_lease_release
from portal.submissions import pool, waiting
from portal.submissions.models import Run, Submission, VerificationSet
from portal.submissions.runs import run_claim_next
from scoring import tasks
from scoring.cohort import rewrite, staging, verifysets
from scoring.host import machine
from tests import factories
from tests.scoring.test_staging import (
    CLASSES,
    make_cohort,
    make_submission,
    verification_run,
)
from tests.submissions.test_dispatch import another_host, needs_postgresql

LEASE_S = 600


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def size(data: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return image.size


@pytest.fixture
def contest(benchmark: Benchmark) -> Benchmark:
    """The open benchmark, verifying its top 3: its official cohort keeps a pool."""
    benchmark.verify_top = 3
    benchmark.save(update_fields=["verify_top"])
    return benchmark


@pytest.fixture
def jpeg_cohort(contest: Benchmark) -> Cohort:
    return make_cohort(contest, CLASSES, jpeg=True)


def set_dir(set_id: int) -> Path:
    return storage.verification_set_dir(set_id)


def nothing_prepared() -> bool:
    """No set row and no set folder at all."""
    root = storage.verification_sets_dir()
    return not VerificationSet.objects.exists() and not (root.is_dir() and any(root.iterdir()))


def take(run: Run) -> VerificationSet | None:
    with transaction.atomic():  # as the run's claim does
        return pool.set_take(run)


# What a set holds -------------------------------------------------------------------------


def test_a_set_holds_every_member_re_encoded_with_the_hashes_it_records(jpeg_cohort):
    set_id = verifysets.prepare(jpeg_cohort.pk)

    assert set_id is not None
    folder = set_dir(set_id)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = {path.name: path for path in folder.iterdir()}
    assert set(files) == {str(position) for position in range(len(CLASSES))} | {"members.tsv"}
    recorded = [line.split("\t") for line in (folder / "members.tsv").read_text().splitlines()]
    assert recorded == [
        [str(position), sha(files[str(position)].read_bytes())] for position in range(len(CLASSES))
    ]
    cohort_root = storage.cohort_dir(jpeg_cohort.pk)
    for item in jpeg_cohort.items.all():
        path = files[str(item.position)]
        assert stat.S_ISREG(path.lstat().st_mode)
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600
        data = path.read_bytes()
        frozen = (cohort_root / item.canonical_name).read_bytes()
        assert data != frozen
        assert rewrite.is_jpeg(data)
        assert size(data) == size(frozen)
    row = VerificationSet.objects.get(pk=set_id)
    assert (row.status, row.members, row.perturbed, row.run_id) == (
        VerificationSet.READY,
        len(CLASSES),
        len(CLASSES),
        None,
    )
    assert row.ready_at is not None
    assert row.prepare_ms is not None and row.prepare_ms > 0


def test_members_that_are_not_jpegs_are_kept_as_frozen(jpeg_cohort):
    cohort_root = storage.cohort_dir(jpeg_cohort.pk)
    texts = {2, 9, 17}
    for item in jpeg_cohort.items.filter(position__in=texts):
        data = f"member {item.position}, not a JPEG\n".encode()
        (cohort_root / item.canonical_name).write_bytes(data)
        CohortItem.objects.filter(pk=item.pk).update(sha256=sha(data))

    set_id = verifysets.prepare(jpeg_cohort.pk)

    assert set_id is not None
    row = VerificationSet.objects.get(pk=set_id)
    assert (row.members, row.perturbed) == (len(CLASSES), len(CLASSES) - len(texts))
    for item in jpeg_cohort.items.all():
        data = (set_dir(set_id) / str(item.position)).read_bytes()
        assert (sha(data) == item.sha256) == (item.position in texts)


def test_no_two_sets_of_a_cohort_share_a_file(jpeg_cohort):
    first = verifysets.prepare(jpeg_cohort.pk)
    second = verifysets.prepare(jpeg_cohort.pk)

    assert first is not None and second is not None and first != second
    for position in range(len(CLASSES)):
        one = (set_dir(first) / str(position)).read_bytes()
        other = (set_dir(second) / str(position)).read_bytes()
        assert one != other


# A failure leaves nothing ---------------------------------------------------------------


def _tamper(cohort: Cohort, monkeypatch: pytest.MonkeyPatch) -> None:
    item = cohort.items.get(position=7)
    (storage.cohort_dir(cohort.pk) / item.canonical_name).write_bytes(b"tampered")


def _no_jpegtran(cohort: Cohort, monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> str:
        raise rewrite.JpegtranMissing("jpegtran is not installed on this host")

    monkeypatch.setattr(rewrite, "find_jpegtran", missing)


def _one_member_will_not_re_encode(cohort: Cohort, monkeypatch: pytest.MonkeyPatch) -> None:
    item = cohort.items.get(position=13)
    stubborn = (storage.cohort_dir(cohort.pk) / item.canonical_name).read_bytes()
    real = rewrite.rewrite_jpeg_data

    def rewrite_jpeg_data(data: bytes, rng: random.Random, *, jpegtran: str | None = None) -> bytes:
        if data == stubborn:
            raise rewrite.RewriteError("jpegtran warned: premature end of data")
        return real(data, rng, jpegtran=jpegtran)

    monkeypatch.setattr(rewrite, "rewrite_jpeg_data", rewrite_jpeg_data)


def _symlinked(cohort: Cohort, monkeypatch: pytest.MonkeyPatch) -> None:
    item = cohort.items.get(position=3)
    path = storage.cohort_dir(cohort.pk) / item.canonical_name
    outside = storage.cohort_dir(cohort.pk).parent / "elsewhere.jpg"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)


@pytest.mark.parametrize("failure", [_tamper, _no_jpegtran, _symlinked])
def test_a_set_that_cannot_be_prepared_leaves_no_folder_and_no_row(
    jpeg_cohort, monkeypatch, caplog, failure: Callable[[Cohort, pytest.MonkeyPatch], None]
):
    failure(jpeg_cohort, monkeypatch)

    assert verifysets.fill(jpeg_cohort.pk) == 0

    assert nothing_prepared()
    assert "could not be prepared" in caplog.text  # for staff


def test_a_member_no_re_encode_can_serve_goes_as_frozen_and_the_set_is_made(
    jpeg_cohort, monkeypatch, caplog
):
    _one_member_will_not_re_encode(jpeg_cohort, monkeypatch)

    set_id = verifysets.prepare(jpeg_cohort.pk)

    assert set_id is not None
    prepared = VerificationSet.objects.get(pk=set_id)
    assert prepared.status == VerificationSet.READY
    assert (prepared.members, prepared.perturbed) == (
        jpeg_cohort.items.count(),
        prepared.members - 1,
    )
    item = jpeg_cohort.items.get(position=13)
    frozen = (storage.cohort_dir(jpeg_cohort.pk) / item.canonical_name).read_bytes()
    assert (storage.verification_set_dir(set_id) / "13").read_bytes() == frozen
    assert "kept as frozen" in caplog.text  # for staff


def test_a_cohort_without_members_or_gone_gets_no_set(contest):
    empty = Cohort.objects.create(benchmark=contest, kind=Cohort.OFFICIAL)

    assert verifysets.prepare(empty.pk) is None
    assert verifysets.prepare(empty.pk + 1000) is None
    assert nothing_prepared()


# Filling a pool ---------------------------------------------------------------------------


def test_a_fill_stops_at_the_pools_size_and_replaces_what_was_taken(alice, contest, settings, sent):
    settings.PODIUM_VERIFY_POOL = 2
    cohort = make_cohort(contest, CLASSES[:5], jpeg=True)

    assert verifysets.fill(cohort.pk) == 2
    assert verifysets.fill(cohort.pk) == 0
    ready = VerificationSet.objects.filter(cohort=cohort, status=VerificationSet.READY)
    assert ready.count() == 2
    assert len(list(storage.verification_sets_dir().iterdir())) == 2

    assert take(verification_run(alice, contest, cohort)) is not None
    assert verifysets.fill(cohort.pk) == 1
    assert ready.count() == 2
    assert VerificationSet.objects.filter(cohort=cohort).count() == 3


def test_a_set_still_being_prepared_counts_towards_the_pool(contest, settings):
    settings.PODIUM_VERIFY_POOL = 2
    cohort = make_cohort(contest, CLASSES[:5], jpeg=True)
    assert pool.set_begin(cohort.pk) is not None
    assert pool.set_begin(cohort.pk) is not None

    assert pool.set_begin(cohort.pk) is None
    assert verifysets.fill(cohort.pk) == 0
    settings.PODIUM_VERIFY_POOL = 3
    assert verifysets.fill(cohort.pk) == 1


@pytest.mark.django_db(transaction=True)
def test_two_fills_at_once_never_overfill_a_pool(benchmark, settings, sent, monkeypatch):
    needs_postgresql()
    settings.PODIUM_VERIFY_POOL = 2
    cohort = make_cohort(benchmark, CLASSES[:4], jpeg=True)
    assert verifysets.prepare(cohort.pk) is not None  # room for one more
    counted, go_on = threading.Event(), threading.Event()
    real_create = VerificationSet.objects.create

    def create(**fields: object) -> VerificationSet:
        if threading.current_thread().name == "first":
            counted.set()  # it counted one set and is about to add the second
            go_on.wait(timeout=30)
        return real_create(**fields)

    monkeypatch.setattr(VerificationSet.objects, "create", create)
    made: dict[str, int | BaseException] = {}

    def fill() -> None:
        try:
            made[threading.current_thread().name] = verifysets.fill(cohort.pk)
        except BaseException as exc:  # reported by the main thread
            made[threading.current_thread().name] = exc
        finally:
            connection.close()

    first = threading.Thread(target=fill, name="first")
    second = threading.Thread(target=fill, name="second")
    first.start()
    try:
        assert counted.wait(timeout=30)
        second.start()
        second.join(timeout=1.0)
        # It waits for the first to add its set, instead of counting the same one set.
        assert second.is_alive()
    finally:
        go_on.set()
        first.join(timeout=30)
        if second.ident is not None:
            second.join(timeout=30)

    assert made == {"first": 1, "second": 0}
    assert VerificationSet.objects.filter(cohort=cohort).count() == 2
    assert len(list(storage.verification_sets_dir().iterdir())) == 2


def test_a_pause_comes_before_each_chunk_of_members_and_nothing_is_re_encoded_meanwhile(
    jpeg_cohort, monkeypatch
):
    monkeypatch.setattr(verifysets, "CHUNK_PER_THREAD", 1)
    monkeypatch.setattr(staging, "threads_for", lambda members: 3)
    written_at_pause: list[int] = []

    def pause() -> None:
        folders = list(storage.verification_sets_dir().iterdir())
        written_at_pause.append(sum(1 for _ in folders[0].iterdir()) if folders else 0)

    set_id = verifysets.prepare(jpeg_cohort.pk, pause)

    assert set_id is not None
    chunks = -(-len(CLASSES) // 3)
    assert written_at_pause == [min(3 * n, len(CLASSES)) for n in range(chunks)]


@pytest.mark.django_db(transaction=True)
def test_the_pool_fill_re_encodes_nothing_while_a_score_holds_its_machine(
    benchmark, settings, monkeypatch
):
    """One machine for builds and scores (``make run``, a stack on one host): the set a
    verification run took is replaced only once that run has released the machine, so
    re-encoding never shares the CPUs with a timed run."""
    settings.PODIUM_VERIFY_POOL = 1
    settings.PODIUM_HOST_NAME = "solo"
    monkeypatch.setattr(machine, "_engine_id", lambda: "ONE")
    monkeypatch.setattr(machine, "LOCK_POLL_S", 0.05)
    cohort = make_cohort(benchmark, CLASSES[:4], jpeg=True)
    lock = machine.machine_key()
    assert machine_lease_acquire(host=lock, holder="solo:score", lease_s=60)
    done: list[object] = []

    def fill() -> None:
        try:
            tasks.verification_pool_fill(cohort.pk)
            done.append("done")
        except BaseException as exc:  # reported by the main thread
            done.append(exc)
        finally:
            connection.close()

    filler = threading.Thread(target=fill)
    filler.start()
    try:
        filler.join(timeout=1.0)
        assert filler.is_alive()  # waiting for the score
        folders = list(storage.verification_sets_dir().iterdir())
        assert [list(folder.iterdir()) for folder in folders] in ([], [[]])
        assert not VerificationSet.objects.filter(status=VerificationSet.READY).exists()
    finally:
        assert machine_lease_release(host=lock, holder="solo:score")
        filler.join(timeout=30)

    assert done == ["done"]
    ready = VerificationSet.objects.get(cohort=cohort)
    assert (ready.status, ready.members, ready.perturbed) == (VerificationSet.READY, 4, 4)


# Taking a set -----------------------------------------------------------------------------


def test_each_verification_run_takes_a_set_of_its_own_until_the_pool_is_dry(
    alice, bob, contest, settings, sent, django_capture_on_commit_callbacks
):
    settings.PODIUM_VERIFY_POOL = 2
    cohort = make_cohort(contest, CLASSES[:5], jpeg=True)
    verifysets.fill(cohort.pk)
    runs = [verification_run(entrant, contest, cohort) for entrant in (alice, bob, alice)]

    with django_capture_on_commit_callbacks(execute=True):
        taken = [take(run) for run in runs]

    assert taken[0] is not None and taken[1] is not None and taken[2] is None
    assert taken[0].pk != taken[1].pk
    for run, one in zip(runs[:2], taken[:2], strict=True):
        assert one is not None
        row = VerificationSet.objects.get(pk=one.pk)
        assert (row.status, row.run_id) == (VerificationSet.TAKEN, run.pk)
        assert row.taken_at is not None
        mine = pool.set_of_run(run.pk)
        assert mine is not None and mine.pk == one.pk
    assert pool.set_of_run(runs[2].pk) is None
    # Every take asks the builds side to top the pool up again.
    assert sent == [(jobs.VERIFICATION_POOL_FILL, (cohort.pk,))] * 3


def test_a_set_still_being_prepared_is_never_taken(alice, contest):
    cohort = make_cohort(contest, CLASSES[:5], jpeg=True)
    assert pool.set_begin(cohort.pk) is not None

    assert take(verification_run(alice, contest, cohort)) is None


@pytest.mark.django_db(transaction=True)
def test_a_set_another_host_is_taking_is_skipped(alice, bob, benchmark, settings, sent):
    needs_postgresql()
    settings.PODIUM_VERIFY_POOL = 2
    cohort = make_cohort(benchmark, CLASSES[:4], jpeg=True)
    assert verifysets.fill(cohort.pk) == 2
    oldest, newest = VerificationSet.objects.order_by("pk").values_list("pk", flat=True)
    mine, theirs = (
        verification_run(alice, benchmark, cohort),
        verification_run(bob, benchmark, cohort),
    )

    def lock_oldest() -> list[int]:
        return [row.pk for row in VerificationSet.objects.select_for_update().filter(pk=oldest)]

    with another_host(lock_oldest) as held:
        assert held == [oldest]
        started = time.monotonic()
        got = take(mine)
        assert time.monotonic() - started < 5  # skipped, not waited for
    assert got is not None and got.pk == newest
    later = take(theirs)
    assert later is not None and later.pk == oldest


# The sweep --------------------------------------------------------------------------------


def test_the_sweep_deletes_stale_sets_and_keeps_those_in_use(
    alice, contest, settings, sent, django_capture_on_commit_callbacks
):
    settings.PODIUM_VERIFY_POOL = 3
    settings.PODIUM_VERIFY_PREPARE_STALE_S = 600
    cohort = make_cohort(contest, CLASSES[:5], jpeg=True)
    now = timezone.now()

    def taken_by(status: str) -> int:
        run = verification_run(alice, contest, cohort)
        assert verifysets.prepare(cohort.pk) is not None
        one = take(run)
        assert one is not None
        Run.objects.filter(pk=run.pk).update(status=status)
        return int(one.pk)

    staging_set = taken_by(Run.STAGING)
    finished_set = taken_by(Run.FINISHED)
    failed_set = taken_by(Run.INFRA_FAILED)
    requeued_set = taken_by(Run.QUEUED)
    ready_set = verifysets.prepare(cohort.pk)
    assert ready_set is not None

    def preparing(age_s: int) -> int:
        set_id = pool.set_begin(cohort.pk)
        assert set_id is not None
        set_dir(set_id).mkdir(parents=True)
        (set_dir(set_id) / "0").write_bytes(b"half written")
        VerificationSet.objects.filter(pk=set_id).update(
            created_at=now - dt.timedelta(seconds=age_s)
        )
        return set_id

    worker_died = preparing(601)
    still_working = preparing(500)
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        assert verifysets.sweep() == [cohort.pk]

    kept = {staging_set, ready_set, still_working}
    gone = {finished_set, failed_set, requeued_set, worker_died}
    assert set(VerificationSet.objects.values_list("pk", flat=True)) == kept
    assert {int(path.name) for path in storage.verification_sets_dir().iterdir()} == kept
    assert all(not set_dir(set_id).exists() for set_id in gone)
    assert sent == [(jobs.VERIFICATION_POOL_FILL, (cohort.pk,))]


def test_the_sweep_deletes_ready_sets_no_cohort_needs_any_more(
    alice, sent, django_capture_on_commit_callbacks
):
    now = timezone.now()

    def closed_with_a_set(verify_top: int = 3, *, open_now: bool = False) -> int:
        days = dt.timedelta(days=1)
        benchmark = factories.BenchmarkFactory(
            verify_top=verify_top,
            opens_at=now - 10 * days,
            closes_at=now + days if open_now else now - days,
        )
        cohort = make_cohort(benchmark, CLASSES[:3], jpeg=True)
        assert verifysets.prepare(cohort.pk) is not None
        return int(cohort.pk)

    waiting = closed_with_a_set()
    make_submission(alice, Cohort.objects.get(pk=waiting).benchmark, status=Submission.VERIFYING)
    closed_with_a_set()  # closed, nothing waiting
    closed_with_a_set(verify_top=0, open_now=True)  # open, but no longer verifies

    with django_capture_on_commit_callbacks(execute=True):
        assert verifysets.sweep() == [waiting]

    left = VerificationSet.objects.values_list("cohort_id", flat=True)
    assert list(left) == [waiting]
    assert len(list(storage.verification_sets_dir().iterdir())) == 1
    assert sent == [(jobs.VERIFICATION_POOL_FILL, (waiting,))]


def test_the_sweep_deletes_stray_folders_once_they_are_old(jpeg_cohort):
    root = storage.verification_sets_dir()
    live = verifysets.prepare(jpeg_cohort.pk)
    assert live is not None
    long_ago = time.time() - verifysets.STRAY_AFTER_S - 60

    def folder(name: str, *, old: bool) -> Path:
        path = root / name
        path.mkdir(parents=True, exist_ok=True)
        (path / "0").write_bytes(b"left over")
        if old:
            os.utime(path, (long_ago, long_ago))
        return path

    old_stray = folder("9999", old=True)
    old_junk = folder("not-a-set", old=True)
    just_made = folder("9998", old=False)  # a set's folder written before its row shows
    old_live = folder(str(live), old=True)  # a set's own folder, however old

    verifysets.sweep()

    assert not old_stray.exists()
    assert not old_junk.exists()
    assert just_made.is_dir()
    assert (old_live / staging.SET_MEMBERS).is_file()
    assert VerificationSet.objects.get(pk=live).status == VerificationSet.READY


# Which cohorts keep a pool ----------------------------------------------------------------


def test_the_cohorts_that_keep_a_pool(alice):
    now = timezone.now()
    day = dt.timedelta(days=1)

    def official(verify_top: int, opens: dt.timedelta, closes: dt.timedelta) -> Cohort:
        benchmark = factories.BenchmarkFactory(
            verify_top=verify_top, opens_at=now + opens, closes_at=now + closes
        )
        Cohort.objects.create(benchmark=benchmark, kind=Cohort.PRACTICE)
        return Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)

    open_verifying = official(3, -day, day)
    open_unverified = official(0, -day, day)
    not_yet_open = official(3, day, 10 * day)
    closed_waiting = official(3, -10 * day, -day)
    make_submission(alice, closed_waiting.benchmark, status=Submission.VERIFYING)
    closed_done = official(3, -10 * day, -day)
    make_submission(alice, closed_done.benchmark, status=Submission.PASSED)

    needed = pool.cohorts_needing_sets(now)

    assert needed == sorted([open_verifying.pk, closed_waiting.pk])
    assert not {open_unverified.pk, not_yet_open.pk, closed_done.pk} & set(needed)


# The claim ---------------------------------------------------------------------------------


def test_a_verification_with_a_dry_pool_is_stepped_over_until_a_set_is_ready(
    alice, bob, contest, jpeg_cohort, sent, django_capture_on_commit_callbacks
):
    Cohort.objects.create(benchmark=contest, kind=Cohort.PRACTICE)
    verifying = make_submission(alice, contest, status=Submission.VERIFYING)
    Run.objects.create(submission=verifying, cohort=jpeg_cohort, status=Run.FINISHED, passed=True)
    verification = Run.objects.create(
        submission=verifying,
        cohort=jpeg_cohort,
        try_number=2,
        purpose=Run.VERIFY,
        status=Run.QUEUED,
    )
    practice = make_submission(bob, contest, kind=Submission.PRACTICE)
    hardware = contest.hardware_class_id
    # In the fair order the verification comes first.
    assert waiting.next_waiting_id(hardware_class=hardware) == verifying.pk

    def claim_next() -> Run | None:
        with django_capture_on_commit_callbacks(execute=True):
            return run_claim_next(hardware_class=hardware, lease_s=LEASE_S, host="h1")

    claimed = claim_next()

    assert claimed is not None and claimed.submission_id == practice.pk
    verification.refresh_from_db()
    assert verification.status == Run.QUEUED
    assert Submission.objects.get(pk=verifying.pk).status == Submission.VERIFYING
    assert (jobs.VERIFICATION_POOL_FILL, (jpeg_cohort.pk,)) in sent
    # Nothing else waits: still no claim while no set is ready.
    assert claim_next() is None

    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        set_id = verifysets.prepare(jpeg_cohort.pk)
    assert set_id is not None
    assert (jobs.SCORE_NEXT, (hardware, 0)) in sent  # the class wakes for it

    claimed = claim_next()

    assert claimed is not None and claimed.pk == verification.pk
    assert claimed.status == Run.STAGING and claimed.host == "h1"
    taken = VerificationSet.objects.get(pk=set_id)
    assert (taken.status, taken.run_id) == (VerificationSet.TAKEN, verification.pk)


def test_a_set_wakes_no_class_when_no_verification_of_its_cohort_waits(
    alice, contest, jpeg_cohort, sent, django_capture_on_commit_callbacks
):
    elsewhere = factories.BenchmarkFactory(verify_top=3)
    other_cohort = make_cohort(elsewhere, CLASSES[:3], jpeg=True)
    verification_run(alice, elsewhere, other_cohort)
    Run.objects.filter(cohort=other_cohort).update(status=Run.QUEUED)

    with django_capture_on_commit_callbacks(execute=True):
        assert verifysets.prepare(jpeg_cohort.pk) is not None

    assert [name for name, _args in sent if name == jobs.SCORE_NEXT] == []
