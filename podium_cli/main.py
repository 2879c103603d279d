"""Entry point of the ``podium`` command: the argument parser and the dispatch."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from podium_cli import __version__, commands, standings, teams, watch
from podium_cli.errors import EXIT_INTERRUPTED, CliError

Handler = Callable[[argparse.Namespace], int]

DESCRIPTION = """\
The entrant's client for a Podium benchmark contest: sign in, build environments from
Dockerfiles, upload submissions, follow them to their verdict, and read the
leaderboard and your daily allowance.

Typical session (the ladder: validate, run locally, a practice run, then an attempt):
  podium login https://podium.example.org
  podium benchmarks
  podium validate demo examples/starter-kit
  podium run --local demo examples/starter-kit
  podium env create demo examples/starter-kit/Dockerfile
  podium env list demo                  (wait until the environment is ready)
  podium submit demo --env 7 --practice examples/starter-kit
  podium submit demo --env 7 examples/starter-kit
  podium watch 42
  podium leaderboard demo

After the close:
  podium nominate demo 42 57            (before the nomination deadline)
  podium standings demo --csv final.csv (once published)

A metered-estimation phase (whestbench installed):
  podium suite whest-p1 -o suite        (the public suite, for local runs)
  whest package --estimator estimator.py --output submission.tar.gz
  podium validate submission.tar.gz
  podium run --local whest-p1 submission.tar.gz --suite suite
  podium submit whest-p1 submission.tar.gz
  podium entries whest-p1
  podium entry 12
  podium nominate 12                    (--withdraw undoes it)
"""

EPILOG = """\
exit codes:
  0    done (for watch: the submission passed)
  1    watch: the submission ended without passing (failed, errored, build_failed,
       rejected_verification, infra_failed or cancelled); validate: something would be
       refused; run --local: the local run did not pass
  2    wrong usage, a local problem (no sign-in, missing file) or a refusal by the
       server (closed window, no attempts left, refused archive or Dockerfile, ...)
  3    the server could not be reached, or failed
  130  interrupted (Ctrl-C); a submission being watched carries on

configuration:
  `podium login` keeps the server address and your token in config.json, in the
  folder named by $PODIUM_CONFIG_DIR or else the user configuration folder
  (~/.config/podium on Linux), readable by you only. $PODIUM_URL and $PODIUM_TOKEN
  override what is stored; $PODIUM_PASSWORD gives `podium login` the password.
"""


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("give a number of seconds above 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podium",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"podium {__version__}")
    parser.add_argument(
        "--url",
        metavar="URL",
        help="the server to talk to, instead of the one `podium login` stored",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, handler: Handler, summary: str, **kw: str) -> argparse.ArgumentParser:
        found = sub.add_parser(name, help=summary, description=kw.get("description", summary))
        found.set_defaults(handler=handler)
        return found

    login = command(
        "login",
        commands.login,
        "sign in to a Podium server and keep a personal token",
        description="Sign in with your username and password; the token the server gives "
        "back is stored (mode 0600) for the other commands. The password is read without "
        "echo, or from $PODIUM_PASSWORD.",
    )
    login.add_argument("server", metavar="URL", help="the portal's address, e.g. https://host")
    login.add_argument("--username", help="your username (asked for when left out)")

    command(
        "benchmarks",
        commands.benchmarks,
        "list the benchmarks and their upload windows",
        description="List every benchmark with its status (upcoming, open, closed) and its "
        "upload window, in your local time. Needs no sign-in: `podium --url URL benchmarks`.",
    )

    summary = "create and list your environments (Docker images built from your Dockerfiles)"
    env = sub.add_parser("env", help=summary, description=summary)
    env_sub = env.add_subparsers(dest="env_command", metavar="ACTION", required=True)
    create = env_sub.add_parser(
        "create",
        help="upload a Dockerfile and queue its build (costs no attempt)",
        description="Upload a Dockerfile (and optionally a build context) as a new "
        "environment of BENCHMARK. Its build is queued; `podium env list` shows when it "
        "is ready.",
    )
    create.set_defaults(handler=commands.env_create)
    create.add_argument("benchmark", metavar="BENCHMARK", help="the benchmark's slug")
    create.add_argument("dockerfile", metavar="DOCKERFILE", help="path of the Dockerfile")
    create.add_argument(
        "--name", help="a name for the environment (default: the Dockerfile's folder name)"
    )
    create.add_argument(
        "--context",
        metavar="DIR_OR_ARCHIVE",
        help="build context: a folder (packed as .tar.gz) or a .tar.gz, .tar or .zip",
    )
    listing = env_sub.add_parser(
        "list",
        help="your environments with their status and image digest",
        description="List your environments on BENCHMARK, or on every benchmark.",
    )
    listing.set_defaults(handler=commands.env_list)
    listing.add_argument(
        "benchmark", metavar="BENCHMARK", nargs="?", help="a benchmark's slug (default: all)"
    )

    check = command(
        "validate",
        commands.validate,
        "check an entry folder, or an estimator tarball, uploading nothing",
        description="Check FOLDER as the portal would take it: the archive it packs into "
        "against the benchmark's size limit, `run` (executable by others) and `build.sh` at "
        "its top level, and its Dockerfile (FOLDER/Dockerfile, or --dockerfile) judged by "
        "the benchmark's policy on the portal, with line numbers. With one argument, "
        "`podium validate ARCHIVE` checks a metered-estimation tarball (`whest package`'s) "
        "on this machine, with whestbench's own validate_package and its caps "
        "(whestbench.limits), printing each problem; it needs whestbench installed (exit 2 "
        "without) and no sign-in. Nothing is created or charged. Exits 1 when something "
        "would be refused.",
    )
    check.usage = (
        "podium validate [-h] [--dockerfile PATH] BENCHMARK FOLDER\n       podium validate ARCHIVE"
    )
    check.add_argument(
        "benchmark", metavar="BENCHMARK", help="the benchmark's slug (or the estimator ARCHIVE)"
    )
    check.add_argument("folder", metavar="FOLDER", nargs="?", help="the entry's folder")
    check.add_argument(
        "--dockerfile", metavar="PATH", help="the Dockerfile to judge (default: FOLDER/Dockerfile)"
    )

    local = command(
        "run",
        commands.run,
        "score an entry on this machine in the sandbox that scores it (--local)",
        description="With --local: build FOLDER's environment (FOLDER/Dockerfile, or "
        "--dockerfile) with the local Docker Engine, run build.sh in it as the build worker "
        "does, and score the result on the practice cohort under the portal's supervisor "
        "(its SHA-256 checked), container spec and limits. Prints the verdict, matches, "
        "wall time, resource readings and log tails, and where this machine differs from "
        "a scoring host. Uses no attempt. Exits 1 when the run did not pass. On a "
        "metered-estimation phase, FOLDER is the tarball `whest package` makes: it is "
        "checked as `podium validate ARCHIVE` checks it, then graded on the phase's public "
        "suite (downloaded, or --suite DIR) by Podium's own grader (the grader image on the "
        "local Docker Engine, the meter outside it), and its MLPs printed as the entry page "
        "shows them; exits 1 when an MLP fell back.",
    )
    local.add_argument("benchmark", metavar="BENCHMARK", help="the benchmark's slug")
    local.add_argument(
        "folder", metavar="FOLDER", help="the entry's folder (an estimation phase: its ARCHIVE)"
    )
    local.add_argument(
        "--suite",
        metavar="DIR",
        help="an estimation phase: the public suite `podium suite` unpacked (default: download)",
    )
    local.add_argument(
        "--local", action="store_true", required=True, help="run on this machine (required)"
    )
    local.add_argument(
        "--dockerfile",
        metavar="PATH",
        help="the environment's Dockerfile (default: FOLDER/Dockerfile)",
    )
    local.add_argument(
        "--context", metavar="DIR", help="the environment's build context (default: none)"
    )
    local.add_argument(
        "--build-network",
        default="default",
        metavar="NETWORK",
        help="the network of the docker build and of build.sh (default: Docker's default; "
        "the portal's builds reach only the hosts the benchmark allows; `none` cuts them off)",
    )
    local.add_argument(
        "--keep-images", action="store_true", help="keep the built images (podium-local/...)"
    )
    local.add_argument(
        "--insecure-http",
        action="store_true",
        help="allow a portal at a plain http:// address other than this machine's (the "
        "supervisor and the sandbox it sends could be swapped on the way)",
    )

    submit = command(
        "submit",
        commands.submit,
        "upload a folder or an archive as an official attempt (or a practice run)",
        description="Upload SOURCE to BENCHMARK, built in your environment ID. A folder is "
        "packed as a .tar.gz of everything in it (paths relative to it, executable bits "
        "kept; `build.sh` and/or `run` belong at its top level); a .tar.gz, .tgz, .tar or "
        ".zip is sent as it is. An official upload uses one of today's attempts once "
        "accepted. On a metered-estimation phase SOURCE is the tarball `whest package` "
        "made, entered as it is (no --env), charged to your team's day once accepted.",
    )
    submit.add_argument("benchmark", metavar="BENCHMARK", help="the benchmark's slug")
    submit.add_argument("source", metavar="SOURCE", help="a folder, or a .tar.gz/.tar/.zip")
    submit.add_argument(
        "--env",
        type=int,
        metavar="ID",
        help="id of one of your ready environments (required but on an estimation phase)",
    )
    submit.add_argument(
        "--practice",
        action="store_true",
        help="a practice run on the public practice cohort (its own allowance, off the board)",
    )
    submit.add_argument(
        "--confirm-boundary",
        action="store_true",
        help="confirm the benchmark's validation-data boundary (its rules page states it); an "
        "official upload to a benchmark that states one is refused without",
    )

    follow = command(
        "watch",
        watch.watch,
        "follow a submission's timeline and logs until its verdict",
        description="Print each step of the submission as it happens, with the new lines "
        "of its build and run logs, then the verdict (matches and wall time). Exits 0 when "
        "it passed, 1 when it ended otherwise. Ctrl-C stops watching, not the submission.",
    )
    follow.add_argument("submission", metavar="SUBMISSION", type=int, help="the submission id")
    follow.add_argument(
        "--interval",
        type=positive_float,
        default=2.0,
        metavar="S",
        help="seconds between polls (default: 2)",
    )
    follow.add_argument("--no-logs", action="store_true", help="show the timeline only")

    board = command(
        "leaderboard",
        commands.leaderboard,
        "the benchmark's leaderboard",
        description="Show each entrant's best passing official run on BENCHMARK, fastest "
        "first, with its wall time and matches. Needs no sign-in.",
    )
    board.add_argument("benchmark", metavar="BENCHMARK", help="the benchmark's slug")

    allowance = command(
        "quota",
        commands.quota,
        "your official and practice attempts used and left today",
        description="Show your official and practice attempts used and left today on "
        "BENCHMARK, and when the day resets (days follow the benchmark's attempt timezone).",
    )
    allowance.add_argument("benchmark", metavar="BENCHMARK", help="the benchmark's slug")

    listed = command(
        "entries",
        commands.entries,
        "your team's entries on a metered-estimation phase",
        description="List your team's (or, on your own, your) entries on BENCHMARK, newest "
        "first: status, public and withheld scores (withheld: after the close), fallbacks, "
        "nomination, who entered it and when.",
    )
    listed.add_argument("benchmark", metavar="BENCHMARK", help="the phase's slug")

    shown = command(
        "entry",
        commands.entry,
        "one estimation entry, MLP by MLP",
        description="Show entry ID: its status, scores, compute figures and ratio, and a "
        "table of its MLPs (MSE, score, FLOPs, residual and wall time, fallback and why): "
        "the public MLPs before the close, every one after. Another team's entry on the "
        "board shows only its board row.",
    )
    shown.add_argument("entry", metavar="ID", type=int, help="the entry's id")

    download = command(
        "suite",
        commands.suite,
        "download a metered-estimation phase's public suite for local runs",
        description="Download BENCHMARK's public suite and unpack it into DIR (a new or "
        "empty folder), a whestbench dataset, then print the `whest run --dataset DIR "
        "--runner subprocess` command that runs your estimator on it under the phase's "
        "budget and caps.",
    )
    download.add_argument("benchmark", metavar="BENCHMARK", help="the phase's slug")
    download.add_argument(
        "-o", "--output", metavar="DIR", required=True, help="the folder to unpack it into"
    )

    standings.add_commands(sub)
    teams.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except CliError as exc:
        print(f"podium: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("\npodium: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
