from django.apps import AppConfig


class StandingsConfig(AppConfig):
    name = "portal.standings"
    label = "standings"
    verbose_name = "Final standings"

    def ready(self) -> None:
        # A final run's verdict may call for extra runs (``portal.submissions.hooks``).
        from portal.standings import rerun
        from portal.submissions import hooks

        hooks.final_run_listen(rerun.final_rerun_after_run)

        # A change of membership changes whose nominations a submission is in.
        from portal.standings.nominations import nominations_membership_changed
        from portal.teams import hooks as team_hooks

        team_hooks.membership_register(nominations_membership_changed)
