"""``manage.py hosts``: the scoring fleet from the command line.

``hosts list`` prints every host (retired ones too); ``hosts drain|resume|retire NAME``
moves one host, audited with no actor (an operator on the machine), as the admin does.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from portal.core.errors import PodiumError
from portal.hosts import services
from portal.hosts.models import ScoringHost
from portal.hosts.selectors import host_state_label, memory_text

MOVES = {
    "drain": (services.host_drain, "draining: it finishes its current run and takes no more"),
    "resume": (services.host_resume, "active: it takes work again"),
    "retire": (services.host_retire, "retired: it has left the fleet"),
}
COLUMNS = ("NAME", "CLASS", "STATE", "LAST HEARTBEAT", "CORES", "MEMORY")


class Command(BaseCommand):
    help = "List the scoring hosts, or drain, resume or retire one (audited)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        commands = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")
        commands.add_parser("list", help="Every scoring host with its state and heartbeat.")
        for move, (_, outcome) in MOVES.items():
            sub = commands.add_parser(move, help=f"Make a host {outcome.split(':')[0]}.")
            sub.add_argument("name", metavar="NAME", help="The host's registered name.")
            sub.add_argument("--reason", default="", help="Why (kept in the audit log).")

    def handle(self, *args: Any, **options: Any) -> None:
        subcommand: str = options["subcommand"]
        if subcommand == "list":
            self._list()
            return
        service, outcome = MOVES[subcommand]
        try:
            host = service(name=options["name"], actor=None, reason=options["reason"])
        except PodiumError as exc:
            raise CommandError(exc.detail) from None
        self.stdout.write(f"{host.name} is now {outcome}.")

    def _list(self) -> None:
        now = timezone.now()
        rows = [
            (
                host.name,
                host.hardware_class_id,
                host_state_label(host, now),
                host.last_heartbeat_at.isoformat(timespec="seconds"),
                str(host.cpu_cores),
                memory_text(host.memory_bytes),
            )
            for host in ScoringHost.objects.order_by("hardware_class_id", "name")
        ]
        if not rows:
            self.stdout.write("No scoring host has registered yet.")
            return
        widths = [max(len(row[i]) for row in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
        for row in [COLUMNS, *rows]:
            self.stdout.write(
                "  ".join(
                    cell.ljust(width) for cell, width in zip(row, widths, strict=True)
                ).rstrip()
            )
