"""Django's EMAIL_* settings from one ``EMAIL_URL`` (pure: imported by the settings module).

django-environ parses the URL (``smtp://``, ``smtps://`` or ``smtp+tls://`` for STARTTLS,
``smtp+ssl://``, ``consolemail://``, ``filemail:///path``, ...). This adds what it leaves
out: the query options ``tls``, ``ssl`` and ``timeout`` (``?tls=True``; django-environ
would pass them on as backend options that Django's SMTP backend never reads), and
booleans written as words (``?email_use_tls=False`` would otherwise be a true string).
"""

from __future__ import annotations

from typing import Any

import environ

TRUE_WORDS = ("1", "true", "yes", "on")
DEFAULT_PORT = 25


def _flag(value: object) -> bool:
    return str(value).strip().lower() in TRUE_WORDS


def email_url_settings(url: str) -> dict[str, Any]:
    """Every EMAIL_* setting the URL decides, each with a value (a user or password the
    URL leaves out is empty, so nothing set elsewhere leaks into a URL's connection)."""
    config = environ.Env.email_url_config(url)
    options = {str(key).upper(): value for key, value in config.pop("OPTIONS", {}).items()}
    use_tls = config.get("EMAIL_USE_TLS", options.get("TLS", False))
    use_ssl = config.get("EMAIL_USE_SSL", options.get("SSL", False))
    timeout = options.get("TIMEOUT")
    result: dict[str, Any] = {
        "EMAIL_BACKEND": config["EMAIL_BACKEND"],
        "EMAIL_HOST": config["EMAIL_HOST"] or "localhost",
        "EMAIL_PORT": config["EMAIL_PORT"] or DEFAULT_PORT,
        "EMAIL_HOST_USER": config["EMAIL_HOST_USER"] or "",
        "EMAIL_HOST_PASSWORD": config["EMAIL_HOST_PASSWORD"] or "",
        "EMAIL_USE_TLS": _flag(use_tls),
        "EMAIL_USE_SSL": _flag(use_ssl),
    }
    if timeout is not None:
        result["EMAIL_TIMEOUT"] = float(timeout)
    if config.get("EMAIL_FILE_PATH"):
        result["EMAIL_FILE_PATH"] = config["EMAIL_FILE_PATH"]
    return result
