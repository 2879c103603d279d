"""``manage.py build_network --apply | --check``: install, or verify, the build network
and the host firewall rules that confine every build (see ``scoring.build.buildnet``)."""

from __future__ import annotations

import subprocess
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from scoring import engine
from scoring.build import buildnet, egress


class Command(BaseCommand):
    help = (
        "Create Podium's build network and install the firewall rules that keep builds off "
        "the host and private, link-local, CGNAT, multicast and reserved ranges (--apply, "
        "idempotent), or check that every rule is in place (--check: exit status 0 only "
        "then; it prints what is missing). Needs root."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        action = parser.add_mutually_exclusive_group(required=True)
        action.add_argument("--apply", action="store_true", help="Install, then check.")
        action.add_argument("--check", action="store_true", help="Only check.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["apply"]:
            try:
                report = buildnet.apply()
                buildnet.record(report)
            except (egress.PolicyError, engine.EngineError, OSError) as exc:
                raise CommandError(f"could not apply the build network policy: {exc}") from None
            except subprocess.SubprocessError as exc:
                raise CommandError(f"a firewall tool did not finish: {exc}") from None
        else:
            report = buildnet.check()
        policy = report.policy
        self.stdout.write(
            f"build network {policy.get('network')} on {policy.get('bridge')} "
            f"({policy.get('subnet')}); DNS to {', '.join(policy.get('dns') or ['nothing'])}; "
            f"allowed: {', '.join(policy.get('allowed') or ['nothing'])}"
        )
        if not report.enforced:
            for problem in report.problems:
                self.stderr.write(f"missing: {problem}")
            raise CommandError("the build network policy is NOT enforced; builds wait")
        self.stdout.write("every rule is in place")
