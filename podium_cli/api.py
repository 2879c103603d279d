"""The HTTP side: one ``requests`` session per command, errors turned into ``CliError``s.

Uploads are written to a temporary multipart body on disk and streamed from there, so
an archive of gigabytes is never held in memory and the server sees its length up front
(it refuses an oversized upload before reading it).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import requests

from podium_cli import __version__
from podium_cli.errors import CliError, Refused, Unreachable

API_PREFIX = "/api/v1"
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
UPLOAD_READ_TIMEOUT_S = 600.0  # the server checks every member of the archive first


class Client:
    """Calls ``{url}/api/v1/...`` with ``Authorization: Token`` when a token is given."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers["User-Agent"] = f"podium-cli/{__version__}"
        self.session.headers["Accept"] = "application/json"
        if token:
            self.session.headers["Authorization"] = f"Token {token}"

    def get_json(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return _json(self._request("GET", path, params=params), self.url)

    def get_text(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        return self._request("GET", path, params=params).text

    def get_bytes(self, path: str) -> tuple[bytes, Mapping[str, str]]:
        """A download's body and its response headers."""
        response = self._request("GET", path, headers={"Accept": "*/*"})
        return response.content, response.headers

    def download(self, path: str, dest: Path) -> Mapping[str, str]:
        """Stream a download's body into ``dest``; its response headers."""
        response = self._request(
            "GET",
            path,
            headers={"Accept": "*/*"},
            stream=True,
            timeout=(CONNECT_TIMEOUT_S, UPLOAD_READ_TIMEOUT_S),
        )
        with response, dest.open("wb") as out:
            for chunk in response.iter_content(1024 * 1024):
                out.write(chunk)
        return response.headers

    def post_json(self, path: str, payload: Mapping[str, Any]) -> Any:
        return _json(self._request("POST", path, json=payload), self.url)

    def put_json(self, path: str, payload: Mapping[str, Any]) -> Any:
        return _json(self._request("PUT", path, json=payload), self.url)

    def post_files(
        self, path: str, fields: Mapping[str, str], files: Mapping[str, tuple[str, Path]]
    ) -> Any:
        """POST ``multipart/form-data``: text ``fields`` and ``files`` {field: (name, path)}."""
        with multipart_body(fields, files) as (body, content_type):
            response = self._request(
                "POST",
                path,
                data=body,
                headers={"Content-Type": content_type},
                timeout=(CONNECT_TIMEOUT_S, UPLOAD_READ_TIMEOUT_S),
            )
        return _json(response, self.url)

    def _request(self, method: str, path: str, **options: Any) -> requests.Response:
        options.setdefault("timeout", (CONNECT_TIMEOUT_S, READ_TIMEOUT_S))
        address = f"{self.url}{API_PREFIX}{path}"
        try:
            response = self.session.request(method, address, **options)
        except requests.Timeout as exc:
            raise Unreachable(f"{self.url} did not answer in time; try again later.") from exc
        except requests.ConnectionError as exc:
            raise Unreachable(
                f"Cannot reach {self.url} ({_reason(exc)}); check the address and your network."
            ) from exc
        except requests.RequestException as exc:
            raise Unreachable(f"Request to {self.url} failed: {exc}") from exc
        if response.status_code >= 400:
            raise _failure(response, method, path, self.url)
        return response


def _reason(exc: requests.RequestException) -> str:
    """The innermost cause of a connection error, short (urllib3 nests several)."""
    cause: BaseException = exc
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
    text = str(cause) or type(cause).__name__
    return re.sub(r"^\[Errno -?\d+\]\s*", "", text)


def _failure(response: requests.Response, method: str, path: str, url: str) -> CliError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("code"), str) and response.status_code < 500:
        return Refused(body["code"], str(body.get("detail") or ""), url=url)
    status = f"HTTP {response.status_code} {response.reason or ''}".strip()
    if response.status_code >= 500:
        return Unreachable(
            f"The server failed ({status}) on {method} {API_PREFIX}{path}; "
            "try again in a while, and tell the organizers if it keeps failing."
        )
    return Unreachable(
        f"{url} answered {status} to {method} {API_PREFIX}{path} without the Podium API's "
        "error format; check the address given to `podium login`."
    )


def _json(response: requests.Response, url: str) -> Any:
    if response.status_code == 204:
        return None
    try:
        return response.json()
    except ValueError as exc:
        raise Unreachable(
            f"{url} did not answer with JSON; is it a Podium server? "
            "Check the address given to `podium login`."
        ) from exc


@contextlib.contextmanager
def multipart_body(
    fields: Mapping[str, str], files: Mapping[str, tuple[str, Path]]
) -> Iterator[tuple[IO[bytes], str]]:
    """A ``multipart/form-data`` body in a temporary file, and its Content-Type."""
    boundary = f"podium-{uuid.uuid4().hex}"
    with tempfile.TemporaryFile() as body:
        for name, value in fields.items():
            body.write(_part_header(boundary, f'name="{_quoted(name)}"'))
            body.write(value.encode("utf-8") + b"\r\n")
        for name, (filename, path) in files.items():
            disposition = f'name="{_quoted(name)}"; filename="{_quoted(filename)}"'
            body.write(
                _part_header(boundary, disposition, "Content-Type: application/octet-stream\r\n")
            )
            with path.open("rb") as source:
                shutil.copyfileobj(source, body, 1024 * 1024)
            body.write(b"\r\n")
        body.write(f"--{boundary}--\r\n".encode())
        body.seek(0)
        yield body, f"multipart/form-data; boundary={boundary}"


def _part_header(boundary: str, disposition: str, extra: str = "") -> bytes:
    return f"--{boundary}\r\nContent-Disposition: form-data; {disposition}\r\n{extra}\r\n".encode()


def _quoted(text: str) -> str:
    """A form field or file name as browsers quote it inside the header."""
    return text.replace("\\", "\\\\").replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")
