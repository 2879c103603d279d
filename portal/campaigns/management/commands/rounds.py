"""``manage.py rounds start|void|pause|resume CAMPAIGN``: the staff controls of a campaign's
rounds from the host's shell, audited as the system's own actions (no actor).

- ``start``: start a round now, whatever the trigger says (the leader and the oldest
  queued challengers; refused when paused, without a baseline, with a round open or
  nobody queued).
- ``void --round ID --reason TEXT``: void an open round of the campaign (its challengers
  are queued again; its ordinal is spent).
- ``pause`` / ``resume`` (``--reason`` optional): no new round starts while paused.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from portal.campaigns import controls, selectors
from portal.campaigns.models import Round
from portal.core.errors import PodiumError


class Command(BaseCommand):
    help = "Start a round now, void an open round, or pause/resume a campaign (audited)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("action", choices=["start", "void", "pause", "resume"])
        parser.add_argument("campaign", metavar="CAMPAIGN", help="The campaign's slug.")
        parser.add_argument("--round", type=int, metavar="ID", help="void: the round's id.")
        parser.add_argument("--reason", default="", help="Why (required to void).")

    def handle(self, *args: Any, **options: Any) -> None:
        campaign = selectors.campaign_by_slug(options["campaign"])
        if campaign is None:
            raise CommandError(f"No campaign {options['campaign']!r}.")
        action, reason = options["action"], options["reason"]
        try:
            if action == "start":
                started = controls.round_start_now(campaign=campaign, actor=None)
                self.stdout.write(f"Round {started.ordinal} (id {started.pk}) is pending.")
            elif action == "void":
                if options["round"] is None or not reason.strip():
                    raise CommandError("void needs --round ID and --reason TEXT.")
                round_ = Round.objects.filter(pk=options["round"], campaign=campaign).first()
                if round_ is None:
                    raise CommandError(f"{campaign.slug} has no round {options['round']}.")
                controls.round_void(round_=round_, reason=reason, actor=None)
                self.stdout.write(f"Round {round_.ordinal} (id {round_.pk}) is void.")
            else:
                paused = action == "pause"
                controls.campaign_pause(campaign=campaign, actor=None, paused=paused, reason=reason)
                self.stdout.write(f"{campaign.slug} is {'paused' if paused else 'running'}.")
        except PodiumError as exc:
            raise CommandError(exc.detail) from None
