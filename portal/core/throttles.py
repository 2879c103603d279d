"""The throttle of the API's POST endpoints, also counting the web's upload forms
(``portal.contests.uploads.upload_throttle_check``), so web and API uploads share one count."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from portal.core.login_limits import client_address


class PostRateThrottle(ScopedRateThrottle):
    """The view's ``throttle_scope``, on POST only; rates read from settings at each request.

    (DRF's own throttles read ``DEFAULT_THROTTLE_RATES`` once, at import.) Anonymous callers
    are counted by address, read as the failed sign-in limits read it (``PODIUM_TRUSTED_PROXIES``),
    signed-in ones by user; the counts live in the shared default cache. A refusal is 429
    ``throttled``.
    """

    def allow_request(self, request: Request, view: APIView) -> bool:
        if request.method != "POST":
            return True
        return super().allow_request(request, view)

    def get_rate(self) -> str | None:
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(str(self.scope))
        return None if rate is None else str(rate)

    def get_ident(self, request: Request) -> str:
        # A plain Django request works too (the web upload form counts with this throttle).
        return client_address(getattr(request, "_request", request))
