from django.apps import AppConfig


class CampaignsConfig(AppConfig):
    name = "portal.campaigns"
    label = "campaigns"
    verbose_name = "Campaigns"
