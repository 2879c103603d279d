from django.apps import AppConfig


class EstimationConfig(AppConfig):
    name = "portal.estimation"
    label = "estimation"
    verbose_name = "Metered estimation"
