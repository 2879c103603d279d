"""Signing up, in and out through allauth's pages, inside Podium's layout."""

from __future__ import annotations

import re

from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model

from tests import factories


def test_signup_sends_a_verification_link_that_signs_the_user_in(client, db, mailoutbox):
    page = client.post(
        "/accounts/signup/",
        {
            "username": "carol",
            "email": "carol@example.com",
            "password1": "a long and unusual passphrase",
            "password2": "a long and unusual passphrase",
        },
    )

    assert page.status_code == 302
    assert page["Location"] == "/accounts/confirm-email/"
    user = get_user_model().objects.get(username="carol")
    assert user.email == "carol@example.com"
    assert "_auth_user_id" not in client.session
    assert not EmailAddress.objects.filter(user=user, verified=True).exists()
    [message] = mailoutbox
    assert message.to == ["carol@example.com"]
    link = re.search(r"http://testserver(/accounts/confirm-email/\S+/)", message.body)
    assert link is not None, message.body

    confirmed = client.post(link[1])

    assert confirmed.status_code == 302
    assert EmailAddress.objects.filter(user=user, email="carol@example.com", verified=True).exists()
    assert client.session["_auth_user_id"] == str(user.pk)
    assert "carol" in client.get("/").content.decode()


def test_an_unverified_user_signing_in_is_sent_a_new_link_not_signed_in(client, db, mailoutbox):
    factories.UserFactory(username="dave", email_verified=False)

    page = client.post("/accounts/login/", {"login": "dave", "password": "correct horse battery"})

    assert page.status_code == 302
    assert page["Location"] == "/accounts/confirm-email/"
    assert "_auth_user_id" not in client.session
    assert [message.to for message in mailoutbox] == [["dave@example.com"]]


def test_staff_without_a_verified_address_still_sign_in_to_the_admin(client, db):
    get_user_model().objects.create_superuser("root", "root@example.com", "a staff passphrase")

    page = client.post(
        "/admin/login/?next=/admin/", {"username": "root", "password": "a staff passphrase"}
    )

    assert page.status_code == 302
    assert page["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200


def test_auth_pages_render_inside_podiums_layout(client, db):
    for path in ("/accounts/signup/", "/accounts/login/"):
        html = client.get(path).content.decode()
        assert "/static/podium.css" in html, path
        assert 'class="brand"' in html, path


def test_login_with_username_then_sign_out(client, alice):
    page = client.post("/accounts/login/", {"login": "alice", "password": "correct horse battery"})
    assert page.status_code == 302
    assert client.session["_auth_user_id"] == str(alice.pk)

    client.post("/accounts/logout/")

    assert "_auth_user_id" not in client.session


def test_login_redirects_back_to_the_page_that_needed_it(client, alice, benchmark):
    target = f"/b/{benchmark.slug}/environments/"
    bounce = client.get(target)
    assert bounce.status_code == 302

    page = client.post(bounce["Location"], {"login": "alice", "password": "correct horse battery"})

    assert page["Location"] == target
