"""Signing up, in and out through allauth's pages, inside Podium's layout."""

from __future__ import annotations

from django.contrib.auth import get_user_model


def test_signup_creates_a_user_and_signs_them_in(client, db):
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
    user = get_user_model().objects.get(username="carol")
    assert user.email == "carol@example.com"
    assert client.session["_auth_user_id"] == str(user.pk)
    assert "carol" in client.get("/").content.decode()


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
