from django.apps import AppConfig


class ContestsConfig(AppConfig):
    name = "portal.contests"
    label = "contests"
