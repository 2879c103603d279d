"""Production refuses development-only settings; `make run` and the tests keep them.

Each process runs with a clean environment (PATH and what the case names): the pytest
run's own PYTEST_VERSION marks a process local, so inheriting it would hide the refusal.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from portal.core.checks import (
    ANY_HOST_REFUSED,
    DEVELOPMENT_KEY_REFUSED,
    DEVELOPMENT_SECRET_KEY,
    production_refusals,
)

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HOSTS = "podium.example.org"


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """No SECRET_KEY, no DEBUG, no PODIUM_LOCAL: the built-in defaults, as in production
    when nothing is configured."""
    return {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PODIUM_DATA_DIR": str(tmp_path / "podium"),
    }


@pytest.fixture
def production_env(clean_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """What compose.yaml gives the portal: a real key from a file, named hosts, HTTPS."""
    key_file = tmp_path / "secret_key"
    key_file.write_text(secrets.token_urlsafe(50) + "\n")
    return {
        **clean_env,
        "SECRET_KEY_FILE": str(key_file),
        "ALLOWED_HOSTS": HOSTS,
        "PODIUM_HTTPS": "1",
    }


def run(
    args: list[str], env: dict[str, str], timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, check=False, cwd=REPO, env=env, timeout=timeout_s
    )


def load_wsgi_application(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """What each gunicorn worker does before its first request."""
    return run([sys.executable, "-c", "import portal.wsgi; print('loaded')"], env)


def check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], env)


def test_gunicorn_refuses_to_start_on_the_development_key(clean_env):
    result = run(
        [str(BIN / "gunicorn"), "portal.wsgi", "--bind", "127.0.0.1:0", "--workers", "1"],
        clean_env,
        timeout_s=30,  # it stops in about a second; a server that starts runs until killed
    )

    assert result.returncode != 0
    assert DEVELOPMENT_KEY_REFUSED in result.stderr


def test_the_development_key_is_refused_by_the_application_and_by_check_deploy(clean_env):
    loaded = load_wsgi_application({**clean_env, "ALLOWED_HOSTS": HOSTS})
    checked = check_deploy({**clean_env, "ALLOWED_HOSTS": HOSTS})

    assert loaded.returncode != 0
    assert f"ImproperlyConfigured: {DEVELOPMENT_KEY_REFUSED}" in loaded.stderr
    assert checked.returncode != 0
    assert f"(podium.E001) {DEVELOPMENT_KEY_REFUSED}" in checked.stderr


def test_any_host_is_refused_even_with_a_real_key(production_env):
    env = {**production_env, "ALLOWED_HOSTS": "*"}

    loaded = load_wsgi_application(env)
    checked = check_deploy(env)

    assert loaded.returncode != 0
    assert f"ImproperlyConfigured: {ANY_HOST_REFUSED}" in loaded.stderr
    assert DEVELOPMENT_KEY_REFUSED not in loaded.stderr
    assert checked.returncode != 0
    assert f"(podium.E002) {ANY_HOST_REFUSED}" in checked.stderr


def test_the_production_settings_pass_check_deploy_with_no_warning(production_env):
    checked = check_deploy(production_env)
    loaded = load_wsgi_application(production_env)

    assert checked.returncode == 0, checked.stderr
    assert "System check identified no issues" in checked.stdout
    assert "WARNING" not in checked.stdout + checked.stderr
    assert loaded.returncode == 0, loaded.stderr


def test_without_https_check_deploy_still_warns(production_env):
    checked = check_deploy({**production_env, "PODIUM_HTTPS": "0"})

    assert checked.returncode != 0
    for check_id in ("W004", "W008", "W012", "W016"):
        assert f"security.{check_id}" in checked.stderr


def security_settings(env: dict[str, str]) -> dict[str, object]:
    script = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({name: getattr(s, name) for name in ("
        "'SECURE_PROXY_SSL_HEADER', 'SECURE_SSL_REDIRECT', 'SECURE_HSTS_SECONDS', "
        "'SECURE_HSTS_INCLUDE_SUBDOMAINS', 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE')}))"
    )
    result = run([sys.executable, "-c", script], env)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_https_switches_on_hsts_the_redirect_secure_cookies_and_the_proxy_header(
    production_env,
):
    on = security_settings(production_env)
    off = security_settings({**production_env, "PODIUM_HTTPS": "0"})

    assert on == {
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31_536_000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
    }
    assert off == {
        "SECURE_PROXY_SSL_HEADER": None,
        "SECURE_SSL_REDIRECT": False,
        "SECURE_HSTS_SECONDS": 0,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": False,
        "SESSION_COOKIE_SECURE": False,
        "CSRF_COOKIE_SECURE": False,
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def local_server(env: dict[str, str], *options: str) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """``gunicorn portal.wsgi`` started from the repository (so with its
    ``gunicorn.conf.py``) as ``make run`` starts it, on a free port; stopped afterwards."""
    port = free_port()
    server = subprocess.Popen(
        [str(BIN / "gunicorn"), "portal.wsgi", "--bind", f"127.0.0.1:{port}", *options],
        cwd=REPO,
        env={**env, "PODIUM_LOCAL": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield port, server
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.communicate(timeout=30)


def wait_for(port: int, server: subprocess.Popen[str], path: str) -> int | None:
    """The status of ``path`` once the server answers (None: it never did, in 60 s)."""
    deadline = time.monotonic() + 60
    while server.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}") as page:
                return int(page.status)
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    return None


def test_make_runs_environment_still_serves_on_the_development_key(clean_env):
    """`make run` exports PODIUM_LOCAL=1 and nothing else of this: the Procfile's gunicorn
    starts and answers."""
    with local_server(clean_env, "--workers", "1") as (port, server):
        status = wait_for(port, server, "/static/podium.css")
        assert status == 200, server.stderr.read() if server.poll() is not None else status


def test_the_web_server_closes_each_connection_after_its_response(clean_env):
    """A client that asks to keep its connection open is answered and let go, so its next
    request goes to whichever worker process accepts it first (gunicorn.conf.py says why).
    """
    with local_server(clean_env, "--workers", "2", "--threads", "4") as (port, server):
        assert wait_for(port, server, "/static/podium.css") == 200
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            connection.request("GET", "/accounts/login/", headers={"Connection": "keep-alive"})
            response = connection.getresponse()
            response.read()
        finally:
            connection.close()

    assert response.status == 200
    assert response.getheader("Connection", "").lower() == "close"
    assert response.will_close


def test_debug_or_a_local_machine_refuses_nothing():
    insecure = {"secret_key": DEVELOPMENT_SECRET_KEY, "allowed_hosts": ["*"]}

    assert production_refusals(debug=True, local=False, **insecure) == []
    assert production_refusals(debug=False, local=True, **insecure) == []
    assert [
        check_id for check_id, _ in production_refusals(debug=False, local=False, **insecure)
    ] == [
        "podium.E001",
        "podium.E002",
    ]


def test_a_star_among_named_hosts_is_still_any_host():
    refusals = production_refusals(
        debug=False, local=False, secret_key="x" * 50, allowed_hosts=[HOSTS, "*"]
    )

    assert refusals == [("podium.E002", ANY_HOST_REFUSED)]


def test_compose_runs_production_with_https_and_no_local_mark():
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    environment = compose["services"]["web"]["environment"]

    assert environment["PODIUM_HTTPS"] == "${PODIUM_HTTPS:-1}"
    assert "PODIUM_LOCAL" not in environment
    assert "DEBUG" not in environment
    assert environment["SECRET_KEY_FILE"] == "/run/secrets/podium_secret_key"
