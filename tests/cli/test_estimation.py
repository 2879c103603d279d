"""The client on a metered-estimation phase: `podium validate ARCHIVE` (whestbench's own
checks, locally), `podium submit` of a tarball, `podium entries`, `podium entry`,
`podium nominate ID [--withdraw]` and `podium suite SLUG -o DIR`."""

from __future__ import annotations

import builtins
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from portal.core.task_names import ESTIMATION_GRADE
from portal.estimation import services
from portal.estimation.models import Entry
from tests import factories
from tests.api.conftest import HOSTILE
from tests.cli.conftest import Podium


@pytest.fixture
def entrant(server: str, alice: Any, sign_in: Callable[[Any], str]) -> Any:
    sign_in(alice)
    return alice


def _graded(phase: Any, entrant: Any, scores: list[float]) -> Entry:
    entry = factories.EntryFactory(benchmark=phase, entrant=entrant)
    services.entry_claim(entry.pk, "host-1")
    return services.entry_record(entry.pk, factories.whest_grade(scores, fallbacks=(3,)))


# podium validate ARCHIVE ----------------------------------------------------------------


def test_validate_passes_a_packaged_estimator(podium: Podium, whest_tarball: Path) -> None:
    result = podium("validate", str(whest_tarball))

    assert result.code == 0, result.err
    assert result.out.startswith(f"{whest_tarball}: whestbench's checks pass (")


@pytest.mark.parametrize("kind", HOSTILE)
def test_validate_names_each_problem_of_a_hostile_archive(
    podium: Podium, hostile_tarball: Callable[[str], Path], kind: str
) -> None:
    archive = hostile_tarball(kind)

    result = podium("validate", str(archive))

    assert result.code == 1
    lines = result.out.splitlines()
    assert lines[-1].startswith(f"{archive}: would be refused (")
    assert all(line.startswith(f"{archive}: ") for line in lines)


def test_validate_names_the_mismatching_file_and_the_link_out(
    podium: Podium, hostile_tarball: Callable[[str], Path]
) -> None:
    mismatch = podium("validate", str(hostile_tarball("sha256_mismatch"))).out
    link = podium("validate", str(hostile_tarball("symlink_out"))).out
    many = podium("validate", str(hostile_tarball("51_files"))).out

    assert "estimator.py: " in mismatch and "sha256" in mismatch.lower()
    assert "out: a link to ../../etc, outside the archive" in link
    assert "51 files besides manifest.json; whestbench's cap is 50" in many


def test_validate_without_whestbench_says_how_to_install_it(
    podium: Podium, whest_tarball: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = builtins.__import__

    def no_whestbench(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("whestbench"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_whestbench)

    result = podium("validate", str(whest_tarball))

    assert result.code == 2
    assert "pip install whestbench" in result.err


# podium submit / entries / entry / nominate ---------------------------------------------


def test_submit_enters_the_tarball_on_an_estimation_phase(
    entrant: Any,
    phase: Any,
    podium: Podium,
    whest_tarball: Path,
    sent: list[tuple[str, tuple[Any, ...]]],
) -> None:
    result = podium("submit", phase.slug, str(whest_tarball))

    assert result.code == 0, result.err
    entry = Entry.objects.get(entrant=entrant)
    assert result.out.splitlines() == [
        f"Entry {entry.pk} (estimator estimator.Estimator on {phase.slug}): accepted",
        f"Follow it with: podium entry {entry.pk}",
    ]
    assert sent == [(ESTIMATION_GRADE, (entry.pk,))]


def test_submit_prints_the_refusal_with_its_code(
    entrant: Any, phase: Any, podium: Podium, hostile_tarball: Callable[[str], Path]
) -> None:
    result = podium("submit", phase.slug, str(hostile_tarball("zip")))

    assert result.code == 2
    assert result.err.startswith("podium: Archive refused: ")
    assert result.err.rstrip().endswith("Nothing was charged.")
    assert not Entry.objects.exists()


def test_submit_to_a_timed_benchmark_still_needs_an_environment(
    entrant: Any, benchmark: Any, podium: Podium, whest_tarball: Path
) -> None:
    result = podium("submit", benchmark.slug, str(whest_tarball))

    assert result.code == 2
    assert "give --env ID" in result.err


def test_entries_and_entry_show_the_teams_work_mlp_by_mlp(
    entrant: Any, phase: Any, podium: Podium
) -> None:
    entry = _graded(phase, entrant, [0.5, 0.7, 0.9, 1.1])

    listed = podium("entries", phase.slug)
    shown = podium("entry", str(entry.pk))

    assert listed.code == 0, listed.err
    assert listed.out.splitlines()[0].split() == [
        "ID", "STATUS", "PUBLIC", "WITHHELD", "FALLBACKS", "NOMINATED", "BY", "SUBMITTED",
    ]  # fmt: skip
    assert listed.out.splitlines()[1].split()[:5] == [str(entry.pk), "graded", "0.6", "-", "0"]
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert "Public score 0.6; withheld score hidden until the close." in lines
    table = lines[lines.index(next(line for line in lines if line.startswith("MLP"))) :]
    assert [row.split()[0] for row in table[1:3]] == ["0", "1"]
    assert lines[-1] == "Only the public MLPs are shown until the phase closes."


def test_nominate_and_withdraw_an_entry(entrant: Any, phase: Any, podium: Podium) -> None:
    entry = _graded(phase, entrant, [1, 1, 1, 1])

    nominated = podium("nominate", str(entry.pk))
    assert Entry.objects.get(pk=entry.pk).nominated
    withdrawn = podium("nominate", str(entry.pk), "--withdraw")

    assert nominated.out == f"Entry {entry.pk} is nominated for the final rerun.\n"
    assert withdrawn.out == f"Entry {entry.pk} is not nominated.\n"
    assert not Entry.objects.get(pk=entry.pk).nominated


def test_another_teams_entry_is_not_found(
    entrant: Any, phase: Any, podium: Podium, bob: Any
) -> None:
    entry = factories.EntryFactory(benchmark=phase, entrant=bob)

    result = podium("nominate", str(entry.pk))

    assert result.code == 2
    assert result.err.startswith("podium: Not found: No such entry.")


# podium suite ---------------------------------------------------------------------------


def test_suite_unpacks_a_dataset_whest_runs_on(
    entrant: Any, phase: Any, podium: Podium, tmp_path: Path
) -> None:
    import whestbench

    folder = tmp_path / "suite"

    result = podium("suite", phase.slug, "-o", str(folder))

    assert result.code == 0, result.err
    assert len(whestbench.load_dataset(str(folder))) == 4
    command = shlex.split(result.out.splitlines()[-1])
    assert command[:8] == [
        "whest", "run", "--estimator", "estimator.py", "--dataset", str(folder),
        "--runner", "subprocess",
    ]  # fmt: skip
    assert command[8:] == [
        "--flop-budget", "1000000", "--wall-time-limit", "120",
        "--residual-wall-time-limit", "0.4",
    ]  # fmt: skip


def test_suite_refuses_a_folder_in_use(
    entrant: Any, phase: Any, podium: Podium, tmp_path: Path
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "kept.txt").write_text("mine")

    result = podium("suite", phase.slug, "-o", str(folder))

    assert result.code == 2
    assert "is not an empty folder" in result.err
    assert sorted(p.name for p in folder.iterdir()) == ["kept.txt"]
