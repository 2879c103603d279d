import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()

from portal.core.cpus import pin_off_scoring  # noqa: E402 - settings first

# Each web worker (and what it starts) stays off the CPUs that time scored runs.
pin_off_scoring()
