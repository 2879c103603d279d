"""Where the client keeps the server URL, the personal token and the device string, and how
it reads them back.

The file is ``config.json`` in ``platformdirs.user_config_dir("podium")`` (or in
``$PODIUM_CONFIG_DIR``), readable by its owner only: the token acts as its owner's
password on the API. ``$PODIUM_URL`` and ``$PODIUM_TOKEN`` override what is stored,
for scripts and CI jobs that keep no file. The device string is what the server answered
to the last ``podium login``; the next one sends it back, so that the server counts this
client as a known device of the account, which others' wrong passwords do not lock out.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from podium_cli.errors import CliError

CONFIG_FILE = "config.json"


class ConfigError(CliError):
    """The client has no usable URL or token; ``str(exc)`` says what to run."""


@dataclass(frozen=True)
class Settings:
    url: str
    token: str | None
    device: str | None = None


def config_dir() -> Path:
    override = os.environ.get("PODIUM_CONFIG_DIR")
    return Path(override) if override else Path(platformdirs.user_config_dir("podium"))


def config_path() -> Path:
    return config_dir() / CONFIG_FILE


def normalize_url(url: str) -> str:
    """``https://host/`` -> ``https://host``; refuse anything that is not http(s)."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
        raise ConfigError(f"'{url}' is not a server address; give it as https://host[:port].")
    return url


def _stored() -> dict[str, str]:
    path = config_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"Cannot read {path} ({exc}); run `podium login URL` to write it again."
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a Podium config; run `podium login URL` again.")
    return {key: value for key, value in data.items() if isinstance(value, str)}


def load(*, url_override: str | None = None, need_token: bool = True) -> Settings:
    """The server URL and token to use: command line, then environment, then the file."""
    stored = _stored()
    url = url_override or os.environ.get("PODIUM_URL") or stored.get("url")
    if not url:
        raise ConfigError("No server configured; run `podium login URL` first.")
    url = normalize_url(url)
    token = os.environ.get("PODIUM_TOKEN") or None
    if token is None and normalize_url(stored.get("url") or url) == url:
        token = stored.get("token") or None
    if need_token and token is None:
        raise ConfigError(f"Not signed in to {url}; run `podium login {url}` first.")
    return Settings(url=url, token=token)


def stored_device(url: str) -> str | None:
    """The device string the last sign-in stored, if it was a sign-in to ``url``; None
    too when the file is unreadable, which the sign-in then writes again."""
    try:
        stored = _stored()
        if not stored.get("url") or normalize_url(stored["url"]) != url:
            return None
    except ConfigError:
        return None
    return stored.get("device") or None


def save(settings: Settings) -> Path:
    """Write the file atomically, mode 0600, in a folder created with mode 0700."""
    folder = config_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fields = {"url": settings.url, "token": settings.token}
    if settings.device:
        fields["device"] = settings.device
    data = json.dumps(fields, indent=2) + "\n"
    # mkstemp creates the file with mode 0600, before the token is written into it.
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".config-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(data)
        os.replace(temporary, folder / CONFIG_FILE)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return folder / CONFIG_FILE
