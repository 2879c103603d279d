"""Metered estimation from the entrant's side (docs/api.md, "Metered estimation"): checking
a `whest package` tarball locally, grading it locally, entering it, reading entries,
nominating one, and downloading the public suite.

whestbench is the entrant's own package (the client never needs it otherwise): only
``podium validate ARCHIVE`` imports it, and says how to install it when it is missing.

``podium run --local BENCHMARK ARCHIVE`` grades the tarball on the phase's public suite
with the scoring host's own grader, run as a program of its own (``python -m
scoring.estimation.local``, installed with Podium; this client imports none of it): the
grader image on the local Docker Engine, the trusted meter outside it, whestbench's
scoring. It prints the grade as the entry page shows it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import posixpath
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from podium_cli import show
from podium_cli.api import Client
from podium_cli.errors import EXIT_NOT_PASSED, EXIT_OK, EXIT_REFUSED, CliError

# The program that grades locally, and what to do where it is missing.
GRADER_MODULE = "scoring.estimation.local"
GRADER_HINT = (
    "A local grade runs Podium's own grader, which is not installed here: install Podium "
    "from its source (`pip install .`), and make the grader image there (`make "
    "base-images`); it needs a Docker Engine."
)
INSTALL_HINT = (
    "whestbench is not installed here: install it with `pip install whestbench` (the "
    "version the phase's rules pin), then run `podium validate` again."
)


def _figure(value: float | None, digits: int = 6) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.{digits}g}"


# podium validate ARCHIVE ----------------------------------------------------------------


def _escapes(name: str) -> bool:
    normal = posixpath.normpath(name)
    return name.startswith("/") or normal == ".." or normal.startswith("../")


def _tar_problems(path: Path, max_files: int) -> list[str]:
    """What the portal refuses before whestbench looks (docs/api.md: invalid_archive):
    links or paths out of the archive, special files, more files than whestbench's cap."""
    try:
        with tarfile.open(path, "r:gz") as archive:
            members = archive.getmembers()
    except (tarfile.TarError, OSError):
        return []  # whestbench's own check names it
    problems = []
    for member in members:
        if _escapes(member.name):
            problems.append(f"{member.name}: a path outside the archive")
        elif member.issym() and (
            member.linkname.startswith("/")
            or _escapes(posixpath.join(posixpath.dirname(member.name), member.linkname))
        ):
            problems.append(f"{member.name}: a link to {member.linkname}, outside the archive")
        elif member.islnk() or not (member.isfile() or member.isdir() or member.issym()):
            problems.append(f"{member.name}: not a plain file (hard link or special file)")
    files = [m for m in members if m.isfile() and m.name.lstrip("./") != "manifest.json"]
    if len(files) > max_files:
        problems.append(
            f"{len(files)} files besides manifest.json; whestbench's cap is {max_files}"
        )
    return problems


def validate_archive(archive: Path) -> int:
    """Check a `whest package` tarball as the portal would, uploading nothing; each
    problem printed; 0 when none, 1 otherwise, 2 without whestbench."""
    try:
        from whestbench import limits
        from whestbench.validation import validate_package
    except ImportError:
        print(f"podium: {INSTALL_HINT}", file=sys.stderr)
        return EXIT_REFUSED
    if not archive.is_file():
        raise CliError(f"{archive}: no such archive.")
    size = archive.stat().st_size
    problems = []
    if size > limits.MAX_SUBMISSION_BYTES:
        problems.append(
            f"{size:,} bytes; whestbench's cap is {limits.MAX_SUBMISSION_BYTES:,} bytes"
        )
    problems += _tar_problems(archive, limits.MAX_SUBMISSION_FILES)
    checked = validate_package(archive)
    problems += [
        f"{issue.name}: {issue.message}" if issue.name else issue.message
        for issue in checked.issues
    ]
    for problem in problems:
        print(f"{archive}: {problem}")
    if problems:
        print(f"{archive}: would be refused ({show.plural(len(problems), 'problem')}).")
        return EXIT_NOT_PASSED
    print(f"{archive}: whestbench's checks pass ({show.size(size)}); nothing was uploaded.")
    return EXIT_OK


# podium submit (an estimation phase) ----------------------------------------------------


def submit(args: argparse.Namespace, client: Client) -> int:
    archive = Path(args.source)
    if archive.is_dir():
        raise CliError(
            f"{archive} is a folder; an estimator is entered as the tarball `whest package "
            f"--estimator {archive}/estimator.py --output submission.tar.gz` makes."
        )
    if not archive.is_file():
        raise CliError(f"{archive}: no such archive.")
    entry = client.post_files(
        f"/benchmarks/{args.benchmark}/estimation/entries/",
        {},
        {"archive": (archive.name, archive)},
    )
    print(f"Entry {entry['id']} (estimator {entry['estimator_class']} on {args.benchmark}): "
          f"{entry['status']}")  # fmt: skip
    print(f"Follow it with: podium entry {entry['id']}")
    return EXIT_OK


# podium entries / entry -----------------------------------------------------------------


def entries(args: argparse.Namespace, client: Client) -> int:
    rows = client.get_json(f"/benchmarks/{args.benchmark}/estimation/entries/")
    if not rows:
        print(f"Your team has no entries on {args.benchmark} yet.")
        return EXIT_OK
    print(
        show.table(
            ["ID", "STATUS", "PUBLIC", "WITHHELD", "FALLBACKS", "NOMINATED", "BY", "SUBMITTED"],
            [
                [
                    row["id"],
                    row["status"],
                    _figure(row["public_score"]),
                    _figure(row["withheld_score"]),
                    "-" if row["fallbacks"] is None else row["fallbacks"],
                    "yes" if row["nominated"] else "",
                    row["entrant"],
                    show.when(row["submitted_at"]),
                ]
                for row in rows
            ],
        )
    )
    return EXIT_OK


def _print_grade(grade: dict[str, Any]) -> None:
    """A grade's compute figures, then its MLPs, as the entry page shows them."""
    print(
        f"Mean FLOPs {_figure(grade['mean_flops'])}, mean effective compute "
        f"{_figure(grade['mean_effective_compute'])}, ratio {_figure(grade['ratio'], 4)}, "
        f"fallbacks {grade['fallbacks']}."
    )
    _print_mlps(grade["mlps"])


def _print_mlps(mlps: list[dict[str, Any]]) -> None:
    """A grade's MLPs, one row each, as the entry page lists them."""
    print(
        show.table(
            ["MLP", "NAME", "MSE", "SCORE", "FLOPS", "RESIDUAL S", "WALL S", "FALLBACK"],
            [
                [
                    row["index"],
                    row["name"],
                    _figure(row["final_layer_mse"]),
                    _figure(row["score"]),
                    row["flops_used"],
                    _figure(row["residual_wall_time_s"], 4),
                    _figure(row["wall_time_s"], 4),
                    row["reason"] if row["fallback"] else "",
                ]
                for row in mlps
            ],
        )
    )


def _print_entry(entry: dict[str, Any]) -> None:
    team = f", team {entry['team']}" if entry.get("team") else ""
    print(
        f"Entry {entry['id']} on {entry['benchmark']} by {entry['entrant']}{team}: "
        f"{entry['status']}{' (nominated)' if entry['nominated'] else ''}"
    )
    print(f"Estimator {entry['estimator_class']}, {entry['archive_name']} "
          f"({show.size(entry['archive_bytes'])}, {entry['archive_sha256']})")  # fmt: skip
    if entry["failure_reason"]:
        print(f"Failed: {entry['failure_reason']}")
    if entry["status"] != "graded":
        return
    withheld = (
        _figure(entry["withheld_score"]) if entry["withheld_shown"] else "hidden until the close"
    )
    print(f"Public score {_figure(entry['public_score'])}; withheld score {withheld}.")
    _print_grade(entry)
    if not entry["withheld_shown"]:
        print("Only the public MLPs are shown until the phase closes.")


def entry(args: argparse.Namespace, client: Client) -> int:
    found = client.get_json(f"/estimation/entries/{args.entry}/")
    if "mlps" in found:
        _print_entry(found)
        return EXIT_OK
    # Another team's entry on the board: its board row only.
    team = found.get("team") or found["entrant"]
    print(
        f"Entry {found['entry']} of {team}: rank {found['rank']} on the board, public score "
        f"{_figure(found['public_score'])}, ratio {_figure(found['ratio'], 4)}, "
        f"fallbacks {found['fallbacks']}."
    )
    return EXIT_OK


def nominate(args: argparse.Namespace, client: Client, entry_id: int) -> int:
    found = client.post_json(
        f"/estimation/entries/{entry_id}/nomination/", {"nominated": not args.withdraw}
    )
    state = "nominated for the final rerun" if found["nominated"] else "not nominated"
    print(f"Entry {found['id']} is {state}.")
    return EXIT_OK


# podium suite ---------------------------------------------------------------------------


def _unpack(archive: Path, folder: Path) -> None:
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            if _escapes(member.name) or not (member.isfile() or member.isdir()):
                raise CliError(f"The suite's archive holds {member.name!r}; nothing was unpacked.")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(folder, filter="data")
        else:  # Python without extraction filters: the members were checked above
            tar.extractall(folder)  # noqa: S202


def _download_suite(client: Client, benchmark: str, folder: Path) -> None:
    """The phase's public suite, unpacked into ``folder`` (new or empty)."""
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "suite.tar.gz"
        client.download(f"/benchmarks/{benchmark}/estimation/suite/", archive)
        staged = Path(scratch) / "suite"
        _unpack(archive, staged)
        folder.parent.mkdir(parents=True, exist_ok=True)
        if folder.exists():
            folder.rmdir()
        shutil.move(str(staged), folder)


def suite(args: argparse.Namespace, client: Client) -> int:
    folder = Path(args.output)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise CliError(f"{folder} exists and is not an empty folder; name a new one with -o.")
    phase = client.get_json(f"/benchmarks/{args.benchmark}/estimation/")
    _download_suite(client, args.benchmark, folder)
    rules = phase["rules"]
    print(f"Unpacked the public suite of {args.benchmark} ({rules['local_mlps']} MLPs) "
          f"into {folder}.")  # fmt: skip
    command = [
        "whest", "run", "--estimator", "estimator.py", "--dataset", str(folder),
        "--runner", "subprocess", "--flop-budget", str(rules["flop_budget"]),
        "--wall-time-limit", str(rules["wall_cap_s"]),
    ]  # fmt: skip
    if rules["residual_rule"] == "capped":
        command += ["--residual-wall-time-limit", str(rules["residual_cap_ms"] / 1000)]
    else:
        command += [
            "--lambda-flops-per-second", str(rules["lambda_flops_per_second"]),
            "--no-residual-wall-time-limit",
        ]  # fmt: skip
    print("Grade a packaged estimator on it with Podium's grader (the meter outside, as scored):")
    print("  " + shlex.join(["podium", "run", "--local", args.benchmark, "submission.tar.gz",
                             "--suite", str(folder)]))  # fmt: skip
    print("or run your estimator on it with whestbench's own runner, under the same caps:")
    print("  " + shlex.join(command))
    return EXIT_OK


# podium run --local BENCHMARK ARCHIVE ---------------------------------------------------


def run_local(args: argparse.Namespace, client: Client) -> int:
    """Grade the tarball on the public suite with Podium's grader, here; 0 when every MLP
    was answered, 1 when one fell back (or the archive would be refused)."""
    archive = Path(args.folder)
    if not archive.is_file():
        raise CliError(
            f"{archive}: no such archive; a metered-estimation phase grades the tarball "
            "`whest package --estimator DIR --output submission.tar.gz` makes."
        )
    for flag, given in (("--dockerfile", args.dockerfile), ("--context", args.context)):
        if given is not None:
            raise CliError(f"{args.benchmark} has no environments: {flag} does not apply.")
    if importlib.util.find_spec(GRADER_MODULE.rpartition(".")[0]) is None:
        raise CliError(GRADER_HINT)
    if validate_archive(archive) != EXIT_OK:
        return EXIT_NOT_PASSED
    rules = client.get_json(f"/benchmarks/{args.benchmark}/estimation/")["rules"]
    with tempfile.TemporaryDirectory(prefix="podium-local-") as scratch_name:
        scratch = Path(scratch_name)
        if args.suite is not None:
            suite_dir = Path(args.suite)
            if not (suite_dir / "metadata.json").is_file():
                raise CliError(f"{suite_dir} is not a suite; `podium suite` downloads one.")
        else:
            suite_dir = scratch / "suite"
            print(f"Downloading the public suite of {args.benchmark} ...", flush=True)
            _download_suite(client, args.benchmark, suite_dir)
        rules_file = scratch / "rules.json"
        rules_file.write_text(json.dumps(rules))
        print(f"Grading {archive.name} with Podium's grader ...", flush=True)
        done = subprocess.run(  # noqa: S603 - this interpreter, a fixed module
            [sys.executable, "-m", GRADER_MODULE, "--archive", str(archive.resolve()),
             "--suite", str(suite_dir.resolve()), "--rules", str(rules_file)],
            stdout=subprocess.PIPE, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        raise CliError("The local grade did not finish (the grader said why above).")
    graded = json.loads(done.stdout)
    print(f"Score {_figure(graded['score'])} on {len(graded['mlps'])} public MLPs (lower is "
          f"better); mean MSE {_figure(graded['mse'])}.")  # fmt: skip
    _print_grade(graded)
    grader = graded.get("grader") or {}
    print(f"Graded here with whestbench {grader.get('whestbench')} and flopscope "
          f"{grader.get('flopscope')}; no entry was made and nothing was charged.")  # fmt: skip
    return EXIT_NOT_PASSED if graded["fallbacks"] else EXIT_OK
