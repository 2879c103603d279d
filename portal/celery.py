"""The Celery application shared by the web (to enqueue) and the workers."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("podium")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["scoring", "portal.campaigns", "portal.notifications"])
