from django.apps import AppConfig


class CampaignsConfig(AppConfig):
    name = "portal.campaigns"
    label = "campaigns"
    verbose_name = "Campaigns"

    def ready(self) -> None:
        # Imported once the models are loaded: an official submission of a campaign
        # benchmark waits for a round (``portal.submissions.hooks``, by Benchmark.kind).
        from portal.campaigns import queue
        from portal.contests.models import Benchmark
        from portal.submissions import hooks

        hooks.kind_register(
            Benchmark.CAMPAIGN,
            hooks.KindHooks(
                entry_queued=queue.campaign_entry_queue,
                entry_disqualified=queue.campaign_entry_disqualified,
            ),
        )
