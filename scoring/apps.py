"""The worker side as a Django app: it has no models; it is one so that its management
commands (``purge_artifacts``, which talks to the Docker Engine) live next to the code
they call instead of in ``portal``."""

from __future__ import annotations

from django.apps import AppConfig


class ScoringConfig(AppConfig):
    name = "scoring"
    label = "scoring"
    verbose_name = "Scoring (worker side)"
