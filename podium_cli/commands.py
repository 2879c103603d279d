"""The subcommands other than ``watch``: each takes the parsed arguments, returns an exit code."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import socket
from pathlib import Path
from typing import Any

from podium_cli import config, estimation, local, show
from podium_cli.api import Client
from podium_cli.errors import EXIT_OK, CliError, Refused
from podium_cli.pack import upload_for

DEVICE_HEADER = "X-Podium-Device"


def client_for(args: argparse.Namespace, *, need_token: bool = True) -> Client:
    settings = config.load(url_override=getattr(args, "url", None), need_token=need_token)
    return Client(settings.url, settings.token)


def login(args: argparse.Namespace) -> int:
    url = config.normalize_url(args.server)
    username = args.username or _ask("Username: ")
    if not username:
        raise CliError("No username given; type it when asked, or pass --username.")
    password = os.environ.get("PODIUM_PASSWORD") or getpass.getpass(f"Password for {username}: ")
    label = f"podium command line on {socket.gethostname()}"[:100]
    client = Client(url)
    # The device string of this client's last sign-in here: the server counts failures
    # with it at this client only, so others' guesses at the account do not lock it out.
    device = config.stored_device(url)
    if device:
        client.session.headers[DEVICE_HEADER] = device
    try:
        answer = client.post_json(
            "/tokens/", {"username": username, "password": password, "label": label}
        )
    except Refused as exc:
        if exc.code == "not_authenticated":
            raise CliError(f"Sign-in refused: {exc.detail}") from exc
        raise
    device = str(answer["device"]) if answer.get("device") else None
    path = config.save(config.Settings(url=url, token=str(answer["token"]), device=device))
    print(f"Signed in to {url} as {username}.")
    print(f"Token saved in {path} (readable by you only).")
    return EXIT_OK


def _ask(prompt: str) -> str:
    try:
        return input(prompt).strip()
    except EOFError:
        return ""


def benchmarks(args: argparse.Namespace) -> int:
    rows = client_for(args, need_token=False).get_json("/benchmarks/")
    if not rows:
        print("No benchmarks yet.")
        return EXIT_OK
    print(
        show.table(
            ["SLUG", "TITLE", "STATUS", "OPENS", "CLOSES"],
            [
                [
                    row["slug"],
                    row["title"],
                    row["status"],
                    show.when(row["opens_at"]),
                    show.when(row["closes_at"]),
                ]
                for row in rows
            ],
        )
    )
    return EXIT_OK


def env_create(args: argparse.Namespace) -> int:
    dockerfile = Path(args.dockerfile)
    if not dockerfile.is_file():
        raise CliError(f"{dockerfile}: no such Dockerfile.")
    name = args.name or dockerfile.resolve().parent.name or "environment"
    client = client_for(args)
    files = {"dockerfile": ("Dockerfile", dockerfile)}
    with contextlib.ExitStack() as stack:
        if args.context:
            context = stack.enter_context(upload_for(Path(args.context)))
            files["context"] = (context.name, context.path)
        environment = client.post_files(
            f"/benchmarks/{args.benchmark}/environments/", {"name": name}, files
        )
    print(f"Environment {environment['id']} ({environment['name']}): {environment['status']}")
    print(f"Its build is queued; `podium env list {args.benchmark}` shows when it is ready.")
    return EXIT_OK


def env_list(args: argparse.Namespace) -> int:
    client = client_for(args)
    if args.benchmark:
        slugs = [args.benchmark]
    else:
        slugs = [row["slug"] for row in client.get_json("/benchmarks/")]
    found: list[tuple[str, dict[str, Any]]] = [
        (slug, environment)
        for slug in slugs
        for environment in client.get_json(f"/benchmarks/{slug}/environments/")
    ]
    if not found:
        where = f"on {args.benchmark}" if args.benchmark else "on any benchmark"
        print(f"You have no environments {where}; `podium env create` makes one.")
        return EXIT_OK
    headers = ["ID", "NAME", "STATUS", "DIGEST"]
    rows = [
        [env["id"], env["name"], env["status"], env.get("image_digest") or "-"]
        for _slug, env in found
    ]
    if not args.benchmark:
        headers.insert(0, "BENCHMARK")
        rows = [[slug, *row] for (slug, _env), row in zip(found, rows, strict=True)]
    print(show.table(headers, rows))
    for _slug, env in found:
        if env.get("failure_reason"):
            print(f"Environment {env['id']}: {env['failure_reason']}")
    return EXIT_OK


def submit(args: argparse.Namespace) -> int:
    client = client_for(args)
    found = client.get_json(f"/benchmarks/{args.benchmark}/")
    if found.get("kind") == "estimation":
        return estimation.submit(args, client)
    if args.env is None:
        raise CliError(
            f"{args.benchmark} builds each submission in an environment: give --env ID "
            f"(`podium env list {args.benchmark}` lists yours)."
        )
    kind = "practice" if args.practice else "official"
    source = Path(args.source)
    with upload_for(source) as upload:
        if upload.packed_files is not None:
            packed = show.size(upload.path.stat().st_size)
            print(f"Packed {show.plural(upload.packed_files, 'file')} from {source} ({packed}).")
        submission = client.post_files(
            f"/benchmarks/{args.benchmark}/submissions/",
            {
                "environment": str(args.env),
                "kind": kind,
                "confirm_boundary": "true" if args.confirm_boundary else "false",
            },
            {"source": (upload.name, upload.path)},
        )
    what = "official attempt" if kind == "official" else "practice run"
    print(
        f"Submission {submission['id']} ({what} on {args.benchmark}, "
        f"environment {args.env}): {submission['status']}"
    )
    print(f"Follow it with: podium watch {submission['id']}")
    return EXIT_OK


def leaderboard(args: argparse.Namespace) -> int:
    board = client_for(args, need_token=False).get_json(
        f"/benchmarks/{args.benchmark}/leaderboard/"
    )
    rows = board["rows"]
    if not rows:
        print(f"No passing official runs on {args.benchmark} yet.")
        return EXIT_OK
    print(
        show.table(
            ["RANK", "ENTRANT", "WALL TIME", "MATCHES", "SUBMITTED"],
            [
                [
                    row["rank"],
                    row["entrant"],
                    show.wall_time(row["wall_time_ns"]),
                    f"{row['matches']}/{row['total']}",
                    show.when(row["submitted_at"]),
                ]
                for row in rows
            ],
        )
    )
    return EXIT_OK


def quota(args: argparse.Namespace) -> int:
    answer = client_for(args).get_json(f"/benchmarks/{args.benchmark}/quota/")
    rows = []
    for kind in ("official", "practice"):
        part = answer[kind]
        rows.append(
            [
                kind,
                f"{part['used_today']} of {part['attempts_per_day']}",
                part["remaining_today"],
                show.when(part["resets_at"]),
                show.when(part.get("next_available_at"))
                if part.get("next_available_at")
                else "none before closing",
            ]
        )
    print(show.table(["KIND", "USED TODAY", "LEFT TODAY", "RESETS", "NEXT AVAILABLE"], rows))
    print(f"Days are counted in {answer['timezone']}.")
    return EXIT_OK


def validate(args: argparse.Namespace) -> int:
    if args.folder is None:  # `podium validate ARCHIVE`: an estimator, checked locally
        return estimation.validate_archive(Path(args.benchmark))
    return local.validate(args, client_for(args))


def entries(args: argparse.Namespace) -> int:
    return estimation.entries(args, client_for(args))


def entry(args: argparse.Namespace) -> int:
    return estimation.entry(args, client_for(args))


def suite(args: argparse.Namespace) -> int:
    return estimation.suite(args, client_for(args))


def run(args: argparse.Namespace) -> int:
    client = client_for(args)
    # What a local run downloads it runs: a portal it reaches over plain http is refused
    # before the first request.
    local.check_transport(client.url, insecure_http=args.insecure_http)
    found = client.get_json(f"/benchmarks/{args.benchmark}/")
    if found.get("kind") == "estimation":
        return estimation.run_local(args, client)
    if args.suite is not None:
        raise CliError(
            f"{args.benchmark} is not a metered-estimation phase: --suite does not apply."
        )
    return local.run_local(args, client)
