"""Where Podium keeps its files: everything lives under ``settings.PODIUM_DATA_DIR``.

Paths are computed at call time so tests (and workers) can point the data folder
elsewhere.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings


def data_dir() -> Path:
    return Path(settings.PODIUM_DATA_DIR)


def ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def cohort_dir(cohort_id: int) -> Path:
    """Frozen cohort files, by canonical name (staff only; never mounted into a build)."""
    return data_dir() / "cohorts" / str(cohort_id)


def environment_dir(environment_id: int) -> Path:
    """Dockerfile, optional context archive and build log of one environment."""
    return data_dir() / "environments" / str(environment_id)


def submission_dir(submission_id: int) -> Path:
    """Source archive and build log of one submission."""
    return data_dir() / "submissions" / str(submission_id)


def run_dir(run_id: int) -> Path:
    """Staged input, logs and output of one scored run (input removed after the run)."""
    return data_dir() / "runs" / str(run_id)


BUILD_LOG = "build.log"
RUN_LOG = "run.log"


def environment_build_log(environment_id: int) -> Path:
    return environment_dir(environment_id) / BUILD_LOG


def submission_build_log(submission_id: int) -> Path:
    """The output of ``build.sh`` for one submission."""
    return submission_dir(submission_id) / BUILD_LOG


def run_log(run_id: int) -> Path:
    """The tails of the entrant's stdout and stderr in one scored run."""
    return run_dir(run_id) / RUN_LOG


def upload_tmp_dir() -> Path:
    return ensure_dir(data_dir() / "uploads")


def read_tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file (empty when it does not exist yet)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - 256 * 1024))
            data = handle.read()
    except FileNotFoundError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:]) + ("\n" if text else "")
