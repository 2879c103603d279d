"""What the scoring host's side decides when grading cannot go as planned (no Docker: the
machine's hold and the grader are fakes): a busy machine sends the grade back to its
queue, a phase without a ready suite refunds, an estimator that cannot be loaded is
charged, a grader fault refunds (entries) or is marked for staff (final scores), and a
failed generation marks its suite failed and leaves no folder."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from portal.core import storage
from portal.core.task_names import ESTIMATION_GRADE
from portal.estimation import services
from portal.estimation.models import Entry, FinalScore, PhaseRules, Suite
from scoring.estimation import work
from scoring.host import machine as machine_lock
from tests import factories
from tests.whest import whest_package


class FakeSession:
    host = "fake-host"

    def __init__(self) -> None:
        self.spared: list[str] = []

    def spare(self, container_id: str) -> None:
        self.spared.append(container_id)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> FakeSession:
    """The machine's hold always granted, to a fake session."""
    session = FakeSession()

    @contextlib.contextmanager
    def hold(*, reschedule: Callable[[str], None]) -> Iterator[FakeSession]:
        yield session

    monkeypatch.setattr(machine_lock, "hold", hold)
    return session


def grader_raises(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    def grade(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise exc

    monkeypatch.setattr(work.grader, "grade", grade)


@pytest.fixture(scope="session")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return whest_package(tmp_path_factory.mktemp("estimator"))


@pytest.fixture
def entry(db: None, alice: Any, packaged: Path) -> Entry:
    """An accepted entry of an open phase with a ready phase suite."""
    phase = factories.PhaseRulesFactory()
    factories.SuiteFactory(benchmark=phase.benchmark)
    return services.entry_accept(
        entrant=alice,
        benchmark=phase.benchmark,
        archive_file=packaged,
        archive_name=packaged.name,
    )


def _charged(entry: Entry) -> int:
    return services.quota(entry.benchmark, entry.entrant_id, timezone.now())["used_today"]


def test_a_busy_machine_sends_the_grade_back_and_claims_nothing(
    entry: Entry,
    monkeypatch: pytest.MonkeyPatch,
    sent: list,
    django_capture_on_commit_callbacks: Any,
) -> None:
    @contextlib.contextmanager
    def busy(*, reschedule: Callable[[str], None]) -> Iterator[FakeSession]:
        reschedule("another score is using it")
        raise machine_lock.MachineWaiting("busy")
        yield FakeSession()  # pragma: no cover - never reached

    monkeypatch.setattr(machine_lock, "hold", busy)
    with django_capture_on_commit_callbacks(execute=True):
        work.grade_entry(entry.pk)
    entry.refresh_from_db()
    assert entry.status == Entry.ACCEPTED
    assert (ESTIMATION_GRADE, (entry.pk,)) in sent


def test_a_phase_without_a_ready_suite_refunds(entry: Entry, held: FakeSession) -> None:
    Suite.objects.filter(benchmark=entry.benchmark).update(status=Suite.GENERATING)
    work.grade_entry(entry.pk)
    entry.refresh_from_db()
    assert (entry.status, entry.refunded) == (Entry.FAILED, True)
    assert "no ready suite" in entry.failure_reason
    assert _charged(entry) == 0


def test_an_estimator_that_cannot_be_loaded_stays_charged(
    entry: Entry, held: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    grader_raises(monkeypatch, ValueError("manifest.json names no entrypoint"))
    work.grade_entry(entry.pk)
    entry.refresh_from_db()
    assert (entry.status, entry.refunded) == (Entry.FAILED, False)
    assert "could not be loaded: manifest.json names no entrypoint" in entry.failure_reason
    assert _charged(entry) == 1


def test_a_grader_fault_refunds_the_entry(
    entry: Entry, held: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    grader_raises(monkeypatch, RuntimeError("the engine went away"))
    work.grade_entry(entry.pk)
    entry.refresh_from_db()
    assert (entry.status, entry.refunded) == (Entry.FAILED, True)
    assert "Platform error (RuntimeError)" in entry.failure_reason
    assert _charged(entry) == 0


def test_a_graded_entry_is_not_graded_again(
    entry: Entry, held: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    services.entry_claim(entry.pk, "elsewhere")
    grader_raises(monkeypatch, AssertionError("a claimed entry was graded again"))
    work.grade_entry(entry.pk)
    entry.refresh_from_db()
    assert (entry.status, entry.host) == (Entry.GRADING, "elsewhere")


def test_a_final_grade_fault_is_marked_for_staff(
    entry: Entry, held: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    services.entry_claim(entry.pk, "h")
    services.entry_record(entry.pk, factories.whest_grade([0.5, 0.5, 0.5, 0.5]))
    final_suite = factories.SuiteFactory(benchmark=entry.benchmark, role=Suite.FINAL)
    final = FinalScore.objects.create(
        entry=entry, suite=final_suite, queued_at=timezone.now() - dt.timedelta(minutes=1)
    )
    grader_raises(monkeypatch, RuntimeError("the meter did not start"))
    work.grade_final(final.pk)
    final.refresh_from_db()
    assert final.status == Entry.FAILED
    assert final.failure_reason == "RuntimeError: the meter did not start"
    assert final.score is None


def test_a_failed_generation_marks_its_suite_and_leaves_no_folder(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    phase = factories.PhaseRulesFactory()
    suite = Suite.objects.create(
        benchmark=phase.benchmark, role=Suite.PHASE, origin=Suite.GENERATED, n_mlps=4,
        width=8, depth=2, n_samples=2000, progress_total=4,
    )  # fmt: skip
    monkeypatch.setattr(machine_lock, "scoring_host", lambda: "fake-host")

    def make_suite(out_dir: Path, **kwargs: Any) -> Path:
        out_dir.mkdir()
        (out_dir / "half-written").write_text("x")
        raise MemoryError("the reference's samples did not fit")

    monkeypatch.setattr(work.grader, "make_suite", make_suite)
    work.generate_suite(suite.pk, [1, 2, 3, 4])
    suite.refresh_from_db()
    assert suite.status == Suite.FAILED
    assert suite.note == "MemoryError: the reference's samples did not fit"
    assert not storage.suite_dir(suite.pk).exists()
    # A suite no longer waiting for generation (a redelivered message) is left alone.
    work.generate_suite(suite.pk, [1, 2, 3, 4])
    assert Suite.objects.get(pk=suite.pk).status == Suite.FAILED


def test_phase_rules_become_the_graders_limits(db: None, settings: Any) -> None:
    phase = factories.PhaseRulesFactory(residual_rule=PhaseRules.PRICED, residual_cap_ms=400)
    settings.PODIUM_SCORING_CPUS = "shared"
    limits = work.limits_of(phase)
    assert (limits.residual_cap_s, limits.lambda_flops_per_second) == (None, 1e11)
    assert limits.memory_bytes == phase.benchmark.run_memory_bytes
    assert limits.cpuset is None
    settings.PODIUM_SCORING_CPUS = "1"  # CPU 1 scores, CPU 0 does everything else
    capped = work.limits_of(factories.PhaseRulesFactory())
    assert (capped.residual_cap_s, capped.lambda_flops_per_second) == (0.4, 0.0)
    assert capped.cpuset == "1"
