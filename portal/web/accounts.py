"""The entrant's account page: who they are, links to allauth's pages, mail preferences
and API tokens.

Tokens are issued and revoked by ``portal.accounts.services`` (the same functions the REST
API calls). A new token's key is shown once, in the response to the POST that made it,
and is never put in a message or the session.
"""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from portal.accounts import services
from portal.accounts.models import ApiToken
from portal.core.errors import PodiumError
from portal.notifications.selectors import announcement_emails_wanted, verdict_emails_wanted
from portal.notifications.services import notification_preference_set
from portal.web.notification_forms import NotificationPreferenceForm


class TokenForm(forms.Form):
    label = forms.CharField(
        max_length=100,
        required=False,
        label="Label",
        help_text="What the token is for, say “laptop” or “CI”. Optional.",
    )


def _account_context(request: HttpRequest, form: TokenForm, **extra: Any) -> dict[str, Any]:
    user_id = cast(int, request.user.pk)  # every caller is behind login_required
    tokens = ApiToken.objects.filter(user_id=user_id).order_by("-created_at")
    preferences = NotificationPreferenceForm(
        initial={
            "verdict_emails": verdict_emails_wanted(user_id),
            "announcement_emails": announcement_emails_wanted(user_id),
        }
    )
    return {"tokens": tokens, "form": form, "preferences_form": preferences, **extra}


@login_required
@require_http_methods(["GET", "POST"])
def account(request: HttpRequest) -> HttpResponse:
    """GET shows the page; POST saves the mail preferences and goes back to it."""
    if request.method == "POST":
        preferences = NotificationPreferenceForm(request.POST)
        if preferences.is_valid():  # an unchecked box is absent from the POST: off
            wanted = preferences.cleaned_data["verdict_emails"]
            announcements = preferences.cleaned_data["announcement_emails"]
            notification_preference_set(
                user=request.user, verdict_emails=wanted, announcement_emails=announcements
            )
            messages.success(
                request,
                f"Verdict emails are {'on' if wanted else 'off'}. Announcement emails are "
                f"{'on' if announcements else 'off'}.",
            )
            return redirect("contests:account")
    return render(request, "accounts/account.html", _account_context(request, TokenForm()))


@never_cache
@login_required
@require_POST
def token_create(request: HttpRequest) -> HttpResponse:
    """Issue a token and show its key this once (the response is not cached)."""
    form = TokenForm(request.POST)
    if not form.is_valid():
        context = _account_context(request, form)
        return render(request, "accounts/account.html", context, status=400)
    token = services.token_create(user=request.user, label=form.cleaned_data["label"])
    context = _account_context(request, TokenForm(), new_token=token)
    return render(request, "accounts/account.html", context, status=201)


@login_required
@require_http_methods(["GET", "POST"])
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    """GET asks for confirmation; POST revokes. Another user's token is a 404."""
    token = get_object_or_404(ApiToken, pk=pk, user_id=request.user.pk)
    if request.method == "GET":
        return render(request, "accounts/token_confirm_revoke.html", {"token": token})
    try:
        services.token_revoke(user=request.user, token_id=token.pk)
    except PodiumError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, f"The token {token_name(token)} was revoked.")
    return redirect("contests:account")


def token_name(token: ApiToken) -> str:
    """How the pages name a token without its secret: label and first characters."""
    prefix = f"{token.key[:6]}…"
    return f"“{token.label}” ({prefix})" if token.label else prefix
