"""Password guessing: failed sign-ins are limited per account and per client address, in one
count that the browser form and ``POST /api/v1/tokens/`` share, kept where every process
sees it. Each test is something an attacker could do before the limits held; the known
device tests are what an attacker could do to the account's owner with those limits alone.

The limits (settings): 5 failures in 5 minutes at one account (apart for each known device
and for all other clients together), 20 a minute from one address.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.core import signing
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.core.file_cache import SharedFileCache
from portal.core.login_limits import DEVICE_COOKIE, DEVICE_SALT, login_key
from tests import factories
from tests.deploy.test_compose import compose_config

TOKENS = "/api/v1/tokens/"
LOGIN = "/accounts/login/"
RIGHT = "correct horse battery"
WRONG = "wrong"
REFUSED_IN_THE_FORM = "Too many failed login attempts"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def loose_token_throttle(settings: Any) -> None:
    """Only the failed sign-in limits, not the token endpoint's own per-address throttle."""
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "tokens": "1000/min",
        },
    }


def token_request(
    username: str = "alice", password: str = WRONG, client: Client | None = None, **meta: str
) -> Any:
    return (client or APIClient()).post(
        TOKENS, {"username": username, "password": password}, **meta
    )


def form_sign_in(client: Client, login: str = "alice", password: str = WRONG, **meta: str) -> Any:
    return client.post(LOGIN, {"login": login, "password": password}, **meta)


def assert_throttled(response: Any) -> None:
    assert response.status_code == 429, response.content
    assert response.json()["code"] == "throttled"
    assert int(response["Retry-After"]) >= 1


# The client address ---------------------------------------------------------------------


def test_rotating_x_forwarded_for_buys_no_more_guesses(db, loose_token_throttle):
    codes = [
        token_request(f"victim{n}", HTTP_X_FORWARDED_FOR=f"198.51.100.{n}").status_code
        for n in range(20)
    ]
    assert codes == [401] * 20

    refused = token_request("victim99", HTTP_X_FORWARDED_FOR="198.51.100.99")

    assert_throttled(refused)
    assert "from this address" in refused.json()["detail"]


def test_rotating_x_forwarded_for_buys_no_more_token_requests(alice):
    codes = [
        token_request(password=RIGHT, HTTP_X_FORWARDED_FOR=f"198.51.100.{n}").status_code
        for n in range(20)
    ]
    assert codes == [201] * 20

    assert_throttled(token_request(password=RIGHT, HTTP_X_FORWARDED_FOR="198.51.100.99"))
    assert ApiToken.objects.count() == 20


def test_a_right_password_now_and_then_does_not_reset_the_address_count(db, loose_token_throttle):
    factories.UserFactory(username="mallory")
    for n in range(20):
        assert token_request("mallory", RIGHT).status_code == 201
        assert token_request(f"victim{n}").status_code == 401

    assert_throttled(token_request("victim99"))


def test_behind_a_proxy_the_address_it_saw_is_counted_not_what_the_client_wrote(
    db, settings, loose_token_throttle
):
    settings.ALLAUTH_TRUSTED_PROXY_COUNT = 1
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    for n in range(20):  # the proxy appends the address it saw to what the client sent
        spoofed = f"192.0.2.{n}, 198.51.100.7"
        assert token_request(f"victim{n}", HTTP_X_FORWARDED_FOR=spoofed).status_code == 401

    assert_throttled(token_request("victim99", HTTP_X_FORWARDED_FOR="192.0.2.99, 198.51.100.7"))
    other_client = token_request("victim99", HTTP_X_FORWARDED_FOR="198.51.100.8")
    assert other_client.status_code == 401


def test_requests_whose_address_cannot_be_read_count_together(db, loose_token_throttle):
    codes = [token_request(f"victim{n}", REMOTE_ADDR="").status_code for n in range(20)]
    assert codes == [401] * 20

    assert_throttled(token_request("victim99", REMOTE_ADDR=""))
    assert token_request("victim99", REMOTE_ADDR="203.0.113.1").status_code == 401


def test_compose_counts_the_address_its_tls_proxy_saw(tmp_path):
    """compose.yaml publishes web on loopback for the TLS proxy the README prescribes, so
    every client reaches gunicorn from one address: the proxy's X-Forwarded-For entry is
    the one to count."""
    assert compose_config(tmp_path)["web"]["environment"]["PODIUM_TRUSTED_PROXIES"] == "1"
    unproxied = compose_config(tmp_path, PODIUM_TRUSTED_PROXIES="0")
    assert unproxied["web"]["environment"]["PODIUM_TRUSTED_PROXIES"] == "0"


def test_the_proxy_count_setting_reaches_both_readers_of_the_address(settings):
    assert settings.PODIUM_TRUSTED_PROXIES == 0
    assert settings.REST_FRAMEWORK["NUM_PROXIES"] == 0
    assert settings.ALLAUTH_TRUSTED_PROXY_COUNT == 0
    script = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.REST_FRAMEWORK['NUM_PROXIES'], s.ALLAUTH_TRUSTED_PROXY_COUNT)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "PODIUM_TRUSTED_PROXIES": "2"}

    shown = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True
    )

    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["2", "2"]


# The account ------------------------------------------------------------------------------


def test_guesses_at_one_account_from_many_addresses_are_limited(alice):
    codes = [token_request(REMOTE_ADDR=f"203.0.113.{n}").status_code for n in range(5)]
    assert codes == [401] * 5

    assert_throttled(token_request(REMOTE_ADDR="203.0.113.50"))
    refused = token_request(password=RIGHT, REMOTE_ADDR="203.0.113.51")
    assert_throttled(refused)
    assert not ApiToken.objects.exists()
    assert token_request("bob", RIGHT, REMOTE_ADDR="203.0.113.52").status_code == 401  # no bob


def test_the_username_its_email_and_other_cases_share_one_count(alice):
    logins = ["alice", "ALICE", "alice@example.com", "Alice@Example.COM", " alice"]
    codes = [
        token_request(login, REMOTE_ADDR=f"203.0.113.{n}").status_code
        for n, login in enumerate(logins)
    ]
    assert codes == [401] * 5

    assert_throttled(token_request("alice", RIGHT, REMOTE_ADDR="203.0.113.50"))


def test_rotating_the_host_port_buys_no_more_guesses(alice, client):
    for n in range(5):
        page = form_sign_in(
            client, HTTP_HOST=f"testserver:{8000 + n}", REMOTE_ADDR=f"203.0.113.{n}"
        )
        assert page.status_code == 200
        assert "not correct" in page.content.decode()

    page = form_sign_in(
        client, password=RIGHT, HTTP_HOST="testserver:9999", REMOTE_ADDR="203.0.113.9"
    )

    assert REFUSED_IN_THE_FORM in page.content.decode()
    assert "_auth_user_id" not in client.session


def test_failures_at_the_token_endpoint_block_the_browser_form(alice, client):
    for n in range(5):
        assert token_request(REMOTE_ADDR=f"203.0.113.{n}").status_code == 401

    page = form_sign_in(client, password=RIGHT, REMOTE_ADDR="203.0.113.50")

    assert page.status_code == 200
    assert REFUSED_IN_THE_FORM in page.content.decode()
    assert "_auth_user_id" not in client.session


def test_failures_at_the_browser_form_block_the_token_endpoint(alice, client):
    for n in range(5):
        page = form_sign_in(client, REMOTE_ADDR=f"203.0.113.{n}")
        assert "not correct" in page.content.decode()

    assert_throttled(token_request(password=RIGHT, REMOTE_ADDR="203.0.113.50"))
    assert not ApiToken.objects.exists()


def test_the_admin_sign_in_is_counted_with_the_others(staff, client):
    for n in range(3):
        assert token_request("staff", REMOTE_ADDR=f"203.0.113.{n}").status_code == 401
    for n in range(2):
        page = client.post(
            "/admin/login/", {"username": "staff", "password": WRONG}, REMOTE_ADDR=f"198.51.100.{n}"
        )
        assert "correct username and password" in page.content.decode()

    page = client.post(
        "/admin/login/", {"username": "staff", "password": RIGHT}, REMOTE_ADDR="198.51.100.9"
    )

    assert "Too many failed sign-ins" in page.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_right_password_waits_for_the_window_then_works(alice, client):
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        for _ in range(5):
            assert token_request().status_code == 401

        refused = token_request(password=RIGHT)
        assert_throttled(refused)
        assert refused["Retry-After"] == "300"
        traveller.shift(dt.timedelta(seconds=299))
        still = token_request(password=RIGHT)
        assert_throttled(still)
        assert still["Retry-After"] == "1"
        assert REFUSED_IN_THE_FORM in form_sign_in(client, password=RIGHT).content.decode()
        traveller.shift(dt.timedelta(seconds=1))

        assert token_request(password=RIGHT).status_code == 201
        assert form_sign_in(client, password=RIGHT).status_code == 302
        assert client.session["_auth_user_id"] == str(alice.pk)


# Known devices ----------------------------------------------------------------------------

OWNER = "192.0.2.10"
ATTACKER = "203.0.113.66"


def sign_in_with_the_form(client: Client, username: str = "alice", **meta: Any) -> str:
    """Sign in through the form, sign out again; the device cookie it left."""
    page = form_sign_in(client, username, RIGHT, REMOTE_ADDR=OWNER, **meta)
    assert page.status_code == 302, page.content
    client.post("/accounts/logout/", REMOTE_ADDR=OWNER)
    assert "_auth_user_id" not in client.session
    return str(client.cookies[DEVICE_COOKIE].value)


def device_of_the_token_endpoint(username: str = "alice") -> str:
    answer = token_request(username, RIGHT, REMOTE_ADDR=OWNER)
    assert answer.status_code == 201, answer.content
    return str(answer.json()["device"])


def fifty_wrong_passwords(username: str = "alice", address: str = ATTACKER) -> None:
    """An attacker's guesses, half at the form and half at the token endpoint, from another
    address: the first five are checked, the rest refused before the password is."""
    attacker = Client()
    codes = []
    for n in range(50):
        if n % 2:
            codes.append(token_request(username, REMOTE_ADDR=address).status_code)
        else:
            page = form_sign_in(attacker, username, REMOTE_ADDR=address)
            codes.append(401 if "not correct" in page.content.decode() else 429)
    assert codes.count(401) == 5
    assert set(codes[5:]) == {429}


def test_the_owner_signs_in_through_the_form_at_once_after_fifty_wrong_passwords(
    alice, loose_token_throttle
):
    owner = Client()
    sign_in_with_the_form(owner)

    fifty_wrong_passwords()

    page = form_sign_in(owner, password=RIGHT, REMOTE_ADDR=OWNER)
    assert page.status_code == 302
    assert owner.session["_auth_user_id"] == str(alice.pk)
    # Without the device the account is still locked: from the owner's address too.
    assert REFUSED_IN_THE_FORM in form_sign_in(Client(), password=RIGHT).content.decode()
    assert_throttled(token_request(password=RIGHT, REMOTE_ADDR=OWNER))


def test_the_owner_gets_a_token_at_once_after_fifty_wrong_passwords(alice, loose_token_throttle):
    device = device_of_the_token_endpoint()  # a command-line client keeps it
    browser = APIClient()  # a browser keeps the cookie its form sign-in set
    browser.cookies[DEVICE_COOKIE] = sign_in_with_the_form(Client())

    fifty_wrong_passwords()

    by_header = token_request(password=RIGHT, REMOTE_ADDR=OWNER, HTTP_X_PODIUM_DEVICE=device)
    assert by_header.status_code == 201, by_header.content
    assert ApiToken.objects.get(key=by_header.json()["token"]).user == alice
    by_cookie = token_request(password=RIGHT, client=browser, REMOTE_ADDR=OWNER)
    assert by_cookie.status_code == 201, by_cookie.content
    assert_throttled(token_request(password=RIGHT, REMOTE_ADDR=OWNER))


def test_the_device_cookie_lasts_a_year_and_scripts_cannot_read_it(alice):
    client = Client()
    form_sign_in(client, password=RIGHT, secure=True)
    cookie = client.cookies[DEVICE_COOKIE]
    assert cookie["httponly"] is True
    assert cookie["secure"] is True
    assert cookie["samesite"] == "Lax"
    assert int(cookie["max-age"]) == 365 * 24 * 3600

    answer = APIClient().post(TOKENS, {"username": "alice", "password": RIGHT})
    assert answer.cookies[DEVICE_COOKIE].value == answer.json()["device"]
    assert not answer.cookies[DEVICE_COOKIE]["secure"]  # plain HTTP: a test server


def test_a_client_without_a_device_is_still_limited_after_five_failures(alice):
    sign_in_with_the_form(Client())  # the owner has a device; this client has none
    codes = [token_request(REMOTE_ADDR=f"203.0.113.{n}").status_code for n in range(5)]
    assert codes == [401] * 5

    assert_throttled(token_request(password=RIGHT, REMOTE_ADDR="203.0.113.50"))
    refused = form_sign_in(Client(), password=RIGHT, REMOTE_ADDR="203.0.113.51")
    assert REFUSED_IN_THE_FORM in refused.content.decode()


def edited_for(account: Any, device: str) -> str:
    """``device`` with its account changed to ``account``, its signature kept."""
    payload, timestamp, signature = device.split(":")
    _, nonce = signing.loads(device, salt=DEVICE_SALT)
    edited = signing.b64_encode(json.dumps([account.pk, nonce], separators=(",", ":")).encode())
    assert edited.decode() != payload
    return f"{edited.decode()}:{timestamp}:{signature}"


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda alice, bob_device: bob_device, id="another-accounts-device"),
        pytest.param(lambda alice, bob_device: edited_for(alice, bob_device), id="edited"),
        pytest.param(
            lambda alice, bob_device: signing.dumps(
                [alice.pk, "guessed"], key="not the site's secret", salt=DEVICE_SALT
            ),
            id="signed-without-the-secret",
        ),
        pytest.param(
            lambda alice, bob_device: signing.dumps([alice.pk, "guessed"], salt="other"),
            id="signed-for-something-else",
        ),
        pytest.param(lambda alice, bob_device: "garbage:::", id="garbage"),
    ],
)
def test_a_forged_or_another_accounts_device_gives_no_pass(alice, bob, loose_token_throttle, forge):
    bob_device = device_of_the_token_endpoint("bob")
    device = forge(alice, bob_device)
    fifty_wrong_passwords()

    assert_throttled(token_request(password=RIGHT, HTTP_X_PODIUM_DEVICE=device))
    client = Client()
    client.cookies[DEVICE_COOKIE] = device
    assert REFUSED_IN_THE_FORM in form_sign_in(client, password=RIGHT).content.decode()
    assert not ApiToken.objects.filter(user=alice).exists()


def test_a_device_unused_for_a_year_is_untrusted_again(alice):
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        device = device_of_the_token_endpoint()
        traveller.shift(dt.timedelta(days=366))
        for n in range(5):
            assert token_request(REMOTE_ADDR=f"203.0.113.{n}").status_code == 401

        assert_throttled(token_request(password=RIGHT, HTTP_X_PODIUM_DEVICE=device))


def test_failures_with_a_device_lock_that_device_only(alice):
    stolen = device_of_the_token_endpoint()
    others_device = device_of_the_token_endpoint()
    codes = [
        token_request(REMOTE_ADDR=f"203.0.113.{n}", HTTP_X_PODIUM_DEVICE=stolen).status_code
        for n in range(5)
    ]
    assert codes == [401] * 5

    assert_throttled(token_request(password=RIGHT, HTTP_X_PODIUM_DEVICE=stolen))
    client = Client()
    client.cookies[DEVICE_COOKIE] = stolen
    assert REFUSED_IN_THE_FORM in form_sign_in(client, password=RIGHT).content.decode()
    # The account's other device, and clients without one, were not charged.
    assert token_request(password=RIGHT, HTTP_X_PODIUM_DEVICE=others_device).status_code == 201
    assert token_request(password=RIGHT, REMOTE_ADDR="198.51.100.1").status_code == 201


def test_a_known_device_is_still_held_to_its_address_limit(alice, loose_token_throttle):
    device = device_of_the_token_endpoint()
    codes = [token_request(f"victim{n}", REMOTE_ADDR=OWNER).status_code for n in range(20)]
    assert codes == [401] * 20

    refused = token_request(password=RIGHT, REMOTE_ADDR=OWNER, HTTP_X_PODIUM_DEVICE=device)
    assert_throttled(refused)
    assert "from this address" in refused.json()["detail"]
    other_address = token_request(password=RIGHT, REMOTE_ADDR="198.51.100.2")
    assert other_address.status_code == 201


def test_the_admin_sign_in_honours_the_device(staff, loose_token_throttle):
    owner = Client()
    page = owner.post("/admin/login/", {"username": "staff", "password": RIGHT})
    assert page.status_code == 302
    owner.post("/admin/logout/")
    fifty_wrong_passwords("staff")

    page = owner.post("/admin/login/", {"username": "staff", "password": RIGHT})

    assert page.status_code == 302, page.content
    assert owner.session["_auth_user_id"] == str(staff.pk)
    refused = Client().post("/admin/login/", {"username": "staff", "password": RIGHT})
    assert "Too many failed sign-ins" in refused.content.decode()


def test_a_password_reset_lets_every_client_in_again(alice, client, mailoutbox):
    """The reset link proves the mailbox: the account's count is cleared, as it was before
    devices were counted apart, even when the reset ran in a browser with a device."""
    sign_in_with_the_form(client)
    for n in range(5):
        assert token_request(REMOTE_ADDR=f"203.0.113.{n}").status_code == 401
    assert_throttled(token_request(password=RIGHT, REMOTE_ADDR="203.0.113.50"))

    client.post("/accounts/password/reset/", {"email": "alice@example.com"})
    link = re.search(r"https?://[^/\s]+(/accounts/password/reset/key/\S+)", mailoutbox[-1].body)
    assert link is not None, mailoutbox[-1].body
    form = client.get(link.group(1), follow=True)
    new_password = "a brand new passphrase"
    done = client.post(
        form.redirect_chain[-1][0], {"password1": new_password, "password2": new_password}
    )
    assert done.status_code == 302, done.content

    fresh = token_request(password=new_password, REMOTE_ADDR="203.0.113.51")
    assert fresh.status_code == 201, fresh.content


# The shared cache ------------------------------------------------------------------------


def test_the_counts_are_not_in_one_process_memory():
    assert not isinstance(caches["default"], LocMemCache)


def test_two_clients_share_the_count(alice):
    first, second = APIClient(), APIClient()
    for _ in range(3):
        assert token_request(client=first, REMOTE_ADDR="203.0.113.1").status_code == 401
    for _ in range(2):
        assert token_request(client=second, REMOTE_ADDR="203.0.113.2").status_code == 401

    assert_throttled(token_request(password=RIGHT, client=first, REMOTE_ADDR="203.0.113.1"))


@pytest.mark.serial  # the other process reads the settings' shared cache, not a worker's own
def test_failures_counted_by_another_process_block_here(db):
    """Another web process (a separate Python) counts five failures at ``nobody``."""
    script = (
        "import sys, django; django.setup()\n"
        "from allauth.core.internal import ratelimit\n"
        "from django.test import RequestFactory\n"
        "request = RequestFactory().post('/accounts/login/', REMOTE_ADDR='203.0.113.1')\n"
        "for _ in range(5):\n"
        "    assert ratelimit.consume(request, app='allauth.account', action='login_failed',\n"
        "                             key=sys.argv[1])\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings"}

    counted = subprocess.run(
        [sys.executable, "-c", script, login_key("nobody")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )

    assert counted.returncode == 0, counted.stderr
    assert_throttled(token_request("nobody", REMOTE_ADDR="203.0.113.2"))


def test_only_one_of_many_processes_takes_a_lock_in_the_file_cache(tmp_path):
    workers = 8

    def take(cache: SharedFileCache, key: str, start: threading.Barrier) -> bool:
        start.wait()
        return cache.add(key, True, 10)

    for attempt in range(30):
        handles = [SharedFileCache(str(tmp_path), {}) for _ in range(workers)]
        start = threading.Barrier(workers)
        with ThreadPoolExecutor(workers) as pool:
            taken = list(pool.map(take, handles, [f"lock-{attempt}"] * workers, [start] * workers))

        assert taken.count(True) == 1, f"attempt {attempt}: {taken}"


def test_a_full_file_cache_drops_expired_entries_before_live_counts(tmp_path):
    cache = SharedFileCache(str(tmp_path), {"OPTIONS": {"MAX_ENTRIES": 10}})
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        cache.set("live-count", [1.0], 3600)
        for n in range(9):
            cache.set(f"stale-{n}", [1.0], 1)
        traveller.shift(dt.timedelta(seconds=2))

        for n in range(9):
            cache.set(f"fresh-{n}", [1.0], 3600)

        kept = [key for key in ["live-count", *(f"fresh-{n}" for n in range(9))] if cache.get(key)]
    assert len(kept) == 10
