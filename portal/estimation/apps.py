from django.apps import AppConfig


class EstimationConfig(AppConfig):
    name = "portal.estimation"
    label = "estimation"
    verbose_name = "Metered estimation"

    def ready(self) -> None:
        from portal.contests.models import Benchmark
        from portal.estimation.standings import EstimationStandings
        from portal.standings.publishing import register_kind

        register_kind(Benchmark.ESTIMATION, EstimationStandings())
