"""``podium submit``: packing a folder, sending an archive as it is, and every refusal."""

from __future__ import annotations

import datetime as dt
import io
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from portal.core import jobs
from portal.submissions.intake import source_path
from portal.submissions.models import Submission
from tests import factories
from tests.cli.conftest import Podium, tar_members

Ready = Callable[..., Any]


@pytest.fixture
def entrant(server: str, alice: Any, sign_in: Callable[[Any], str]) -> Any:
    sign_in(alice)
    return alice


def test_a_folder_is_packed_with_relative_paths_and_exec_bits(
    entrant: Any,
    benchmark: Any,
    podium: Podium,
    ready_environment: Ready,
    kit: Path,
    sent: list[tuple[str, tuple[Any, ...]]],
) -> None:
    os.symlink("model/weights.txt", kit / "weights")
    environment = ready_environment(entrant, benchmark)

    result = podium("submit", benchmark.slug, "--env", str(environment.pk), str(kit))

    assert result.code == 0, result.err
    submission = Submission.objects.get(entrant=entrant)
    assert result.out.splitlines() == [
        f"Packed 5 files from {kit} ({submission.source_bytes} bytes).",
        f"Submission {submission.pk} (official attempt on {benchmark.slug}, "
        f"environment {environment.pk}): accepted",
        f"Follow it with: podium watch {submission.pk}",
    ]
    assert submission.kind == Submission.OFFICIAL
    assert submission.source_name == "kit.tar.gz"
    assert submission.source_format == "tar.gz"
    members = tar_members(source_path(submission).read_bytes())
    assert sorted(members) == [
        ".settings", "build.sh", "model", "model/weights.txt", "run", "weights",
    ]  # fmt: skip
    assert members["run"].mode == members["build.sh"].mode == 0o755
    assert members["model/weights.txt"].mode == 0o644
    assert members["model"].isdir()
    assert members["weights"].issym() and members["weights"].linkname == "model/weights.txt"
    assert {members[name].uid for name in members} == {0}
    assert sent == [(jobs.BUILD_SUBMISSION, (submission.pk,))]


def test_an_archive_is_sent_as_it_is(
    entrant: Any, benchmark: Any, podium: Podium, ready_environment: Ready, tmp_path: Path
) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("run", "#!/bin/sh\nexit 0\n")
    path = tmp_path / "attempt-3.zip"
    path.write_bytes(buffer.getvalue())
    environment = ready_environment(entrant, benchmark)

    result = podium("submit", benchmark.slug, "--env", str(environment.pk), "--practice", str(path))

    assert result.code == 0, result.err
    submission = Submission.objects.get(entrant=entrant)
    assert "practice run on" in result.out
    assert not result.out.startswith("Packed")
    assert submission.kind == Submission.PRACTICE
    assert submission.source_name == "attempt-3.zip"
    assert source_path(submission).read_bytes() == path.read_bytes()


def test_a_folder_without_build_sh_or_run_is_refused_and_not_charged(
    entrant: Any, benchmark: Any, podium: Podium, ready_environment: Ready, tmp_path: Path
) -> None:
    folder = tmp_path / "parent"
    (folder / "kit").mkdir(parents=True)
    (folder / "kit" / "run").write_text("#!/bin/sh\n")
    environment = ready_environment(entrant, benchmark)

    result = podium("submit", benchmark.slug, "--env", str(environment.pk), str(folder))

    assert result.code == 2
    assert result.err == (
        "podium: Archive refused: The archive needs a `build.sh` or a `run` at its top level. "
        "Nothing was charged.\n"
    )
    assert not Submission.objects.exists()


def test_an_oversized_archive_is_refused(
    entrant: Any, benchmark: Any, podium: Podium, ready_environment: Ready, kit: Path
) -> None:
    benchmark.max_upload_bytes = 64
    benchmark.save(update_fields=["max_upload_bytes"])
    environment = ready_environment(entrant, benchmark)

    result = podium("submit", benchmark.slug, "--env", str(environment.pk), str(kit))

    assert result.code == 2
    assert "podium: Archive too large: The source archive is larger than 64 bytes" in result.err
    assert "Nothing was charged" in result.err


def test_no_attempts_left_says_when_they_reset(
    entrant: Any, benchmark: Any, podium: Podium, ready_environment: Ready, kit: Path
) -> None:
    benchmark.attempts_per_day = 1
    benchmark.save(update_fields=["attempts_per_day"])
    environment = ready_environment(entrant, benchmark)
    argv = ("submit", benchmark.slug, "--env", str(environment.pk), str(kit))
    assert podium(*argv).code == 0

    result = podium(*argv)

    assert result.code == 2
    assert result.err.startswith(
        "podium: No attempts left today: You have used all 1 official attempts of today "
        "(Asia/Seoul); the next one is available at "
    )
    assert result.err.endswith(
        "Nothing was charged; `podium quota BENCHMARK` shows your allowance.\n"
    )
    assert Submission.objects.count() == 1


def test_an_environment_still_building_is_not_ready(
    entrant: Any, benchmark: Any, podium: Podium, ready_environment: Ready, kit: Path
) -> None:
    environment = ready_environment(entrant, benchmark, name="slow", status="building")

    result = podium("submit", benchmark.slug, "--env", str(environment.pk), str(kit))

    assert result.code == 2
    assert result.err == (
        "podium: Environment not ready: Environment 'slow' is building; submit once its build "
        "is ready. `podium env list` shows the status of each environment.\n"
    )


def test_another_entrants_environment_is_not_found(
    entrant: Any, bob: Any, benchmark: Any, podium: Podium, ready_environment: Ready, kit: Path
) -> None:
    environment = ready_environment(bob, benchmark)

    result = podium("submit", benchmark.slug, "--env", str(environment.pk), str(kit))

    assert result.code == 2
    assert result.err == "podium: Not found: No such environment.\n"


@pytest.mark.parametrize(
    ("opens_in", "closes_in", "message"),
    [
        (dt.timedelta(days=1), dt.timedelta(days=2), "podium: Not open yet: Uploads open at "),
        (
            dt.timedelta(days=-2),
            dt.timedelta(days=-1),
            "podium: Closed: This benchmark has closed; no uploads are accepted.",
        ),
    ],
)
def test_uploads_outside_the_window_are_refused(
    entrant: Any,
    podium: Podium,
    ready_environment: Ready,
    kit: Path,
    opens_in: dt.timedelta,
    closes_in: dt.timedelta,
    message: str,
) -> None:
    now = timezone.now()
    benchmark = factories.BenchmarkFactory(opens_at=now + opens_in, closes_at=now + closes_in)
    environment = ready_environment(entrant, benchmark)

    result = podium("submit", benchmark.slug, "--env", str(environment.pk), str(kit))

    assert result.code == 2
    assert result.err.startswith(message)
    assert not Submission.objects.exists()


def test_a_link_out_of_the_folder_stops_the_packing(
    entrant: Any, benchmark: Any, podium: Podium, ready_environment: Ready, kit: Path
) -> None:
    os.symlink("../../secrets.txt", kit / "model" / "leak")
    environment = ready_environment(entrant, benchmark)

    result = podium("submit", benchmark.slug, "--env", str(environment.pk), str(kit))

    assert result.code == 2
    assert result.err == (
        "podium: model/leak is a symbolic link to ../../secrets.txt, outside the folder; "
        "put the file itself in the folder (links must point inside it).\n"
    )
    assert not Submission.objects.exists()


def test_a_path_that_is_neither_folder_nor_archive_is_named(
    entrant: Any, benchmark: Any, podium: Podium, ready_environment: Ready, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")

    missing = podium("submit", benchmark.slug, "--env", "1", str(tmp_path / "gone"))
    wrong = podium("submit", benchmark.slug, "--env", "1", str(notes))

    assert (missing.code, wrong.code) == (2, 2)
    assert missing.err == f"podium: {tmp_path / 'gone'}: no such folder or archive.\n"
    assert "is neither a folder nor a .tar.gz, .tgz, .tar or .zip archive" in wrong.err
