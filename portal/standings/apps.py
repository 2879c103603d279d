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
