"""Settings that are only safe on a development machine, refused in production.

Production is any process not marked local (``settings.PODIUM_LOCAL``, DEBUG off). There
the web server refuses to start on the public development SECRET_KEY or on
``ALLOWED_HOSTS=*``: ``refuse_insecure_production`` is the first middleware, and Django
builds the middleware chain once, when gunicorn's workers (or runserver) load the
application, so the exception stops them before the first request. The same sentences are
errors of ``manage.py check --deploy`` (``podium.E001``, ``podium.E002``).

The refusal is not raised when the settings are imported: mypy's Django plugin, ``make
run``'s ``sudo manage.py build_network`` (sudo drops PODIUM_LOCAL) and every other command
import them without serving anything. Importing this module registers the check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.exceptions import ImproperlyConfigured, MiddlewareNotUsed

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponse

# Public, since it is in the source: good for `make run` and the tests, never for production.
DEVELOPMENT_SECRET_KEY = "podium-insecure-development-key-change-me-in-production"  # noqa: S105

DEVELOPMENT_KEY_REFUSED = (
    "SECRET_KEY is Podium's public development key: set SECRET_KEY_FILE (or SECRET_KEY) "
    "to a long random secret of your own, or PODIUM_LOCAL=1 on a development machine."
)
ANY_HOST_REFUSED = (
    "ALLOWED_HOSTS=* accepts any Host header (forged links in password-reset mail): "
    "list the portal's own host names, or set PODIUM_LOCAL=1 on a development machine."
)


def production_refusals(
    *, debug: bool, local: bool, secret_key: str, allowed_hosts: Sequence[str]
) -> list[tuple[str, str]]:
    """The (check id, sentence) pairs that forbid serving these settings; [] when none do.

    Nothing is refused with DEBUG on or on a machine marked local.
    """
    if debug or local:
        return []
    refusals = []
    if secret_key == DEVELOPMENT_SECRET_KEY:
        refusals.append(("podium.E001", DEVELOPMENT_KEY_REFUSED))
    if "*" in allowed_hosts:
        refusals.append(("podium.E002", ANY_HOST_REFUSED))
    return refusals


def _refusals() -> list[tuple[str, str]]:
    return production_refusals(
        debug=settings.DEBUG,
        local=settings.PODIUM_LOCAL,
        secret_key=settings.SECRET_KEY,
        allowed_hosts=settings.ALLOWED_HOSTS,
    )


@register(Tags.security, deploy=True)
def check_production_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """`manage.py check --deploy` reports what the web server would refuse."""
    return [Error(sentence, id=check_id) for check_id, sentence in _refusals()]


def refuse_insecure_production(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> NoReturn:
    """Middleware factory, called once when a web server loads the application: raises
    ImproperlyConfigured with the refusals, else takes itself out of the chain (no cost
    per request)."""
    refusals = _refusals()
    if refusals:
        raise ImproperlyConfigured(" ".join(sentence for _, sentence in refusals))
    raise MiddlewareNotUsed
