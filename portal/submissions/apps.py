from django.apps import AppConfig


class SubmissionsConfig(AppConfig):
    name = "portal.submissions"
    label = "submissions"

    def ready(self) -> None:
        # Imported once the models are loaded: the environments floor counts an entrant's
        # submission builds as builds in flight, and keeps an environment they use.
        from portal.environments import hooks
        from portal.submissions.selectors import builds_in_flight, environment_in_use

        hooks.users_register(
            hooks.EnvironmentUsers(builds_in_flight=builds_in_flight, in_use=environment_in_use)
        )

        # The teams floor counts a team's attempts with the ledger, and a change of
        # membership redraws the board rows of the team and of who left it.
        from portal.submissions.attempts import merge_counts
        from portal.submissions.leaderboard import leaderboard_refresh_team
        from portal.teams import hooks as team_hooks

        team_hooks.merge_counts_register(merge_counts)
        team_hooks.membership_register(leaderboard_refresh_team)
