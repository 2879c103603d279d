from django.apps import AppConfig


class HostsConfig(AppConfig):
    name = "portal.hosts"
    label = "hosts"
    verbose_name = "Scoring hosts"
