"""Failed sign-ins, counted in one place for the browser form and ``POST /api/v1/tokens/``.

Both go through allauth's adapter, whose ``login_failed`` rate limit (``ACCOUNT_RATE_LIMITS``
in settings) counts every attempt per client address and per account in the default cache,
which all processes share, and takes the attempt back when the password was right. Past the
limit even the right password is refused until the window has passed: the browser form shows
allauth's message, the token endpoint answers 429 ``throttled`` with ``Retry-After``.

The client address is read once, here, for these limits and for the API's throttles:
REMOTE_ADDR, or with ``PODIUM_TRUSTED_PROXIES`` = n the n-th address from the right of
X-Forwarded-For (the one the outermost trusted proxy saw); an IPv6 address counts by its /64,
and requests whose address cannot be read count together as one.
"""

from __future__ import annotations

import math
import time
from typing import Any

from allauth.account.adapter import DefaultAccountAdapter, get_adapter
from allauth.core.internal import ratelimit
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.cache import cache
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q
from django.http import HttpRequest

APP = "allauth.account"
ACTION = "login_failed"
UNKNOWN_ADDRESS = "unknown"


class LoginLimited(Exception):
    """Too many failed sign-ins at this account or from this address."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


def client_address(request: HttpRequest) -> str:
    """The caller's address as every limit counts it (see the module docstring)."""
    return ratelimit.get_ip(request)


def login_key(login: str) -> str:
    """What the per-account limit counts for ``login``: the account it names, by username or
    by any of its email addresses in any case, so switching between them buys no guesses;
    a login that names no account counts by itself."""
    normalized = login.strip().lower()
    account = (
        get_user_model()
        .objects.filter(
            Q(username__iexact=normalized)
            | Q(email__iexact=normalized)
            | Q(emailaddress__email__iexact=normalized)
        )
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )
    return f"account:{account}" if account is not None else f"login:{normalized}"


class PodiumAccountAdapter(DefaultAccountAdapter):
    """allauth's adapter, with failed sign-ins counted per account (``login_key``).

    allauth's own key is the Host header's domain with its port plus the login as typed, so
    ``Host: portal.example:1``, ``:2``, ... (all pass ALLOWED_HOSTS) or the account's email
    instead of its username each started a fresh count.
    """

    def _get_login_attempts_cache_key(self, request: HttpRequest, **credentials: Any) -> str:
        return login_key(str(credentials.get("email") or credentials.get("username") or ""))

    def get_client_ip(self, request: HttpRequest) -> str:
        # allauth refuses a request whose address it cannot read (no REMOTE_ADDR: a WSGI
        # server on a unix socket, a test harness) with 403; such requests count together.
        try:
            return super().get_client_ip(request)
        except PermissionDenied:
            return UNKNOWN_ADDRESS


def login_authenticate(
    *, request: HttpRequest, username: str, password: str
) -> AbstractBaseUser | None:
    """The active account that ``username`` (or one of its email addresses) and ``password``
    name, or None; counted by the failed sign-in limits exactly as the browser form is.

    Raises ``LoginLimited`` while this account or this address is over its limit, before
    the password is checked. Anyone may call it; it writes only the shared counters.
    """
    try:
        user = get_adapter(request).authenticate(request, username=username, password=password)
    except ValidationError as error:
        if error.code != "too_many_login_attempts":
            raise
        raise LoginLimited(login_retry_after_s(request, username)) from None
    if user is None or not user.is_active:
        return None
    return user


def login_retry_after_s(request: HttpRequest, login: str) -> int:
    """Seconds until a sign-in at ``login`` from this address is let through again (>= 1):
    for each limit it is over, until the oldest failure it still counts leaves its window."""
    now = time.time()
    key = login_key(login)
    wait_s = 1.0
    for rate in ratelimit.get_rates(app=APP, action=ACTION):
        cache_key = ratelimit.get_cache_key(request, app=APP, action=ACTION, rate=rate, key=key)
        counted = sorted(
            (at for at in cache.get(cache_key, []) if at > now - rate.duration), reverse=True
        )
        if len(counted) >= rate.amount:
            wait_s = max(wait_s, counted[rate.amount - 1] + rate.duration - now)
    return math.ceil(wait_s)


class AdminLoginForm(AdminAuthenticationForm):
    """The admin's sign-in form (``admin.site.login_form``), counted by the same limits as
    the site's form and the token endpoint: staff passwords are the ones most worth
    guessing."""

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if self.request is None:  # the admin always passes its request
            return super().clean()
        if username is not None and password:
            try:
                self.user_cache = login_authenticate(  # type: ignore[assignment]
                    request=self.request, username=username, password=password
                )
            except LoginLimited as limited:
                raise ValidationError(
                    "Too many failed sign-ins; try again in %(seconds)s seconds.",
                    code="too_many_login_attempts",
                    params={"seconds": limited.retry_after_s},
                ) from None
            if self.user_cache is None:
                raise self.get_invalid_login_error()
            self.confirm_login_allowed(self.user_cache)
        return self.cleaned_data
