"""Where Podium keeps its files: everything lives under ``settings.PODIUM_DATA_DIR``.

Paths are computed at call time so tests (and workers) can point the data folder
elsewhere.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from django.conf import settings


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's content (hex), read a mebibyte at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()


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


def entry_dir(entry_id: int) -> Path:
    """One metered-estimation entry's archive (``whest package``'s tarball)."""
    return data_dir() / "estimation" / "entries" / str(entry_id)


def suite_dir(suite_id: int) -> Path:
    """One estimation suite: a whestbench dataset folder (MLPs and their reference)."""
    return data_dir() / "estimation" / "suites" / str(suite_id)


def verification_sets_dir() -> Path:
    """Prepared verification cohorts, one folder per set (never mounted anywhere)."""
    return data_dir() / "verification-sets"


def verification_set_dir(set_id: int) -> Path:
    """One prepared verification cohort: a file per member, named by its position, and
    ``members.tsv`` (position, sha256 of the prepared file)."""
    return verification_sets_dir() / str(set_id)


SPENT_SET_PREFIX = "spent-"


def spent_set_dir(set_id: int) -> Path:
    """Where a used verification set's folder is put aside until the sweep deletes it."""
    return verification_sets_dir() / f"{SPENT_SET_PREFIX}{set_id}"


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


# A run's staff-only evidence, beside its log and never mounted into a container: the
# manifest as staged, the mapping of staged names to canonical members, the output
# file and the supervisor's result line.
RUN_MANIFEST = "manifest.tsv"
RUN_MAPPING = "mapping.tsv"
RUN_OUTPUT = "output.bin"
RUN_SUPERVISOR = "supervisor.json"


def run_private_dir(run_id: int) -> Path:
    return run_dir(run_id) / "private"


def upload_tmp_dir() -> Path:
    return ensure_dir(data_dir() / "uploads")


TAIL_BLOCK_BYTES = 64 * 1024
TAIL_MAX_BYTES = 8 * 1024 * 1024
# How many last lines of a build or run log the pages and the admin show.
LOG_TAIL_LINES = 200


def read_tail(
    path: Path,
    lines: int,
    *,
    block_bytes: int = TAIL_BLOCK_BYTES,
    max_bytes: int = TAIL_MAX_BYTES,
) -> str:
    """The last ``lines`` lines of a text file, each ending in ``\\n`` (empty when none yet).

    Reads backwards from the end in ``block_bytes`` blocks until it holds ``lines + 1``
    newlines or the start of the file, so the cost follows the tail, not the file. Lines
    are split as ``str.splitlines`` splits them (CRLF counts as one break), invalid UTF-8
    becomes U+FFFD, and a last line without its newline still counts. At most
    ``max_bytes`` are read: when the requested lines do not fit, the answer is the lines
    that do, starting at a line boundary (or, inside one giant line, a character boundary).
    Safe against a log that grows meanwhile: it reads only what existed when it started.
    """
    if lines < 1:
        return ""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below; tests count its reads
    except FileNotFoundError:
        return ""
    with handle:
        position = os.fstat(handle.fileno()).st_size
        floor = max(0, position - max_bytes)
        blocks: list[bytes] = []
        newlines = 0
        while position > floor and newlines <= lines:
            start = max(floor, position - block_bytes)
            handle.seek(start)
            block = handle.read(position - start)
            if len(block) != position - start:  # truncated under us: keep what is whole
                break
            blocks.append(block)
            newlines += block.count(b"\n")
            position = start
    data = b"".join(reversed(blocks))
    if position > 0:
        data = _from_line_start(data)
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:]) + ("\n" if text else "")


def _from_line_start(data: bytes) -> bytes:
    """``data`` without its first, partial line; inside one giant line, from a whole character."""
    first_newline = data.find(b"\n")
    if 0 <= first_newline < len(data) - 1:
        return data[first_newline + 1 :]
    # No line boundary to start at: skip UTF-8 continuation bytes (at most three).
    skip = 0
    while skip < min(3, len(data)) and 0x80 <= data[skip] <= 0xBF:
        skip += 1
    return data[skip:]


def cut_lines(text: str, max_chars: int) -> str:
    """``text`` with every line longer than ``max_chars`` cut there and marked as cut."""
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if len(body) > max_chars:
            line = f"{body[:max_chars]} [line cut: {len(body):,} characters]\n"
        out.append(line)
    return "".join(out)


def writeup_path(benchmark_id: int, entrant_id: int) -> Path:
    """An entrant's write-up on a benchmark (one each; a new upload replaces it)."""
    return data_dir() / "writeups" / str(benchmark_id) / f"{entrant_id}.pdf"
