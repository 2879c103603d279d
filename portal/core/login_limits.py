"""Failed sign-ins, counted in one place for the browser form, the admin's login and
``POST /api/v1/tokens/``.

All three go through allauth's adapter, whose ``login_failed`` rate limit
(``ACCOUNT_RATE_LIMITS`` in settings) counts every attempt per client address and per
account in the default cache, which all processes share, and takes the attempt back when
the password was right. Past the limit even the right password is refused until the window
has passed: the forms show a message, the token endpoint answers 429 ``throttled`` with
``Retry-After``.

The per-account count is split by device (OWASP's "device cookie"), so that guesses at an
account, whose username the board shows, cannot keep its owner out. Every successful sign-in
hands the client a device string: a signed (account, random nonce) pair, set as the
``podium_device`` cookie and, by the token endpoint, also returned in its body for clients
without a cookie jar, which send it back in the ``X-Podium-Device`` header. A sign-in that
presents a valid device string of the account it names counts at that device only
(``account:<id>:device:<nonce>``); any other (no string, a forged or expired one, another
account's) counts at the account's untrusted clients (``account:<id>:untrusted``). So once
guesses lock the untrusted clients out, a known device still gets in, and guesses made with
a stolen device string lock out that device alone. The per-address limit holds for all.

The client address is read once, here, for these limits and for the API's throttles:
REMOTE_ADDR, or with ``PODIUM_TRUSTED_PROXIES`` = n the n-th address from the right of
X-Forwarded-For (the one the outermost trusted proxy saw); an IPv6 address counts by its /64,
and requests whose address cannot be read count together as one.
"""

from __future__ import annotations

import datetime as dt
import math
import secrets
import time
from collections.abc import Callable
from typing import Any

from allauth.account.adapter import DefaultAccountAdapter, get_adapter
from allauth.core.internal import ratelimit
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.signals import user_logged_in
from django.core import signing
from django.core.cache import cache
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

APP = "allauth.account"
ACTION = "login_failed"
UNKNOWN_ADDRESS = "unknown"

DEVICE_COOKIE = "podium_device"
DEVICE_HEADER = "X-Podium-Device"
DEVICE_MAX_AGE = dt.timedelta(days=365)
DEVICE_SALT = "portal.core.login_limits.device"
# Where a sign-in leaves the device string it issued, for DeviceCookieMiddleware to set.
_ISSUED = "_podium_device_issued"


class LoginLimited(Exception):
    """Too many failed sign-ins at this account or from this address."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


def client_address(request: HttpRequest) -> str:
    """The caller's address as every limit counts it (see the module docstring)."""
    address: str = ratelimit.get_ip(request)
    return address


def issue_device(request: HttpRequest, user: AbstractBaseUser) -> str:
    """A new device string for ``user`` (who just proved their password on this client),
    set as the device cookie on the response to ``request`` by ``DeviceCookieMiddleware``."""
    device = signing.dumps([user.pk, secrets.token_urlsafe(16)], salt=DEVICE_SALT)
    setattr(request, _ISSUED, device)
    return device


def presented_device(request: HttpRequest) -> str | None:
    """The device string this request presents: the ``X-Podium-Device`` header (clients
    without a cookie jar), else the device cookie; not yet checked."""
    return request.headers.get(DEVICE_HEADER) or request.COOKIES.get(DEVICE_COOKIE) or None


def device_nonce(device: str | None, account: int) -> str | None:
    """The nonce of ``device`` if it is a device string this site signed for ``account``
    within ``DEVICE_MAX_AGE``; None for anything else (missing, forged, expired, or issued
    to another account)."""
    if not device:
        return None
    try:
        value = signing.loads(device, salt=DEVICE_SALT, max_age=DEVICE_MAX_AGE)
    except (signing.BadSignature, ValueError):
        return None
    match value:
        case [int(owner), str(nonce)] if owner == account and nonce:
            return nonce
    return None


def login_key(login: str, device: str | None = None) -> str:
    """What the per-account limit counts for a sign-in at ``login`` presenting ``device``.

    The account is the one ``login`` names, by username or by any of its email addresses in
    any case, so switching between them buys no guesses; within it, the device ``device``
    names if it is a valid device string of that account, else its untrusted clients. A
    login that names no account counts by itself."""
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
    if account is None:
        return f"login:{normalized}"
    nonce = device_nonce(device, account)
    return f"account:{account}:device:{nonce}" if nonce else f"account:{account}:untrusted"


def _login(credentials: dict[str, Any]) -> str:
    return str(credentials.get("email") or credentials.get("username") or "")


# allauth ships no type information, so its adapter is Any to mypy.
class PodiumAccountAdapter(DefaultAccountAdapter):  # type: ignore[misc]
    """allauth's adapter, with failed sign-ins counted per account and device (``login_key``).

    allauth's own key is the Host header's domain with its port plus the login as typed, so
    ``Host: portal.example:1``, ``:2``, ... (all pass ALLOWED_HOSTS) or the account's email
    instead of its username each started a fresh count.
    """

    def _get_login_attempts_cache_key(self, request: HttpRequest, **credentials: Any) -> str:
        return login_key(_login(credentials), presented_device(request))

    def _delete_login_attempts_cached_email(self, request: HttpRequest, **credentials: Any) -> None:
        # A password reset (which proves the mailbox) clears the account's untrusted count,
        # as it cleared the whole account's before devices were counted apart.
        super()._delete_login_attempts_cached_email(request, **credentials)
        ratelimit.clear(request, app=APP, action=ACTION, key=login_key(_login(credentials)))

    def get_client_ip(self, request: HttpRequest) -> str:
        # allauth refuses a request whose address it cannot read (no REMOTE_ADDR: a WSGI
        # server on a unix socket, a test harness) with 403; such requests count together.
        try:
            address: str = super().get_client_ip(request)
        except PermissionDenied:
            return UNKNOWN_ADDRESS
        return address


def login_authenticate(
    *, request: HttpRequest, username: str, password: str
) -> AbstractBaseUser | None:
    """The active account that ``username`` (or one of its email addresses) and ``password``
    name, or None; counted by the failed sign-in limits exactly as the browser form is.

    Raises ``LoginLimited`` while this account or this address is over its limit, before
    the password is checked. Anyone may call it; it writes only the shared counters.
    """
    try:
        user: AbstractBaseUser | None = get_adapter(request).authenticate(
            request, username=username, password=password
        )
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
    key = login_key(login, presented_device(request))
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


@receiver(user_logged_in, dispatch_uid="portal.core.login_limits.issue_device")
def _device_for_every_sign_in(
    sender: Any, request: HttpRequest | None, user: AbstractBaseUser, **kwargs: Any
) -> None:
    """Every sign-in to a session (the site's form, the admin's, after confirming an email
    address) makes the browser a known device of the account."""
    if request is not None:
        issue_device(request, user)


class DeviceCookieMiddleware:
    """Sets the device cookie on the response to a request that issued a device string: for
    a year, HttpOnly, SameSite=Lax, Secure over HTTPS; signed, so it cannot be forged."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        device = getattr(request, _ISSUED, None)
        if isinstance(device, str):
            response.set_cookie(
                DEVICE_COOKIE,
                device,
                max_age=DEVICE_MAX_AGE,
                secure=request.is_secure() or settings.SESSION_COOKIE_SECURE,
                httponly=True,
                samesite="Lax",
            )
        return response
