from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "portal.notifications"
    label = "notifications"

    def ready(self) -> None:
        # Imported once the models are loaded: every move of a submission may be a verdict
        # to mail (``verdict_mail_on_commit`` ignores a status that is not final).
        from portal.notifications.services import verdict_mail_on_status
        from portal.submissions import hooks

        hooks.status_listen(verdict_mail_on_status)
