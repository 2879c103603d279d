"""The account page: API tokens created, listed and revoked; allauth's pages in the layout."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.accounts.models import ApiToken


def test_the_account_page_needs_a_sign_in(client, db):
    page = client.get("/account/")

    assert page.status_code == 302
    assert page["Location"].startswith(reverse("account_login"))


def test_creating_a_token_shows_its_key_once(client, alice):
    client.force_login(alice)

    page = client.post("/account/tokens/", {"label": "laptop"})

    token = ApiToken.objects.get(user=alice)
    assert page.status_code == 201
    assert token.label == "laptop"
    assert token.key in page.content.decode()
    assert "shown only this once" in page.content.decode()
    assert "no-store" in page["Cache-Control"]
    later = client.get("/account/").content.decode()
    assert token.key not in later
    assert token.key[:6] in later and "laptop" in later


def test_a_created_token_works_on_the_api(client, alice, benchmark):
    client.force_login(alice)
    client.post("/account/tokens/", {"label": ""})
    key = ApiToken.objects.get(user=alice).key
    client.logout()

    response = client.get(
        f"/api/v1/benchmarks/{benchmark.slug}/quota/", HTTP_AUTHORIZATION=f"Token {key}"
    )

    assert response.status_code == 200


def test_revoking_asks_first_then_revokes(client, alice):
    token = ApiToken.objects.create(user=alice, label="ci")
    client.force_login(alice)

    confirm = client.get(f"/account/tokens/{token.pk}/revoke/")
    assert confirm.status_code == 200
    assert "Yes, revoke it" in confirm.content.decode()
    assert ApiToken.objects.filter(pk=token.pk).exists()

    done = client.post(f"/account/tokens/{token.pk}/revoke/", follow=True)

    assert not ApiToken.objects.filter(pk=token.pk).exists()
    assert "was revoked" in done.content.decode()


def test_another_users_token_is_404_and_survives(client, alice, bob):
    token = ApiToken.objects.create(user=alice)
    client.force_login(bob)

    assert client.get(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    assert client.post(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    assert ApiToken.objects.filter(pk=token.pk).exists()
    assert token.key[:6] not in client.get("/account/").content.decode()


def test_a_label_too_long_is_refused_inline(client, alice):
    client.force_login(alice)

    page = client.post("/account/tokens/", {"label": "x" * 101})

    assert page.status_code == 400
    assert "at most 100 characters" in page.content.decode()
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize(
    "path",
    ["/accounts/password/change/", "/accounts/email/", "/account/"],
)
def test_signed_in_account_pages_share_the_account_menu(client, alice, path):
    client.force_login(alice)

    html = client.get(path).content.decode()

    assert 'aria-label="Account"' in html
    assert 'aria-current="page"' in html
    assert "/static/podium.css" in html


@pytest.mark.parametrize(
    "path",
    ["/accounts/login/", "/accounts/signup/", "/accounts/password/reset/"],
)
def test_allauth_forms_use_podiums_labelled_fields(client, db, path):
    html = client.get(path).content.decode()

    assert 'class="brand"' in html
    assert '<div class="field' in html
    assert "<p><label" not in html  # not allauth's bare as_p


def test_password_reset_sends_a_mail(client, alice, mailoutbox):
    page = client.post("/accounts/password/reset/", {"email": "alice@example.com"})

    assert page.status_code == 302
    assert len(mailoutbox) == 1
    assert "/accounts/password/reset/key/" in mailoutbox[0].body
