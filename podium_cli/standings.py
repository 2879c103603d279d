"""The end of a contest from the entrant's side: nominating the submissions that enter the
final standings, and reading the published standings (with a local check of their digest)."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import Any

from podium_cli import estimation, show
from podium_cli.commands import client_for
from podium_cli.errors import EXIT_OK, CliError


def _print_nominations(state: dict[str, Any]) -> None:
    status = "open" if state["open"] else "closed"
    print(f"Nominations are {status}; the deadline is {show.when(state['deadline'])}.")
    team = state.get("team") or ""
    whose = f"team {team}'s" if team else "your"
    if team:
        print(f"Nominations are team {team}'s: any member sets them, at most two for the team.")
    named = ", ".join(str(pk) for pk in state["nominated"]) or "none"
    counted = ", ".join(str(pk) for pk in state["counted"]) or "none"
    if state.get("set_by"):
        print(f"Nominated: {named} (by {state['set_by']}, {show.when(state['set_at'])})")
    else:
        print(f"Nominated: {named}")
    if state["default"]:
        print(f"Counted: {counted} (nothing named: {whose} two best passing submissions count)")
    else:
        print(f"Counted: {counted}")
    eligible = ", ".join(str(pk) for pk in state["eligible"]) or "none yet"
    print(f"Eligible ({whose} passing official submissions, best first): {eligible}")


def nominations(args: argparse.Namespace) -> int:
    state = client_for(args).get_json(f"/benchmarks/{args.benchmark}/nominations/")
    _print_nominations(state)
    return EXIT_OK


def nominate(args: argparse.Namespace) -> int:
    # `podium nominate ID [--withdraw]`: an estimation entry (one number and nothing else;
    # a benchmark alone names no submission, so no call of the other form looks like it).
    if args.withdraw or (not args.default and not args.submission and args.benchmark.isdigit()):
        if args.default or args.submission or not args.benchmark.isdigit():
            raise CliError("Give one estimation entry's id: `podium nominate ID [--withdraw]`.")
        return estimation.nominate(args, client_for(args), int(args.benchmark))
    if args.default == bool(args.submission):
        raise CliError("Name one or two submission ids, or give --default (not both).")
    ids = [] if args.default else args.submission
    state = client_for(args).put_json(
        f"/benchmarks/{args.benchmark}/nominations/", {"submission_ids": ids}
    )
    _print_nominations(state)
    return EXIT_OK


def standings(args: argparse.Namespace) -> int:
    client = client_for(args, need_token=False)
    found = client.get_json(f"/benchmarks/{args.benchmark}/standings/")
    sources = {
        "final_rerun": "the final rerun",
        "estimation_final": "the final rerun of the estimators",
    }
    source = sources.get(found["source"], "the leaderboard")
    print(
        f"Final standings of {found['benchmark']}, published {show.when(found['published_at'])} "
        f"from {source}."
    )
    if found["source"] == "estimation_final":
        table = show.table(
            ["RANK", "TEAM OR ENTRANT", "FINAL SCORE", "ENTRY"],
            [
                [row["rank"], row["team"] or row["entrant"], f"{row['score']:.6g}", row["entry_id"]]
                for row in found["rows"]
            ],
        )
    else:
        table = show.table(
            ["RANK", "ENTRANT", "WALL TIME", "RUNS", "SUBMISSION", "TIED"],
            [
                [
                    row["rank"],
                    row["entrant"],
                    show.wall_time(row["wall_time_ns"]),
                    row["runs"],
                    row["submission_id"],
                    "tied" if row["tied"] else "",
                ]
                for row in found["rows"]
            ],
        )
    print(table)
    print(f"Digest: {found['digest']}")
    for correction in found["corrections"]:
        print(f"Corrected {show.when(correction['at'])}: {correction['reason']}")
    if args.csv:
        body, headers = client.get_bytes(f"/benchmarks/{args.benchmark}/standings.csv")
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if digest != found["digest"] or headers.get("X-Podium-Digest") != found["digest"]:
            raise CliError(
                f"The CSV's SHA-256 ({digest}) is not the published digest ({found['digest']}); "
                "it was not saved."
            )
        Path(args.csv).write_bytes(body)
        print(f"Saved the CSV to {args.csv}; its SHA-256 is the published digest.")
    return EXIT_OK


def add_commands(sub: Any) -> None:
    """Register ``nominations``, ``nominate`` and ``standings`` on the main parser."""
    shown = sub.add_parser(
        "nominations",
        help="your team's (or your) nominations for the final standings",
        description="Show which of your team's (or, on your own, your) submissions count for "
        "BENCHMARK's final standings, which were named and by whom, which may be named, and "
        "the deadline.",
    )
    shown.set_defaults(handler=nominations)
    shown.add_argument("benchmark", metavar="BENCHMARK", help="the benchmark's slug")

    named = sub.add_parser(
        "nominate",
        help="name the submissions that enter the final standings (at most two), or "
        "nominate an estimation entry for the final rerun",
        usage="podium nominate BENCHMARK [SUBMISSION ...] [--default]\n"
        "       podium nominate ENTRY [--withdraw]",
        description="Name up to two passing official submissions of BENCHMARK for the final "
        "standings, replacing earlier ones: in a team, for the team (any member's "
        "submissions, at most two for the whole team); --default goes back to the two best. "
        "Allowed until the nomination deadline. On a metered-estimation phase, `podium "
        "nominate ENTRY` nominates that graded entry of your team for the final rerun "
        "(at most the phase's nominations_max per team) and --withdraw withdraws it.",
    )
    named.set_defaults(handler=nominate)
    named.add_argument(
        "benchmark", metavar="BENCHMARK", help="the benchmark's slug (or an estimation entry's id)"
    )
    named.add_argument("submission", metavar="SUBMISSION", type=int, nargs="*")
    named.add_argument("--default", action="store_true", help="name none: your two best count")
    named.add_argument(
        "--withdraw", action="store_true", help="an estimation entry: withdraw its nomination"
    )

    final = sub.add_parser(
        "standings",
        help="the published final standings",
        description="Show BENCHMARK's published final standings with their digest and any "
        "corrections. Needs no sign-in. --csv saves the canonical CSV after checking that "
        "its SHA-256 is the published digest.",
    )
    final.set_defaults(handler=standings)
    final.add_argument("benchmark", metavar="BENCHMARK", help="the benchmark's slug")
    final.add_argument("--csv", metavar="FILE", help="save the canonical CSV here")
