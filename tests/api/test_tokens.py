"""POST/GET /api/v1/tokens/ and DELETE /api/v1/tokens/{id}/."""

from __future__ import annotations

from rest_framework.test import APIClient

from portal.accounts.models import ApiToken

URL = "/api/v1/tokens/"


def test_it_exchanges_username_and_password_for_a_working_token(alice, anon):
    response = anon.post(
        URL, {"username": "alice", "password": "correct horse battery", "label": "laptop"}
    )

    assert response.status_code == 201
    assert set(response.json()) == {"token", "id", "label", "device"}
    key = response.json()["token"]
    assert ApiToken.objects.get(key=key).user == alice
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get(URL).status_code == 200


def test_it_refuses_a_wrong_password(alice, anon):
    response = anon.post(URL, {"username": "alice", "password": "wrong"})

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert not ApiToken.objects.exists()


def test_it_refuses_an_unknown_user(db, anon):
    response = anon.post(URL, {"username": "mallory", "password": "correct horse battery"})

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_it_refuses_an_inactive_user(alice, anon):
    alice.is_active = False
    alice.save(update_fields=["is_active"])

    response = anon.post(URL, {"username": "alice", "password": "correct horse battery"})

    assert response.status_code == 401


def test_it_needs_both_fields(db, anon):
    response = anon.post(URL, {"username": "alice"})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"
    assert "password" in response.json()["detail"]


def test_it_limits_failed_requests_at_an_account(alice, anon):
    codes = [
        anon.post(URL, {"username": "alice", "password": "wrong"}).status_code for _ in range(5)
    ]
    assert codes == [401] * 5

    response = anon.post(URL, {"username": "alice", "password": "correct horse battery"})

    assert response.status_code == 429
    assert response.json()["code"] == "throttled"
    assert 1 <= int(response["Retry-After"]) <= 300
    assert not ApiToken.objects.exists()


def test_it_rate_limits_token_requests_per_address(alice, anon):
    codes = [
        anon.post(URL, {"username": "alice", "password": "correct horse battery"}).status_code
        for _ in range(20)
    ]
    assert codes == [201] * 20

    response = anon.post(URL, {"username": "alice", "password": "correct horse battery"})

    assert response.status_code == 429
    assert response.json()["code"] == "throttled"
    assert ApiToken.objects.count() == 20


def test_it_lists_only_my_tokens(alice, bob, client_for):
    ApiToken.objects.create(user=bob, label="bob's")
    client = client_for(alice)

    response = client.get(URL)

    assert response.status_code == 200
    rows = response.json()
    assert [row["label"] for row in rows] == ["tests"]
    assert set(rows[0]) == {"id", "label", "created_at", "last_used_at"}
    assert "+00:00" in rows[0]["created_at"]
    assert rows[0]["last_used_at"] is None or "+00:00" in rows[0]["last_used_at"]


def test_listing_needs_a_token(db, anon):
    response = anon.get(URL)

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_an_invalid_token_is_not_authenticated(db):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-key")

    response = client.get(URL)

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_it_revokes_my_token(alice, client_for):
    client = client_for(alice)
    token = ApiToken.objects.get(user=alice)

    response = client.delete(f"{URL}{token.pk}/")

    assert response.status_code == 204
    assert not ApiToken.objects.filter(pk=token.pk).exists()
    assert client.get(URL).status_code == 401


def test_it_does_not_revoke_someone_elses_token(alice, bob, client_for):
    bobs = ApiToken.objects.create(user=bob)

    response = client_for(alice).delete(f"{URL}{bobs.pk}/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert ApiToken.objects.filter(pk=bobs.pk).exists()
