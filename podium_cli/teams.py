"""``podium team ...``: your team on a benchmark, through the REST API's team endpoints."""

from __future__ import annotations

import argparse
from typing import Any

from podium_cli import config, show
from podium_cli.api import Client
from podium_cli.errors import EXIT_OK, Refused


class TeamClient(Client):
    """The API client, with the one DELETE the team commands need."""

    def delete_json(self, path: str) -> Any:
        response = self._request("DELETE", path)
        return None if response.status_code == 204 else response.json()


def _client(args: argparse.Namespace) -> TeamClient:
    settings = config.load(url_override=getattr(args, "url", None), need_token=True)
    return TeamClient(settings.url, settings.token)


def _print_team(team: dict[str, Any]) -> None:
    print(f"Team {team['name']} on {team['benchmark']} (captain: {team['captain']})")
    print(
        show.table(
            ["MEMBER", "JOINED"],
            [[member["username"], show.when(member["joined_at"])] for member in team["members"]],
        )
    )
    if team["invitations"]:
        pending = ", ".join(invitation["invitee"] for invitation in team["invitations"])
        print(f"Invited, no answer yet: {pending}")
    print(
        f"At most {team['size_max']} members; membership is fixed from "
        f"{show.when(team['frozen_at'])}."
    )


def show_team(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        team = client.get_json(f"/benchmarks/{args.benchmark}/team/")
    except Refused as exc:
        if exc.code != "not_found":
            raise
        team = None
    if team is None:
        print(f"You are in no team on {args.benchmark}: you compete on your own.")
    else:
        _print_team(team)
    invitations = client.get_json("/invitations/")
    if invitations:
        print(
            show.table(
                ["INVITATION", "BENCHMARK", "TEAM", "FROM", "SENT"],
                [
                    [
                        i["id"],
                        i["benchmark"],
                        i["team"],
                        i["invited_by"],
                        show.when(i["created_at"]),
                    ]
                    for i in invitations
                ],
            )
        )
    return EXIT_OK


def create(args: argparse.Namespace) -> int:
    team = _client(args).post_json(f"/benchmarks/{args.benchmark}/team/", {"name": args.name})
    _print_team(team)
    return EXIT_OK


def invite(args: argparse.Namespace) -> int:
    invitation = _client(args).post_json(
        f"/benchmarks/{args.benchmark}/team/invitations/", {"username": args.username}
    )
    print(
        f"Invited {invitation['invitee']} to {invitation['team']} (invitation {invitation['id']})."
    )
    return EXIT_OK


def accept(args: argparse.Namespace) -> int:
    team = _client(args).post_json(f"/invitations/{args.invitation}/accept/", {})
    print(f"You joined {team['name']}.")
    _print_team(team)
    return EXIT_OK


def decline(args: argparse.Namespace) -> int:
    invitation = _client(args).post_json(f"/invitations/{args.invitation}/decline/", {})
    print(f"You declined the invitation to {invitation['team']}.")
    return EXIT_OK


def leave(args: argparse.Namespace) -> int:
    _client(args).post_json(f"/benchmarks/{args.benchmark}/team/leave/", {})
    print(f"You left your team on {args.benchmark}; you compete on your own.")
    return EXIT_OK


def remove(args: argparse.Namespace) -> int:
    team = _client(args).delete_json(f"/benchmarks/{args.benchmark}/team/members/{args.username}/")
    print(f"Removed {args.username}.")
    _print_team(team)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``podium team ACTION ...`` to the parser's subcommands."""
    summary = "your team on a benchmark: create, invite, answer invitations, leave, remove"
    team = sub.add_parser("team", help=summary, description=summary)
    actions = team.add_subparsers(dest="team_command", metavar="ACTION", required=True)

    def action(name: str, handler: Any, text: str) -> argparse.ArgumentParser:
        found: argparse.ArgumentParser = actions.add_parser(name, help=text, description=text)
        found.set_defaults(handler=handler)
        return found

    found = action("show", show_team, "your team on BENCHMARK and your pending invitations")
    found.add_argument("benchmark", metavar="BENCHMARK", help="the benchmark's slug")
    found = action("create", create, "create a team on BENCHMARK, with you as its captain")
    found.add_argument("benchmark", metavar="BENCHMARK", help="the benchmark's slug")
    found.add_argument("name", metavar="NAME", help="the team's name on the board")
    found = action("invite", invite, "invite USERNAME to your team on BENCHMARK")
    found.add_argument("benchmark", metavar="BENCHMARK", help="the benchmark's slug")
    found.add_argument("username", metavar="USERNAME")
    found = action("accept", accept, "accept invitation ID (see `podium team show`)")
    found.add_argument("invitation", metavar="ID", type=int)
    found = action("decline", decline, "decline invitation ID")
    found.add_argument("invitation", metavar="ID", type=int)
    found = action("leave", leave, "leave your team on BENCHMARK")
    found.add_argument("benchmark", metavar="BENCHMARK", help="the benchmark's slug")
    found = action("remove", remove, "the captain removes USERNAME from the team on BENCHMARK")
    found.add_argument("benchmark", metavar="BENCHMARK", help="the benchmark's slug")
    found.add_argument("username", metavar="USERNAME")
