"""The ladder's two endpoints: the Dockerfile dry-run check and the published sandbox."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from portal.api import sandbox as sandbox_api
from portal.contests import sandbox
from portal.contests.models import Cohort, CohortItem
from portal.environments.models import Environment
from portal.submissions.models import AttemptLedger
from tests import factories

GOOD = b"FROM localhost/podium/python:bookworm\nRUN true\n"
BAD = (
    b"ARG BASE=localhost/podium/python:bookworm\nFROM ${BASE}\n"
    b"RUN true\nFROM docker.io/library/python:3.11\nADD https://example.org/x /x\n"
)


def check(client: APIClient, slug: str, dockerfile: bytes, *, as_json: bool = False) -> Any:
    url = f"/api/v1/benchmarks/{slug}/dockerfile-check/"
    if as_json:
        return client.post(url, {"dockerfile": dockerfile.decode()}, format="json")
    upload = SimpleUploadedFile("Dockerfile", dockerfile)
    return client.post(url, {"dockerfile": upload}, format="multipart")


def create(client: APIClient, slug: str, dockerfile: bytes) -> Any:
    upload = SimpleUploadedFile("Dockerfile", dockerfile)
    return client.post(
        f"/api/v1/benchmarks/{slug}/environments/",
        {"name": "probe", "dockerfile": upload},
        format="multipart",
    )


@pytest.mark.parametrize("as_json", [False, True])
def test_a_bad_dockerfile_gets_the_uploads_refusal_line_by_line_and_nothing_is_made(
    benchmark: Any, alice: Any, client_for: Any, as_json: bool
) -> None:
    client = client_for(alice)
    factories.cohorts(benchmark)

    checked = check(client, benchmark.slug, BAD, as_json=as_json)

    assert checked.status_code == 200, checked.content
    body = checked.json()
    assert body["ok"] is False
    assert body["code"] == "dockerfile_policy"
    assert [error["line"] for error in body["errors"]] == [4, 5]
    assert not Environment.objects.exists()
    assert not AttemptLedger.objects.exists()
    uploaded = create(client, benchmark.slug, BAD)
    assert uploaded.status_code == 400
    assert uploaded.json() == {"code": "dockerfile_policy", "detail": body["detail"]}
    for error in body["errors"]:
        assert f"line {error['line']}: {error['message'].rstrip('.')}" in body["detail"]


def test_a_good_dockerfile_passes_as_its_upload_does(
    benchmark: Any, alice: Any, client_for: Any
) -> None:
    client = client_for(alice)
    factories.cohorts(benchmark)

    checked = check(client, benchmark.slug, GOOD)

    assert checked.json() == {"ok": True, "code": None, "detail": "", "errors": []}
    assert not Environment.objects.exists()
    assert create(client, benchmark.slug, GOOD).status_code == 201


def test_an_oversized_dockerfile_is_refused_as_the_upload_refuses_it(
    benchmark: Any, alice: Any, client_for: Any
) -> None:
    text = b"FROM localhost/podium/python:bookworm\n" + b"# padding\n" * 30_000

    checked = check(client_for(alice), benchmark.slug, text, as_json=True)

    assert checked.status_code == 200
    assert checked.json()["ok"] is False
    assert checked.json()["errors"] == [
        {"line": None, "message": "The Dockerfile is larger than 256 KiB."}
    ]


def test_the_check_refuses_what_it_cannot_judge(
    benchmark: Any, alice: Any, client_for: Any, anon: APIClient
) -> None:
    url = f"/api/v1/benchmarks/{benchmark.slug}/dockerfile-check/"
    client = client_for(alice)

    missing = client.post(url, {}, format="json")
    not_text = check(client, benchmark.slug, b"\xff\xfe FROM x\n")
    unknown = check(client, "no-such-benchmark", GOOD)
    signed_out = check(anon, benchmark.slug, GOOD)

    assert (missing.status_code, missing.json()["code"]) == (400, "invalid_parameter")
    assert (not_text.status_code, not_text.json()["code"]) == (400, "invalid_parameter")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "not_found")
    assert (signed_out.status_code, signed_out.json()["code"]) == (401, "not_authenticated")


def test_an_unverified_account_may_not_use_the_check_and_is_charged_nothing(
    benchmark: Any, client_for: Any
) -> None:
    # The check is the web server's work: like an upload it waits for a verified address.
    newcomer = factories.UserFactory(username="newcomer", email_verified=False)
    doubling = GOOD + b"".join(f"ENV V{i + 1}=${{V{i}}}${{V{i}}}\n".encode() for i in range(40))

    refused = check(client_for(newcomer), benchmark.slug, doubling)

    assert refused.status_code == 403
    assert refused.json()["code"] == "email_not_verified"
    assert "Verify your email address" in refused.json()["detail"]
    assert not Environment.objects.exists()
    assert not AttemptLedger.objects.exists()


def test_a_doubling_env_chain_is_refused_by_the_check_naming_its_line(
    benchmark: Any, alice: Any, client_for: Any
) -> None:
    doubling = (
        GOOD
        + b"ENV V0=xxxxxxxxxxxxxxxx\n"
        + b"".join(f"ENV V{i + 1}=${{V{i}}}${{V{i}}}\n".encode() for i in range(40))
    )

    checked = check(client_for(alice), benchmark.slug, doubling)

    body = checked.json()
    assert (checked.status_code, body["ok"], body["code"]) == (200, False, "dockerfile_policy")
    assert [error["line"] for error in body["errors"]] == [16]  # ENV V13
    assert "more than 64 KiB of variable values" in body["detail"]
    assert len(checked.content) < 2_000


def test_checks_have_their_own_throttle(
    benchmark: Any, alice: Any, client_for: Any, settings: Any
) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "checks": "2/hour",
            "uploads": "1/hour",
        },
    }
    client = client_for(alice)
    factories.cohorts(benchmark)

    codes = [check(client, benchmark.slug, GOOD).status_code for _ in range(3)]

    assert codes == [200, 200, 429]
    assert create(client, benchmark.slug, GOOD).status_code == 201  # uploads left untouched


# The sandbox ---------------------------------------------------------------------------


def practice_of(benchmark: Any, count: int) -> None:
    (practice,) = factories.cohorts(benchmark, Cohort.PRACTICE)
    for position in range(count):
        CohortItem.objects.create(
            cohort=practice,
            position=position,
            canonical_name=f"{position:04}.png",
            sha256="0" * 64,
            reference_class=position,
        )


def test_the_sandbox_is_the_scored_containers_spec(
    benchmark: Any, alice: Any, client_for: Any
) -> None:
    practice_of(benchmark, 3)

    response = client_for(alice).get(f"/api/v1/benchmarks/{benchmark.slug}/sandbox/")

    assert response.status_code == 200, response.content
    body = response.json()
    container = body["container"]
    assert container["network_mode"] == "none"
    assert container["read_only"] is True
    assert container["cap_drop"] == ["ALL"]
    assert container["mem_limit"] == benchmark.run_memory_bytes
    assert container["pids_limit"] == benchmark.run_pids_limit
    assert container["entrypoint"][0] == sandbox.SUPERVISOR_PATH
    expect = container["entrypoint"].index("--expect-bytes")
    assert container["entrypoint"][expect + 1] == "12"  # 4 bytes for each practice image
    deadline = container["entrypoint"].index("--deadline-ms")
    assert int(container["entrypoint"][deadline + 1]) == benchmark.score_timeout_s * 1000
    assert {m["Source"] for m in container["mounts"]} == {"{supervisor}", "{input}"}
    assert body["practice"]["count"] == 3
    assert body["practice"]["needed"] >= 1
    assert body["limits"]["score_timeout_s"] == benchmark.score_timeout_s
    assert body["build"]["user"] == "0"
    assert body["build"]["cap_drop"] == ["ALL"]
    supervisor = Path(settings.PODIUM_SUPERVISOR)
    assert body["supervisor"]["sha256"] == hashlib.sha256(supervisor.read_bytes()).hexdigest()
    assert body["supervisor"]["platform"] in ("linux/amd64", "linux/arm64")
    assert body["hardware"]["name"] == benchmark.hardware_class_id


def test_the_supervisor_download_is_the_one_whose_digest_is_published(
    benchmark: Any, alice: Any, client_for: Any
) -> None:
    client = client_for(alice)
    published = client.get(f"/api/v1/benchmarks/{benchmark.slug}/sandbox/").json()

    response = client.get(f"/api/v1/benchmarks/{benchmark.slug}/sandbox/supervisor")

    assert response.status_code == 200
    data = b"".join(response.streaming_content)
    assert hashlib.sha256(data).hexdigest() == published["supervisor"]["sha256"]
    assert published["practice"] is None  # no practice cohort yet: nothing to run on


def test_a_portal_without_a_supervisor_says_so(
    benchmark: Any, alice: Any, client_for: Any, settings: Any, tmp_path: Path
) -> None:
    settings.PODIUM_SUPERVISOR = tmp_path / "missing"
    client = client_for(alice)

    published = client.get(f"/api/v1/benchmarks/{benchmark.slug}/sandbox/").json()
    download = client.get(f"/api/v1/benchmarks/{benchmark.slug}/sandbox/supervisor")

    assert published["supervisor"]["available"] is False
    assert published["supervisor"]["download_url"] is None
    assert (download.status_code, download.json()["code"]) == (404, "not_found")


@pytest.mark.parametrize("path", ["sandbox/", "sandbox/supervisor"])
def test_the_sandbox_needs_a_sign_in_and_a_benchmark(
    benchmark: Any, alice: Any, client_for: Any, anon: APIClient, path: str
) -> None:
    unknown = client_for(alice).get(f"/api/v1/benchmarks/no-such/{path}")
    signed_out = anon.get(f"/api/v1/benchmarks/{benchmark.slug}/{path}")

    assert (unknown.status_code, unknown.json()["code"]) == (404, "not_found")
    assert (signed_out.status_code, signed_out.json()["code"]) == (401, "not_authenticated")


def test_the_elf_platform_is_read_from_the_header() -> None:
    amd64 = b"\x7fELF\x02\x01\x01" + b"\x00" * 11 + (62).to_bytes(2, "little")
    arm64 = amd64[:18] + (183).to_bytes(2, "little")

    assert sandbox.elf_platform(amd64) == "linux/amd64"
    assert sandbox.elf_platform(arm64) == "linux/arm64"
    assert sandbox.elf_platform(b"#!/bin/sh\n" + b"\x00" * 10) is None
    assert sandbox_api.supervisor_facts() is not None


@pytest.mark.parametrize("body", [[], "FROM x", 7, {"dockerfile": 7}])
def test_a_json_body_without_the_dockerfile_is_refused(
    benchmark: Any, alice: Any, client_for: Any, body: Any
) -> None:
    url = f"/api/v1/benchmarks/{benchmark.slug}/dockerfile-check/"

    response = client_for(alice).post(url, body, format="json")

    assert (response.status_code, response.json()["code"]) == (400, "invalid_parameter")
