"""Upload bounds: every upload route refuses what is over its limit before it stores a byte.

Each test is an attacker's request that the portal used to take in: a body declared far
over the limit (the web forms and the environment API streamed it to disk), a body longer
than it declares, a zip whose end record declares a million entries (zipfile parsed the
whole central directory), and uploads spread over the web form and the API to get past
the upload throttle. The bodies are streamed the way a client sends them, through the
real CSRF check, and the tests count what the server read and what reached the handler
that writes uploads to disk.
"""

from __future__ import annotations

import io
import re
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.core.files.uploadhandler import TemporaryFileUploadHandler
from django.test import Client
from django.urls import resolve
from django.utils import timezone
from rest_framework.test import APIClient

from podium_policy import archives
from portal.contests import uploads
from portal.environments.models import Environment
from portal.submissions.attempts import quota_for
from portal.submissions.models import AttemptLedger, Submission
from tests import factories

BOUNDARY = "AttackerBoundary7MA4YWxkTrZu0gW"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"
GIB = 1024**3
DECLARED_HUGE = 50 * GIB  # far over every route's limit (2 GiB archives by default)
STREAMED = 64 * 1024 * 1024  # what the attacker would go on sending, if read
DOCKERFILE = b"FROM localhost/podium/busybox:1\nRUN true\n"
TOO_LARGE = "The upload is 53,687,091,200 bytes; this benchmark accepts"


@pytest.fixture(autouse=True)
def _no_broker_and_no_counts(sent: list[Any]) -> list[Any]:
    """The broker recorder, and no upload throttle counts from another test."""
    cache.clear()
    return sent


@pytest.fixture(autouse=True)
def upload_temp_dir(settings: Any, data_dir: Path) -> Path:
    """Uploads stream to temporary files under the test's own data folder."""
    folder = data_dir / "uploads"
    folder.mkdir(exist_ok=True)
    settings.FILE_UPLOAD_TEMP_DIR = str(folder)
    return folder


@pytest.fixture
def stored(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every file part the disk-writing handler was given, as (field, bytes written)."""
    parts: list[tuple[str, int]] = []
    new_file = TemporaryFileUploadHandler.new_file
    receive = TemporaryFileUploadHandler.receive_data_chunk

    def record_new_file(self: TemporaryFileUploadHandler, field_name: str, *args: Any) -> None:
        parts.append((field_name, 0))
        new_file(self, field_name, *args)

    def record_chunk(self: TemporaryFileUploadHandler, raw_data: bytes, start: int) -> Any:
        field, written = parts[-1]
        parts[-1] = (field, written + len(raw_data))
        return receive(self, raw_data, start)

    monkeypatch.setattr(TemporaryFileUploadHandler, "new_file", record_new_file)
    monkeypatch.setattr(TemporaryFileUploadHandler, "receive_data_chunk", record_chunk)
    return parts


@pytest.fixture
def ready(alice: Any, benchmark: Any) -> Environment:
    """Alice's ready environment on the benchmark, which has both its cohorts."""
    factories.cohorts(benchmark)
    return factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, name="ready-one", image_digest="sha256:" + "e" * 64
    )


def files_under(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()]


def nothing_charged(alice: Any, benchmark: Any) -> bool:
    used = [
        quota_for(alice, benchmark, kind, timezone.now()).used_today
        for kind in (Submission.OFFICIAL, Submission.PRACTICE)
    ]
    return used == [0, 0] and not AttemptLedger.objects.exists()


# Building and sending bodies ---------------------------------------------------------------


def field(name: str, value: str) -> bytes:
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
    ).encode()


def file_head(name: str, filename: str) -> bytes:
    return (
        f"--{BOUNDARY}\r\n"
        f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()


def file_part(name: str, filename: str, data: bytes) -> bytes:
    return file_head(name, filename) + data + b"\r\n"


CLOSING = f"--{BOUNDARY}--\r\n".encode()


class AttackBody:
    """A request body as a client streams it: ``head``, then ``filler`` bytes of file data,
    then ``tail``. ``served`` counts what the server read of it."""

    def __init__(self, head: bytes, filler: int = STREAMED, tail: bytes = b"\r\n" + CLOSING):
        self.stream = io.BytesIO(head)
        self.head_length = len(head)
        self.filler = filler
        self.tail = tail
        self.served = 0

    def _take(self, size: int) -> bytes:
        if size < 0:
            size = self.head_length + self.filler + len(self.tail)
        data = self.stream.read(size)
        if len(data) < size and self.filler:
            padding = min(size - len(data), self.filler)
            self.filler -= padding
            data += b"\0" * padding
            if not self.filler:
                self.stream = io.BytesIO(self.tail)
        if len(data) < size:
            data += self.stream.read(size - len(data))
        self.served += len(data)
        return data

    def read(self, size: int = -1, /) -> bytes:
        return self._take(size)

    def readline(self, size: int = -1, /) -> bytes:  # pragma: no cover - multipart reads blocks
        return self._take(size)


def send(client: Client, url: str, body: Any, length: int | None, **extra: Any) -> Any:
    """POST ``body`` (a stream) as the multipart body of ``url``, declaring ``length``."""
    environ: dict[str, Any] = {"CONTENT_TYPE": CONTENT_TYPE, "wsgi.input": body, **extra}
    if length is not None:
        environ["CONTENT_LENGTH"] = str(length)
    return client.generic("POST", url, b"", content_type=CONTENT_TYPE, **environ)


def csrf_client(user: Any, page: str, client_class: type[Client] = Client) -> tuple[Client, str]:
    """A signed-in client that enforces CSRF as a browser's requests meet it, and its token
    (from the page, as a browser gets it)."""
    client = client_class(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.get(page).status_code == 200
    return client, client.cookies["csrftoken"].value


def source_archive(padding: int = 0) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=0) as archive:
        for name, mode, data in (
            ("run", 0o755, b"#!/bin/sh\nexit 0\n"),
            ("build.sh", 0o644, b"#!/bin/sh\ntrue\n"),
            ("weights.bin", 0o644, b"w" * padding),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def submissions_page(benchmark: Any) -> str:
    return f"/b/{benchmark.slug}/submissions/"


def environments_page(benchmark: Any) -> str:
    return f"/b/{benchmark.slug}/environments/"


def submissions_api(benchmark: Any) -> str:
    return f"/api/v1/benchmarks/{benchmark.slug}/submissions/"


def environments_api(benchmark: Any) -> str:
    return f"/api/v1/benchmarks/{benchmark.slug}/environments/"


# A body declared over the route's limit ----------------------------------------------------


def test_the_web_submission_form_refuses_a_huge_declared_body_before_storing_any(
    alice, benchmark, ready, stored, data_dir
):
    client, token = csrf_client(alice, submissions_page(benchmark))
    body = AttackBody(
        field("csrfmiddlewaretoken", token)
        + field("environment", str(ready.pk))
        + field("kind", "official")
        + file_head("source", "entry.tar.gz")
    )

    response = send(client, submissions_page(benchmark), body, DECLARED_HUGE)

    assert response.status_code == 413
    page = response.content.decode()
    assert TOO_LARGE in page and "archives of at most 2,147,483,648 bytes" in page
    assert body.served < 256 * 1024  # the form fields, then it stopped at the file part
    assert stored == []
    assert files_under(data_dir) == []
    assert not Submission.objects.exists()
    assert nothing_charged(alice, benchmark)


def test_the_web_environment_form_refuses_a_huge_declared_body_before_storing_any(
    alice, benchmark, stored, data_dir
):
    client, token = csrf_client(alice, environments_page(benchmark))
    body = AttackBody(
        field("csrfmiddlewaretoken", token)
        + field("name", "big")
        + file_part("dockerfile_file", "Dockerfile", DOCKERFILE)
        + file_head("context", "context.tar.gz")
    )

    response = send(client, environments_page(benchmark), body, DECLARED_HUGE)

    assert response.status_code == 413
    page = response.content.decode()
    assert TOO_LARGE in page and "a Dockerfile of at most 256 KiB" in page
    assert body.served < 256 * 1024
    assert stored == []  # not even the small Dockerfile before the archive
    assert files_under(data_dir) == []
    assert not Environment.objects.exists()


def test_the_environment_api_refuses_a_huge_declared_dockerfile_before_reading_it(
    alice, benchmark, client_for, stored, data_dir
):
    body = AttackBody(field("name", "big") + file_head("dockerfile", "Dockerfile"))

    response = send(client_for(alice), environments_api(benchmark), body, DECLARED_HUGE)

    assert response.status_code == 413
    assert response.json()["code"] == "archive_too_large"
    assert response.json()["detail"].startswith(TOO_LARGE)
    assert body.served == 0
    assert stored == []
    assert files_under(data_dir) == []
    assert not Environment.objects.exists()


def test_the_environment_api_refuses_a_huge_declared_context_from_a_session_too(
    alice, benchmark, stored, data_dir
):
    # A browser session is checked for CSRF, which reads the body before the view runs.
    client, token = csrf_client(alice, environments_page(benchmark), APIClient)
    body = AttackBody(
        field("name", "big")
        + file_part("dockerfile", "Dockerfile", DOCKERFILE)
        + file_head("context", "context.tar.gz")
    )

    response = send(
        client, environments_api(benchmark), body, DECLARED_HUGE, HTTP_X_CSRFTOKEN=token
    )

    assert response.status_code == 413
    assert response.json()["code"] == "archive_too_large"
    assert response.json()["detail"].startswith(TOO_LARGE)
    assert body.served < 256 * 1024
    assert stored == []
    assert files_under(data_dir) == []
    assert not Environment.objects.exists()


def test_the_submission_api_refuses_a_huge_declared_body_from_a_session_too(
    alice, benchmark, ready, stored, data_dir
):
    client, token = csrf_client(alice, submissions_page(benchmark), APIClient)
    body = AttackBody(field("environment", str(ready.pk)) + file_head("source", "a.tar.gz"))

    response = send(client, submissions_api(benchmark), body, DECLARED_HUGE, HTTP_X_CSRFTOKEN=token)

    assert response.status_code == 413
    assert response.json()["code"] == "archive_too_large"
    assert body.served < 256 * 1024
    assert stored == []
    assert files_under(data_dir) == []
    assert nothing_charged(alice, benchmark)


# A file part over its cap, a body without a length, a body longer than declared ----------


def test_an_archive_over_its_cap_stops_the_upload_at_the_cap(
    alice, benchmark, ready, client_for, stored, data_dir
):
    benchmark.max_upload_bytes = 100_000
    benchmark.save(update_fields=["max_upload_bytes"])
    # Declared within the limit (the archive's cap plus the form allowance), but the archive
    # part alone goes on past its cap.
    body = AttackBody(field("environment", str(ready.pk)) + file_head("source", "a.tar.gz"))

    response = send(client_for(alice), submissions_api(benchmark), body, 1_000_000)

    assert response.status_code == 413
    assert response.json() == {
        "code": "archive_too_large",
        "detail": "The source archive is larger than 100,000 bytes, the most this benchmark "
        "accepts.",
    }
    assert [field_name for field_name, _ in stored] == ["source"]
    assert all(written <= 100_000 for _, written in stored)
    assert body.served < 300_000
    assert files_under(data_dir) == []  # the partial temporary file is gone
    assert nothing_charged(alice, benchmark)


def test_a_dockerfile_over_256_kib_stops_the_upload_as_the_policy_says(
    alice, benchmark, client_for, stored, data_dir
):
    body = AttackBody(field("name", "big") + file_head("dockerfile", "Dockerfile"))

    response = send(client_for(alice), environments_api(benchmark), body, 5_000_000)

    assert response.status_code == 400
    assert response.json() == {
        "code": "dockerfile_policy",
        "detail": "The Dockerfile is larger than 256 KiB.",
    }
    assert all(written <= 256 * 1024 for _, written in stored)
    assert body.served < 512 * 1024
    assert files_under(data_dir) == []
    assert not Environment.objects.exists()


@pytest.mark.parametrize("route", ["web", "api"])
def test_a_chunked_body_without_a_length_is_refused_unread(
    route, alice, benchmark, ready, client_for, stored, data_dir
):
    body = AttackBody(field("environment", str(ready.pk)) + file_head("source", "a.tar.gz"))
    if route == "web":
        client, url = Client(), submissions_page(benchmark)
        client.force_login(alice)
    else:
        client, url = client_for(alice), submissions_api(benchmark)

    response = send(client, url, body, None, HTTP_TRANSFER_ENCODING="chunked")

    assert response.status_code == 413
    sentence = "The upload must declare its size in a Content-Length header"
    if route == "api":
        assert response.json()["code"] == "archive_too_large"
        assert response.json()["detail"].startswith(sentence)
    else:
        assert sentence in response.content.decode()
    assert body.served == 0
    assert stored == []
    assert files_under(data_dir) == []
    assert nothing_charged(alice, benchmark)


@pytest.mark.parametrize("route", ["web", "api"])
def test_a_body_longer_than_its_declared_length_is_refused_and_nothing_kept(
    route, alice, benchmark, ready, client_for, stored, data_dir
):
    whole = (
        field("environment", str(ready.pk))
        + field("kind", "practice")
        + file_part("source", "entry.tar.gz", source_archive(padding=200_000))
        + CLOSING
    )
    declared = len(whole) - 50_000  # the server reads this much: the archive is cut inside
    if route == "web":
        client, url = Client(), submissions_page(benchmark)
        client.force_login(alice)
    else:
        client, url = client_for(alice), submissions_api(benchmark)

    response = send(client, url, io.BytesIO(whole), declared)

    assert response.status_code == 413
    if route == "api":
        assert response.json() == {"code": "archive_too_large", "detail": uploads.LENGTH_MISMATCH}
    else:
        assert uploads.LENGTH_MISMATCH.replace("'", "&#x27;") in response.content.decode()
    assert files_under(data_dir) == []
    assert not Submission.objects.exists()
    assert nothing_charged(alice, benchmark)


def test_the_handler_stops_at_more_file_bytes_than_the_body_declared(
    alice, benchmark, ready, stored, rf
):
    # Django's WSGI request never reads past the declared length; a server handing over a
    # stream that does is still held to it.
    whole = field("environment", str(ready.pk)) + file_part("source", "a.tar.gz", b"x" * 300_000)
    request = rf.post(submissions_api(benchmark), data=whole, content_type=CONTENT_TYPE)
    request.META["CONTENT_LENGTH"] = "100000"
    request._stream = io.BytesIO(whole)  # what an unchecked server would hand over
    request.resolver_match = resolve(submissions_api(benchmark))

    assert "source" not in request.FILES

    handler = request.upload_handlers[0]
    assert isinstance(handler, uploads.BoundedUploadHandler)
    assert handler.refusal is not None and handler.refusal.detail == uploads.LENGTH_MISMATCH
    assert all(written <= 100_000 for _, written in stored)


def test_a_file_part_the_route_does_not_take_is_refused(
    alice, benchmark, ready, client_for, stored, data_dir
):
    body = (
        field("environment", str(ready.pk))
        + file_part("source", "a.tar.gz", source_archive())
        + file_part("extra", "big.bin", b"x" * 10_000)
        + CLOSING
    )

    response = send(client_for(alice), submissions_api(benchmark), io.BytesIO(body), len(body))

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"
    assert response.json()["detail"].startswith("`extra` is not a file this upload takes")
    assert [field_name for field_name, _ in stored] == ["source"]
    assert files_under(data_dir) == []
    assert nothing_charged(alice, benchmark)


def test_a_route_that_takes_no_upload_stores_no_file_part(alice, stored, data_dir):
    body = (
        field("username", "alice")
        + field("password", "correct horse battery")
        + file_part("junk", "junk.bin", b"j" * 500_000)
        + CLOSING
    )

    response = send(APIClient(), "/api/v1/tokens/", io.BytesIO(body), len(body))

    assert response.status_code == 201
    assert stored == []
    assert files_under(data_dir) == []


# The million-entry zip ------------------------------------------------------------------


def million_entry_zip(entries: int = 1_000_000) -> bytes:
    """A one-member zip, written byte by byte, whose end records declare ``entries`` entries
    in a directory as large as that many would fill: a ZIP64 end record and its locator,
    then an end record deferring to them."""
    name, data = b"run", b"#!/bin/sh\nexit 0\n"
    crc = zlib.crc32(data)
    local = struct.pack(
        "<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0x21, crc, len(data), len(data), len(name), 0
    )
    central = struct.pack(
        "<4s6H3L5H2L", b"PK\x01\x02", 0x031E, 20, 0, 0, 0, 0x21, crc, len(data), len(data),
        len(name), 0, 0, 0, 0, 0o100755 << 16, 0,
    ) + name  # fmt: skip
    directory_at = len(local) + len(name) + len(data)
    zip64_end_at = directory_at + len(central)
    zip64_end = struct.pack(
        "<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, entries * len(central),
        directory_at,
    )  # fmt: skip
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, zip64_end_at, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 2**32 - 1, 2**32 - 1, 0)
    return local + name + data + central + zip64_end + locator + end


def test_the_crafted_zip_is_a_zip_but_for_its_count() -> None:
    """The million-entry zip differs from a good one in its declared count alone: with the
    count put right, zipfile and the pre-check both read its one member."""
    one = million_entry_zip(entries=1)
    with zipfile.ZipFile(io.BytesIO(one)) as archive:
        assert archive.namelist() == ["run"]
        assert archive.read("run") == b"#!/bin/sh\nexit 0\n"
    assert archives.check_zip_directory(io.BytesIO(one), max_members=1) == 1


@pytest.fixture
def zipfile_never_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        pytest.fail("zipfile.ZipFile was opened on an archive the pre-check should refuse")

    monkeypatch.setattr(zipfile, "ZipFile", refuse)


def test_a_zip_declaring_a_million_entries_is_refused_before_zipfile_reads_it(
    tmp_path: Path, zipfile_never_opened: None
) -> None:
    path = tmp_path / "million.zip"
    path.write_bytes(million_entry_zip())
    assert path.stat().st_size < 1024

    with pytest.raises(archives.ArchiveError) as refused:
        archives.inspect_archive(path, archives.detect_format(path))

    assert str(refused.value) == "The archive has more than 100,000 members; pack fewer files."


def test_uploading_the_million_entry_zip_charges_nothing(
    alice, benchmark, ready, client_for, zipfile_never_opened, data_dir
):
    data = million_entry_zip()
    body = field("environment", str(ready.pk)) + file_part("source", "kit.zip", data) + CLOSING

    response = send(client_for(alice), submissions_api(benchmark), io.BytesIO(body), len(body))

    assert response.status_code == 400
    assert response.json() == {
        "code": "invalid_archive",
        "detail": "The archive has more than 100,000 members; pack fewer files.",
    }
    assert not Submission.objects.exists()
    assert nothing_charged(alice, benchmark)
    assert files_under(data_dir) == []


# One upload throttle for the web forms and the API ----------------------------------------


def upload_rate(settings: Any, rate: str) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "uploads": rate,
        },
    }


def web_upload(client: Client, benchmark: Any, environment: Environment) -> Any:
    source = io.BytesIO(source_archive())
    source.name = "entry.tar.gz"
    return client.post(
        submissions_page(benchmark),
        {"environment": environment.pk, "kind": "practice", "source": source},
    )


def api_upload(client: APIClient, benchmark: Any, environment: Environment) -> Any:
    return client.post(
        submissions_api(benchmark),
        {
            "environment": environment.pk,
            "kind": "practice",
            "source": io.BytesIO(source_archive()),
        },
        format="multipart",
    )


def test_the_web_form_and_the_api_share_one_upload_allowance(
    alice, bob, benchmark, ready, client_for, settings, data_dir
):
    upload_rate(settings, "3/hour")
    api = client_for(alice)
    web = Client()
    web.force_login(alice)

    first = api_upload(api, benchmark, ready)
    second = web_upload(web, benchmark, ready)
    third = api.post(environments_api(benchmark), {"name": "x"}, format="multipart")
    fourth = web_upload(web, benchmark, ready)
    fifth = api_upload(api, benchmark, ready)

    assert first.status_code == 201, first.content
    assert second.status_code == 302  # accepted, on to the submission's page
    assert third.status_code == 400  # refused, but counted as the API counts every upload
    assert fourth.status_code == 429
    page = fourth.content.decode()
    assert "You have made 3 uploads in the last hour, the most allowed (web and API" in page
    assert re.search(r"you may upload again in (59 min \d+ s|1 h 0 min)\.", page)
    assert fifth.status_code == 429
    assert fifth.json()["code"] == "throttled"
    assert Submission.objects.filter(entrant=alice).count() == 2  # the refused ones kept nothing
    assert len(list((data_dir / "submissions").iterdir())) == 2

    rival = Client()
    rival.force_login(bob)
    bobs_ready = factories.EnvironmentFactory(
        owner=bob, benchmark=benchmark, image_digest="sha256:" + "e" * 64
    )
    assert web_upload(rival, benchmark, bobs_ready).status_code == 302  # alice's count only


def test_a_throttled_web_environment_upload_says_when_and_keeps_nothing(
    alice, benchmark, client_for, data_dir, settings
):
    upload_rate(settings, "1/hour")
    api = client_for(alice)
    web = Client()
    web.force_login(alice)
    refused = api.post(environments_api(benchmark), {"name": "x"}, format="multipart")
    assert refused.status_code == 400  # no Dockerfile; the upload still counts
    dockerfile = io.BytesIO(DOCKERFILE)
    dockerfile.name = "Dockerfile"

    response = web.post(
        environments_page(benchmark), {"name": "second", "dockerfile_file": dockerfile}
    )

    assert response.status_code == 429
    assert "you may upload again in" in response.content.decode()
    assert not Environment.objects.exists()
    assert files_under(data_dir / "uploads") == []
