"""Entries of a metered-estimation phase: accepted and charged to the team's UTC day,
refused with nothing charged, graded rows recorded, the board, nominations, the final
rerun's queue and the suites (generation requested, import)."""

from __future__ import annotations

import datetime as dt
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from portal.contests.models import Benchmark
from portal.core import errors, storage
from portal.core.task_names import ESTIMATION_FINAL, ESTIMATION_GRADE, ESTIMATION_SUITE
from portal.estimation import selectors, services
from portal.estimation.models import Entry, FinalScore, PhaseRules, Suite
from portal.teams.models import TeamMember
from tests import factories
from tests.whest import whest_bake, whest_package


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A whestbench dataset of 6 MLPs, 8 wide and 2 deep (seconds)."""
    return whest_bake(tmp_path_factory.mktemp("suite") / "ds", n_mlps=6)


@pytest.fixture(scope="session")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tarball ``whest package`` makes of a mean-propagation estimator."""
    return whest_package(tmp_path_factory.mktemp("estimator"))


@pytest.fixture
def phase(db: None, tiny_dataset: Path) -> Benchmark:
    """An open estimation phase (UTC days, 2 entries a day) with a ready phase suite."""
    now = timezone.now()
    benchmark = factories.BenchmarkFactory(
        kind=Benchmark.ESTIMATION,
        opens_at=now - dt.timedelta(days=1),
        closes_at=now + dt.timedelta(days=10),
        attempts_per_day=2,
        attempt_timezone="UTC",
    )
    PhaseRules.objects.create(
        benchmark=benchmark, width=8, depth=2, flop_budget=10**6, public_mlps=4, withheld_mlps=2
    )
    suite = Suite.objects.create(
        benchmark=benchmark,
        role=Suite.PHASE,
        status=Suite.READY,
        origin=Suite.IMPORTED,
        n_mlps=6,
        width=8,
        depth=2,
        n_samples=2000,
    )
    shutil.copytree(tiny_dataset, storage.suite_dir(suite.pk))
    return benchmark


def _accept(phase: Benchmark, user: Any, archive: Path, **kw: Any) -> Entry:
    return services.entry_accept(
        entrant=user, benchmark=phase, archive_file=archive, archive_name=archive.name, **kw
    )


def _graded(phase: Benchmark, user: Any, archive: Path, scores: list[float]) -> Entry:
    entry = _accept(phase, user, archive)
    assert services.entry_claim(entry.pk, "host-1") is not None
    return services.entry_record(entry.pk, factories.whest_grade(scores))


def test_an_estimator_is_accepted_charged_and_queued_for_its_class(
    phase: Benchmark,
    alice: Any,
    packaged: Path,
    sent: list,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        entry = _accept(phase, alice, packaged)
    assert entry.status == Entry.ACCEPTED
    assert entry.estimator_class == "estimator.Estimator"
    assert services.archive_path(entry).read_bytes() == packaged.read_bytes()
    assert (ESTIMATION_GRADE, (entry.pk,)) in sent
    assert services.quota(phase, alice.pk, timezone.now())["remaining_today"] == 1


def test_a_team_shares_its_day_and_a_leaver_gets_no_fresh_allowance(
    phase: Benchmark, alice: Any, bob: Any, packaged: Path, sent: list
) -> None:
    team = factories.team(phase, "the-meters", alice, bob)
    _accept(phase, alice, packaged)
    _accept(phase, bob, packaged)
    with pytest.raises(errors.QuotaExhausted, match="Your team has used all 2"):
        _accept(phase, alice, packaged)
    TeamMember.objects.filter(team=team, user=bob).delete()
    with pytest.raises(errors.QuotaExhausted, match="You have used all 2"):
        _accept(phase, bob, packaged)  # his team's charges of today still count
    assert Entry.objects.count() == 2


def test_the_allowance_resets_at_midnight_utc(
    phase: Benchmark, alice: Any, packaged: Path, sent: list
) -> None:
    day = timezone.now().replace(hour=23, minute=0, second=0, microsecond=0)
    with time_machine.travel(day, tick=False):
        _accept(phase, alice, packaged)
        _accept(phase, alice, packaged)
        with pytest.raises(errors.QuotaExhausted):
            _accept(phase, alice, packaged)
    with time_machine.travel(day + dt.timedelta(hours=1, minutes=1), tick=False):
        _accept(phase, alice, packaged)
    assert Entry.objects.count() == 3


def _tar(path: Path, files: dict[str, bytes], *, gzipped: bool = True) -> Path:
    import io

    with tarfile.open(path, "w:gz" if gzipped else "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("no_manifest", "manifest"),
        ("bad_hash", "sha256"),
        ("too_many_files", "cap"),
        ("plain_tar", "tar archive"),
        ("symlink_out", "outside"),
    ],
)
def test_a_bad_archive_is_refused_and_charges_nothing(
    phase: Benchmark, alice: Any, packaged: Path, tmp_path: Path, sent: list, case: str, words: str
) -> None:
    with tarfile.open(packaged) as tar:
        good = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    if case == "no_manifest":
        archive = _tar(tmp_path / "a.tar.gz", {"estimator.py": good["estimator.py"]})
    elif case == "bad_hash":
        archive = _tar(tmp_path / "a.tar.gz", {**good, "estimator.py": b"# changed\n"})
    elif case == "too_many_files":
        extra = {f"f{i}.txt": b"x" for i in range(60)}
        archive = _tar(tmp_path / "a.tar.gz", {**good, **extra})
    elif case == "plain_tar":
        archive = _tar(tmp_path / "a.tar", good, gzipped=False)
    else:
        archive = tmp_path / "a.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            link = tarfile.TarInfo("weights.npz")
            link.type = tarfile.SYMTYPE
            link.linkname = "../../etc/passwd"
            tar.addfile(link)
    with pytest.raises(errors.InvalidArchive, match=words):
        _accept(phase, alice, archive)
    assert not Entry.objects.exists()
    assert not list(storage.data_dir().glob("estimation/entries/*/*"))
    assert services.quota(phase, alice.pk, timezone.now())["remaining_today"] == 2


def test_no_ready_suite_or_a_closed_window_charges_nothing(
    phase: Benchmark, alice: Any, packaged: Path, sent: list
) -> None:
    Suite.objects.filter(benchmark=phase).update(status=Suite.GENERATING)
    with pytest.raises(errors.NoCohort, match="no ready suite"):
        _accept(phase, alice, packaged)
    Suite.objects.filter(benchmark=phase).update(status=Suite.READY)
    Benchmark.objects.filter(pk=phase.pk).update(closes_at=timezone.now())
    phase.refresh_from_db()
    with pytest.raises(errors.WindowClosed):
        _accept(phase, alice, packaged)
    assert not Entry.objects.exists()


def test_a_benchmark_of_another_kind_takes_no_estimator(
    benchmark: Benchmark, alice: Any, packaged: Path
) -> None:
    with pytest.raises(errors.NotFound, match="not a metered-estimation phase"):
        _accept(benchmark, alice, packaged)


def test_grades_split_public_and_withheld_and_the_board_ranks_each_team_once(
    phase: Benchmark, alice: Any, bob: Any, packaged: Path, sent: list
) -> None:
    carol = factories.UserFactory(username="carol")
    factories.team(phase, "the-meters", alice, carol)
    a1 = _graded(phase, alice, packaged, [0.4, 0.4, 0.4, 0.4, 9.0, 9.0])
    c1 = _graded(phase, carol, packaged, [0.2, 0.2, 0.2, 0.2, 9.0, 9.0])
    b1 = _graded(phase, bob, packaged, [0.3, 0.3, 0.3, 0.3, 0.1, 0.1])
    assert c1.public_score == pytest.approx(0.2)
    assert c1.withheld_score == pytest.approx(9.0)
    rows = selectors.board(phase)
    assert [r.entry_id for r in rows] == [c1.pk, b1.pk]  # alice's team once, by its best
    assert all(r.withheld_score is None for r in rows)  # hidden until the close
    assert a1.pk not in [r.entry_id for r in rows]
    after = selectors.board(phase, now=phase.closes_at)
    assert after[0].withheld_score == pytest.approx(9.0)


def test_a_second_claim_gets_nothing(
    phase: Benchmark, alice: Any, packaged: Path, sent: list
) -> None:
    entry = _accept(phase, alice, packaged)
    assert services.entry_claim(entry.pk, "a") is not None
    assert services.entry_claim(entry.pk, "b") is None


def test_a_grader_fault_refunds_the_day(
    phase: Benchmark, alice: Any, packaged: Path, sent: list
) -> None:
    entry = _accept(phase, alice, packaged)
    services.entry_fail(entry.pk, "the suite's files are missing", refund=True)
    assert services.quota(phase, alice.pk, timezone.now())["remaining_today"] == 2


def test_nominations_are_the_teams_and_capped(
    phase: Benchmark, alice: Any, packaged: Path, sent: list
) -> None:
    carol = factories.UserFactory(username="carol")
    factories.team(phase, "the-meters", alice, carol)
    e1 = _graded(phase, alice, packaged, [0.4] * 6)
    e2 = _graded(phase, carol, packaged, [0.3] * 6)
    with time_machine.travel(timezone.now() + dt.timedelta(days=1)):
        e3 = _graded(phase, alice, packaged, [0.2] * 6)
    services.entry_nominate(entry=e1, user=carol, nominated=True)
    services.entry_nominate(entry=e2, user=alice, nominated=True)
    with pytest.raises(errors.InvalidParameter, match="nominated 2"):
        services.entry_nominate(entry=e3, user=alice, nominated=True)
    outsider = factories.UserFactory(username="mallory")
    with pytest.raises(errors.NotFound):
        services.entry_nominate(entry=e1, user=outsider, nominated=False)


def test_the_final_rerun_takes_nominations_else_the_best_two_once(
    phase: Benchmark,
    alice: Any,
    bob: Any,
    packaged: Path,
    sent: list,
    django_capture_on_commit_callbacks: Any,
) -> None:
    a1 = _graded(phase, alice, packaged, [0.4] * 6)
    a2 = _graded(phase, alice, packaged, [0.3] * 6)
    b1 = _graded(phase, bob, packaged, [0.5] * 6)
    with time_machine.travel(timezone.now() + dt.timedelta(days=1)):
        b2 = _graded(phase, bob, packaged, [0.1] * 6)
        b3 = _graded(phase, bob, packaged, [0.2] * 6)
    services.entry_nominate(entry=b1, user=bob, nominated=True)
    with pytest.raises(errors.InvalidParameter, match="not closed"):
        services.final_start(benchmark=phase, user=None)
    after = phase.closes_at + dt.timedelta(minutes=1)
    with pytest.raises(errors.NoCohort, match="final suite"):
        services.final_start(benchmark=phase, user=None, now=after)
    Suite.objects.create(
        benchmark=phase,
        role=Suite.FINAL,
        status=Suite.READY,
        origin=Suite.IMPORTED,
        n_mlps=6,
        width=8,
        depth=2,
        n_samples=2000,
    )
    with django_capture_on_commit_callbacks(execute=True):
        finals = services.final_start(benchmark=phase, user=None, now=after)
    assert sorted(f.entry_id for f in finals) == sorted([a1.pk, a2.pk, b1.pk])
    assert b2.pk not in [f.entry_id for f in finals] and b3.pk not in [f.entry_id for f in finals]
    assert sorted(args[0] for name, args in sent if name == ESTIMATION_FINAL) == sorted(
        f.pk for f in finals
    )
    with pytest.raises(errors.InvalidParameter, match="started already"):
        services.final_start(benchmark=phase, user=None, now=after)
    for f, score in zip(finals, [0.3, 0.2, 0.1], strict=True):
        assert services.final_claim(f.pk) is not None
        services.final_record(f.pk, factories.whest_grade([score] * 6))
    standings = selectors.final_standings(phase)
    assert [(r.rank, r.entry_id) for r in standings if r.rank] == [
        (1, finals[2].entry_id),
        (2, finals[1].entry_id),
    ]  # alice's team ranks once, by its better final score
    assert FinalScore.objects.count() == 3


def test_generation_is_requested_without_keeping_the_seed(
    phase: Benchmark, staff: Any, sent: list, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        suite = services.suite_generate(
            benchmark=phase, role=Suite.FINAL, private_seed="held-out 7", user=staff
        )
    assert suite.status == Suite.GENERATING and suite.n_mlps == 100
    ((_name, (suite_id, seeds)),) = [s for s in sent if s[0] == ESTIMATION_SUITE]
    assert suite_id == suite.pk and len(seeds) == 100
    stored = " ".join(str(v) for v in Suite.objects.filter(pk=suite.pk).values().first().values())
    assert "held-out 7" not in stored
    with pytest.raises(errors.InvalidParameter, match="being generated"):
        services.suite_generate(benchmark=phase, role=Suite.FINAL, private_seed="x", user=staff)
    services.suite_progress(suite.pk, 40)
    services.suite_ready(
        suite.pk, dataset_sha256="ab" * 32, stats={"avg_variances": [0.1]}, host="h"
    )
    suite.refresh_from_db()
    assert (suite.status, suite.progress_done, suite.generated_on) == (Suite.READY, 100, "h")


def test_a_graded_phase_suite_is_never_replaced(
    phase: Benchmark, alice: Any, packaged: Path, staff: Any, sent: list
) -> None:
    _accept(phase, alice, packaged)
    with pytest.raises(errors.InvalidParameter, match="cannot be replaced"):
        services.suite_generate(benchmark=phase, role=Suite.PHASE, private_seed="s", user=staff)


def test_a_prepared_dataset_imports_when_it_fits_the_phase(
    phase: Benchmark, tiny_dataset: Path, staff: Any
) -> None:
    PhaseRules.objects.filter(benchmark=phase).update(local_mlps=6)
    suite = services.suite_import(
        benchmark=phase, role=Suite.PUBLIC, folder=tiny_dataset, user=staff
    )
    assert suite.status == Suite.READY and len(suite.dataset_sha256) == 64
    assert (storage.suite_dir(suite.pk) / "metadata.json").is_file()
    PhaseRules.objects.filter(benchmark=phase).update(width=16)
    with pytest.raises(errors.InvalidParameter, match="8 wide"):
        services.suite_import(benchmark=phase, role=Suite.FINAL, folder=tiny_dataset, user=staff)
