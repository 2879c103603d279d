"""``podium login`` and what every command says without a usable sign-in or server."""

from __future__ import annotations

import http.server
import json
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core import signing
from rest_framework.test import APIClient

from podium_cli import config
from portal.accounts.models import ApiToken
from portal.core.login_limits import DEVICE_SALT
from tests.cli.conftest import PASSWORD, Podium


def test_it_stores_the_token_readable_by_the_owner_only(
    server: str, alice: Any, podium: Podium, config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PODIUM_PASSWORD", PASSWORD)

    result = podium("login", server + "/", "--username", "alice")

    assert result.code == 0, result.err
    assert f"Signed in to {server} as alice." in result.out
    path = config_dir / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(config_dir.stat().st_mode) == 0o700
    stored = json.loads(path.read_text())
    token = ApiToken.objects.get(user=alice)
    assert stored == {"url": server, "token": token.key, "device": stored["device"]}
    assert signing.loads(stored["device"], salt=DEVICE_SALT)[0] == alice.pk
    assert "podium command line" in token.label
    assert podium("quota", "no-such-benchmark").err.startswith("podium: Not found")


def test_it_asks_for_the_username_and_the_password(
    server: str, alice: Any, podium: Podium, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("builtins.input", lambda prompt: "alice")
    monkeypatch.setattr("getpass.getpass", lambda prompt: PASSWORD)

    result = podium("login", server)

    assert result.code == 0, result.err
    assert ApiToken.objects.filter(user=alice).count() == 1


def test_a_wrong_password_is_refused_in_one_line_and_nothing_is_stored(
    server: str, alice: Any, podium: Podium, config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PODIUM_PASSWORD", "not the password")

    result = podium("login", server, "--username", "alice")

    assert result.code == 2
    assert result.err == "podium: Sign-in refused: Wrong username or password.\n"
    assert not (config_dir / "config.json").exists()


def wrong_passwords_from_elsewhere(username: str, count: int) -> None:
    """Someone else's guesses at ``username``, from an address that is not this client's."""
    for n in range(count):
        response = APIClient().post(
            "/api/v1/tokens/",
            {"username": username, "password": "guess"},
            REMOTE_ADDR=f"203.0.113.{n}",
        )
        assert response.status_code in (401, 429)


def test_it_sends_its_device_so_others_guesses_do_not_keep_it_out(
    server: str, alice: Any, podium: Podium, config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PODIUM_PASSWORD", PASSWORD)
    assert podium("login", server, "--username", "alice").code == 0
    first = json.loads((config_dir / "config.json").read_text())["device"]
    wrong_passwords_from_elsewhere("alice", 50)

    again = podium("login", server, "--username", "alice")

    assert again.code == 0, again.err
    stored = json.loads((config_dir / "config.json").read_text())
    assert stored["device"] != first  # a fresh one with each sign-in
    assert ApiToken.objects.filter(user=alice).count() == 2
    # Without the stored device the same sign-in waits with every other client.
    (config_dir / "config.json").write_text(json.dumps({"url": server, "token": "x"}))
    refused = podium("login", server, "--username", "alice")
    assert refused.code != 0
    assert "Too many failed sign-ins" in refused.err
    assert ApiToken.objects.filter(user=alice).count() == 2


def test_the_device_is_sent_only_to_the_server_that_issued_it(
    server: str, config_dir: Path
) -> None:
    config.save(config.Settings(url=server, token="t", device="d"))

    assert config.stored_device(server) == "d"
    assert config.stored_device("https://elsewhere.example.org") is None
    (config_dir / "config.json").write_text("not json")
    assert config.stored_device(server) is None  # `podium login` writes the file again


def test_an_address_that_is_not_http_is_refused(podium: Podium) -> None:
    result = podium("login", "podium.example.org", "--username", "alice")

    assert result.code == 2
    assert "give it as https://host" in result.err


def test_without_a_sign_in_it_says_to_run_login(podium: Podium) -> None:
    result = podium("quota", "demo")

    assert result.code == 2
    assert result.err == "podium: No server configured; run `podium login URL` first.\n"


def test_a_revoked_token_says_to_sign_in_again(
    server: str, alice: Any, podium: Podium, sign_in: Callable[[Any], str]
) -> None:
    key = sign_in(alice)
    ApiToken.objects.filter(key=key).delete()

    result = podium("env", "list")

    assert result.code == 2
    assert result.err == (
        "podium: Not signed in: Invalid or revoked token. "
        f"Run `podium login {server}` to sign in again.\n"
    )


def test_the_environment_overrides_the_stored_url_and_token(
    server: str, alice: Any, benchmark: Any, podium: Podium, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PODIUM_URL", server)
    monkeypatch.setenv("PODIUM_TOKEN", ApiToken.objects.create(user=alice).key)

    result = podium("quota", benchmark.slug)

    assert result.code == 0, result.err
    assert "official" in result.out


def test_a_server_that_does_not_answer_exits_3(podium: Podium) -> None:
    result = podium("--url", "http://127.0.0.1:9", "benchmarks")

    assert result.code == 3
    assert result.err.startswith("podium: Cannot reach http://127.0.0.1:9 (")
    assert "Traceback" not in result.err


@pytest.fixture
def html_site() -> Iterator[Callable[[int], str]]:
    """Start a web server that answers every request with ``status`` and an HTML page, as a
    failing proxy or a site that is not Podium does; returns its address."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(status: int) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = b"<html><body>Not here</body></html>"
                self.send_response(status)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def test_a_server_failure_without_json_exits_3_in_one_line(
    html_site: Callable[[int], str], podium: Podium
) -> None:
    result = podium("--url", html_site(502), "benchmarks")

    assert result.code == 3
    assert result.err == (
        "podium: The server failed (HTTP 502 Bad Gateway) on GET /api/v1/benchmarks/; "
        "try again in a while, and tell the organizers if it keeps failing.\n"
    )


def test_an_address_that_is_not_a_podium_server_is_named(
    html_site: Callable[[int], str], podium: Podium
) -> None:
    url = html_site(404)

    result = podium("--url", url, "benchmarks")

    assert result.code == 3
    assert result.err == (
        f"podium: {url} answered HTTP 404 Not Found to GET /api/v1/benchmarks/ without the "
        "Podium API's error format; check the address given to `podium login`.\n"
    )


def test_a_site_answering_html_is_not_taken_for_podium(
    html_site: Callable[[int], str], podium: Podium
) -> None:
    url = html_site(200)

    result = podium("--url", url, "benchmarks")

    assert result.code == 3
    assert result.err.startswith(f"podium: {url} did not answer with JSON; is it a Podium server?")
