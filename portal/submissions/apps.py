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
