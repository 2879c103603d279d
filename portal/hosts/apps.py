from django.apps import AppConfig


class HostsConfig(AppConfig):
    name = "portal.hosts"
    label = "hosts"
    verbose_name = "Scoring hosts"

    def ready(self) -> None:
        # Imported once the models are loaded: the fleet as the submissions floor asks it.
        from portal.hosts.selectors import (
            hosts_online,
            noise_band_percent,
            reference_spread_percent,
        )
        from portal.submissions import hooks

        hooks.fleet_register(
            hooks.Fleet(
                hosts_online=hosts_online,
                noise_band_pct=noise_band_percent,
                reference_spread_pct=reference_spread_percent,
            )
        )
