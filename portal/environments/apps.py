from django.apps import AppConfig


class EnvironmentsConfig(AppConfig):
    name = "portal.environments"
    label = "environments"
