"""Write-ups: one PDF per entrant per benchmark on one of their graded official
submissions; staff read it (a private one with a reason, audited), everyone a public one."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.audit.models import AuditEvent
from portal.core import storage
from portal.standings.models import WriteUp
from portal.submissions.models import Submission
from tests import factories
from tests.web.boards import official_run

MS = 1_000_000
PDF = b"%PDF-1.7\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"


def pdf(content: bytes = PDF, name: str = "approach.pdf") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type="application/pdf")


def url(submission_id: int, rest: str = "") -> str:
    return f"/api/v1/submissions/{submission_id}/writeup/{rest}"


@pytest.fixture
def graded(benchmark, alice):
    """Two of alice's graded official submissions (one passed, one failed on accuracy)."""
    start = timezone.now() - dt.timedelta(hours=5)
    passed = official_run(benchmark, alice, 900 * MS, at=start).submission
    failed = official_run(
        benchmark, alice, 800 * MS, at=start + dt.timedelta(hours=1), passed=False
    ).submission
    return passed, failed


def put(client, submission_id: int, upload=None, public: bool = False):
    return client.put(
        url(submission_id),
        {"writeup": upload or pdf(), "public": "true" if public else "false"},
        format="multipart",
    )


def test_an_entrant_attaches_a_pdf_and_reads_it_back(client_for, alice, graded, data_dir):
    passed, _ = graded
    client = client_for(alice)

    response = put(client, passed.pk)

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["submission_id"], body["public"], body["size_bytes"]) == (
        passed.pk,
        False,
        len(PDF),
    )
    assert client.get(url(passed.pk)).json()["file_name"] == "approach.pdf"
    download = client.get(url(passed.pk, "download"))
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == PDF
    assert download["Content-Type"] == "application/pdf"


def test_a_failed_on_accuracy_submission_is_graded_too(client_for, alice, graded):
    _, failed = graded

    assert put(client_for(alice), failed.pk).status_code == 200


def test_a_file_that_is_not_a_pdf_is_refused(client_for, alice, graded):
    passed, _ = graded

    response = put(client_for(alice), passed.pk, pdf(b"<html>not a pdf</html>", "x.pdf"))

    assert response.status_code == 400 and response.json()["code"] == "invalid_parameter"
    assert "PDF" in response.json()["detail"]
    assert not WriteUp.objects.exists()


def test_a_pdf_over_the_limit_is_refused(client_for, alice, graded, settings):
    settings.PODIUM_WRITEUP_MAX_BYTES = 1_000
    passed, _ = graded

    response = put(client_for(alice), passed.pk, pdf(PDF + b"0" * 2_000))

    assert response.status_code == 413 and response.json()["code"] == "archive_too_large"
    assert "1,000 bytes" in response.json()["detail"]
    assert not WriteUp.objects.exists()


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": Submission.PRACTICE},
        {"status": Submission.ERRORED},
        {"status": Submission.RUNNING},
        {"disqualified_at": timezone.now()},
    ],
    ids=["practice", "errored", "not-finished", "disqualified"],
)
def test_a_submission_that_is_not_graded_is_refused(client_for, benchmark, alice, fields):
    run = official_run(benchmark, alice, 900 * MS)
    Submission.objects.filter(pk=run.submission_id).update(**fields)

    response = put(client_for(alice), run.submission_id)

    assert response.status_code == 400 and response.json()["code"] == "invalid_parameter"
    assert not WriteUp.objects.exists()


def test_another_entrants_submission_is_not_found(client_for, alice, bob, graded):
    passed, _ = graded

    response = put(client_for(bob), passed.pk)

    assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert not WriteUp.objects.exists()


def test_a_second_upload_replaces_the_first_even_on_another_submission(
    client_for, alice, graded, data_dir
):
    passed, failed = graded
    client = client_for(alice)
    put(client, passed.pk)

    second = PDF + b"% revised\n"
    response = put(client, failed.pk, pdf(second, "v2.pdf"), public=True)

    assert response.status_code == 200
    (writeup,) = WriteUp.objects.all()
    assert (writeup.submission_id, writeup.public, writeup.file_name) == (failed.pk, True, "v2.pdf")
    assert client.get(url(passed.pk)).status_code == 404  # the first submission has none now
    path = storage.writeup_path(writeup.benchmark_id, alice.pk)
    assert path.read_bytes() == second
    event = AuditEvent.objects.filter(action="writeup.upload").order_by("id").last()
    assert event.details["replaced_submission"] == passed.pk


def test_private_write_ups_are_hidden_from_others_public_ones_shown(client_for, alice, bob, graded):
    passed, _ = graded
    owner = client_for(alice)
    put(owner, passed.pk)

    assert client_for(bob).get(url(passed.pk)).status_code == 404
    assert client_for(bob).get(url(passed.pk, "download")).status_code == 404

    assert owner.patch(url(passed.pk), {"public": True}, format="json").json()["public"] is True
    assert client_for(bob).get(url(passed.pk)).json()["entrant"] == "alice"
    assert client_for(bob).get(url(passed.pk, "download")).status_code == 200
    assert APIClient().get(url(passed.pk, "download")).status_code == 401  # the API needs a token


def test_staff_read_a_private_write_up_only_with_a_reason_audited(client_for, alice, graded):
    passed, _ = graded
    put(client_for(alice), passed.pk)
    charlie = factories.UserFactory(username="charlie", is_staff=True)
    charlie.groups.add(Group.objects.get(name="contest staff"))
    staff = client_for(charlie)

    assert staff.get(url(passed.pk)).json()["submission_id"] == passed.pk  # its facts
    refused = staff.get(url(passed.pk, "download"))
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_parameter"
    assert not AuditEvent.objects.filter(action="writeup.download").exists()

    read = staff.get(url(passed.pk, "download"), {"reason": "prize eligibility"})

    assert read.status_code == 200
    event = AuditEvent.objects.get(action="writeup.download")
    assert (event.actor, event.reason, event.target) == (
        charlie,
        "prize eligibility",
        f"submission:{passed.pk}",
    )


def test_staff_without_the_permission_are_refused(client_for, alice, graded):
    passed, _ = graded
    put(client_for(alice), passed.pk)
    dave = factories.UserFactory(username="dave", is_staff=True)

    response = client_for(dave).get(url(passed.pk, "download"), {"reason": "curious"})

    assert response.status_code == 403 and response.json()["code"] == "permission_denied"


def test_the_entrant_removes_their_write_up(client_for, alice, graded):
    passed, _ = graded
    client = client_for(alice)
    put(client, passed.pk)

    assert client.delete(url(passed.pk)).status_code == 204
    assert not WriteUp.objects.exists()
    assert not storage.writeup_path(passed.benchmark_id, alice.pk).exists()
    assert client.delete(url(passed.pk)).status_code == 404


# The pages ---------------------------------------------------------------------------


def test_the_submission_page_uploads_and_the_benchmark_page_lists_a_public_one(
    benchmark, alice, graded
):
    passed, _ = graded
    browser = Client()
    browser.force_login(alice)
    page = browser.get(f"/submissions/{passed.pk}/").content.decode()
    assert 'id="writeup-heading"' in page

    browser.post(f"/submissions/{passed.pk}/writeup/", {"writeup": pdf(), "public": "on"})

    anonymous = Client()
    detail = anonymous.get(f"/b/{benchmark.slug}/").content.decode()
    assert f'href="/submissions/{passed.pk}/writeup.pdf"' in detail
    assert "published a write-up" in detail  # alice's board row is marked
    pdf_response = anonymous.get(f"/submissions/{passed.pk}/writeup.pdf")
    assert b"".join(pdf_response.streaming_content) == PDF

    browser.post(f"/submissions/{passed.pk}/writeup/change", {"action": "private"})

    detail = anonymous.get(f"/b/{benchmark.slug}/").content.decode()
    assert "writeup.pdf" not in detail and "published a write-up" not in detail
    assert anonymous.get(f"/submissions/{passed.pk}/writeup.pdf").status_code == 404
    assert browser.get(f"/submissions/{passed.pk}/writeup.pdf").status_code == 200


def test_every_route_serves_a_writeup_as_a_sandboxed_attachment(
    benchmark, alice, bob, graded, client_for
):
    # A PDF whose body is also HTML with a script: a reader's browser must never render
    # it as a page of the portal, wherever the link comes from.
    passed, _ = graded
    polyglot = PDF + b"<html><body><script>fetch('/api/v1/tokens/')</script></body></html>\n"
    assert (
        put(client_for(alice), passed.pk, pdf(polyglot, "=evil.html"), public=True).status_code
        == 200
    )

    served = {
        "api, another entrant": client_for(bob).get(url(passed.pk, "download")),
        "page link, signed out": Client().get(f"/submissions/{passed.pk}/writeup.pdf"),
    }

    for route, response in served.items():
        assert response.status_code == 200, route
        assert b"".join(response.streaming_content) == polyglot, route
        assert response["Content-Type"] == "application/pdf", route
        assert response["Content-Disposition"].startswith("attachment;"), route
        policy = [part.strip() for part in response["Content-Security-Policy"].split(";")]
        assert "sandbox" in policy and "default-src 'none'" in policy, route
        assert response["X-Content-Type-Options"] == "nosniff", route


def test_the_page_form_refuses_a_file_that_is_not_a_pdf(alice, graded):
    passed, _ = graded
    browser = Client()
    browser.force_login(alice)

    response = browser.post(
        f"/submissions/{passed.pk}/writeup/", {"writeup": pdf(b"GIF89a", "x.pdf")}, follow=True
    )

    assert "must be a PDF" in response.content.decode()
    assert not WriteUp.objects.exists()


def test_write_up_uploads_count_against_the_uploads_allowance(client_for, alice, graded, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "uploads": "1/hour",
        },
    }
    passed, _ = graded
    client = client_for(alice)

    assert put(client, passed.pk).status_code == 200
    second = put(client, passed.pk)

    assert second.status_code == 429 and second.json()["code"] == "throttled"
    assert client.get(url(passed.pk)).status_code == 200  # reading is not counted
