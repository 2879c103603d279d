"""The validation-data boundary and the provenance review of apparent winners.

A benchmark that states a boundary asks every official upload to confirm it (nothing is
charged without); the submission in first place, and at the close the top ``review_top``
rows, enter review; the entrant answers with a provenance statement; staff clear it or
disqualify it, audited; the board marks the row meanwhile.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
import time_machine
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from portal.audit.models import AuditEvent
from portal.contests import rules
from portal.contests.models import Cohort
from portal.core.task_names import REVIEW_ARTIFACTS
from portal.submissions.leaderboard import leaderboard_refresh_entrant
from portal.submissions.models import AttemptLedger, ProvenanceReview, Run, Submission
from portal.submissions.review import NEW_FIRST_PLACE, review_sweep
from scoring import engine
from scoring.images import artifacts
from tests import factories

BOUNDARY = "No validation data in any artifact.\n\nEvaluation is the one allowed use."
OPENS = dt.datetime(2026, 8, 10, tzinfo=dt.UTC)
CLOSES = dt.datetime(2026, 8, 31, tzinfo=dt.UTC)
DURING = dt.datetime(2026, 8, 20, tzinfo=dt.UTC)
AFTER = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)


@pytest.fixture
def contest(db: Any) -> Any:
    benchmark = factories.BenchmarkFactory(
        opens_at=OPENS, closes_at=CLOSES, validation_boundary=BOUNDARY, review_top=2
    )
    factories.cohorts(benchmark)
    return benchmark


def passing(benchmark: Any, entrant: Any, wall_time_ns: int) -> Submission:
    """A passed official submission of ``entrant`` with one passing run, on the board."""
    environment = factories.EnvironmentFactory(owner=entrant, benchmark=benchmark)
    submission = Submission.objects.create(
        entrant=entrant,
        benchmark=benchmark,
        environment=environment,
        kind=Submission.OFFICIAL,
        status=Submission.PASSED,
        submitted_at=DURING,
        source_name="source.tar.gz",
        source_format="tar.gz",
        source_sha256="0" * 64,
        source_bytes=1,
        image_tag="localhost/podium/busybox:1",
    )
    Run.objects.create(
        submission=submission,
        cohort=Cohort.objects.get(benchmark=benchmark, kind=Cohort.OFFICIAL),
        status=Run.FINISHED,
        purpose=Run.SCORE,
        passed=True,
        wall_time_ns=wall_time_ns,
        matches=10,
        total=10,
    )
    leaderboard_refresh_entrant(benchmark=benchmark, entrant_id=entrant.pk)
    return submission


def sweep(at: dt.datetime, django_capture_on_commit_callbacks: Any) -> int:
    with time_machine.travel(at, tick=False), django_capture_on_commit_callbacks(execute=True):
        return review_sweep()


def board(anon: Any, benchmark: Any) -> list[tuple[str, str | None]]:
    rows = anon.get(f"/api/v1/benchmarks/{benchmark.slug}/leaderboard/").json()["rows"]
    return [(row["entrant"], row["review"]) for row in rows]


# Confirming the boundary ---------------------------------------------------------------


def test_an_official_upload_must_confirm_the_boundary_and_is_charged_nothing_without(
    contest, alice, client_for, make_archive
):
    environment = factories.EnvironmentFactory(owner=alice, benchmark=contest)
    client = client_for(alice)

    def upload(**fields: str) -> Any:
        with time_machine.travel(DURING, tick=False), make_archive().open("rb") as source:
            return client.post(
                f"/api/v1/benchmarks/{contest.slug}/submissions/",
                {"environment": environment.pk, "source": source, **fields},
                format="multipart",
            )

    refused = upload()
    assert refused.status_code == 400, refused.content
    assert refused.json()["code"] == "invalid_parameter"
    assert "validation-data boundary must be confirmed" in refused.json()["detail"]
    assert not Submission.objects.exists() and not AttemptLedger.objects.exists()

    practice = upload(kind="practice")  # rehearsal on public data: nothing to confirm
    accepted = upload(confirm_boundary="true")

    assert (practice.status_code, accepted.status_code) == (201, 201)
    official = Submission.objects.get(pk=accepted.json()["id"])
    assert official.boundary_sha256 == rules.boundary_sha256(BOUNDARY)
    assert Submission.objects.get(pk=practice.json()["id"]).boundary_sha256 == ""


def test_the_rules_and_the_upload_page_state_the_boundary(contest, alice):
    browser = Client()
    browser.force_login(alice)
    factories.EnvironmentFactory(owner=alice, benchmark=contest)

    rules_page = browser.get(f"/b/{contest.slug}/").content.decode()
    upload_page = browser.get(f"/b/{contest.slug}/submissions/").content.decode()

    assert "Validation-data boundary and review" in rules_page
    assert "Evaluation is the one allowed use." in rules_page
    assert "Evaluation is the one allowed use." in upload_page
    assert 'name="confirm_boundary"' in upload_page


# Who enters review ---------------------------------------------------------------------


def test_first_place_enters_review_once_and_a_new_first_place_too(
    contest, alice, bob, sent, anon, django_capture_on_commit_callbacks
):
    slow = passing(contest, alice, 2_000)

    assert sweep(DURING, django_capture_on_commit_callbacks) == 1
    assert sweep(DURING, django_capture_on_commit_callbacks) == 0  # once
    review = ProvenanceReview.objects.get()
    assert (review.submission, review.opened_because) == (slow, NEW_FIRST_PLACE)
    assert sent == [(REVIEW_ARTIFACTS, (slow.pk,))]
    assert board(anon, contest) == [("alice", "under_review")]

    fast = passing(contest, bob, 1_000)
    assert sweep(DURING, django_capture_on_commit_callbacks) == 1

    assert ProvenanceReview.objects.get(submission=fast).opened_because == NEW_FIRST_PLACE
    assert board(anon, contest) == [("bob", "under_review"), ("alice", "under_review")]
    assert AuditEvent.objects.filter(action="review.open").count() == 2


def test_at_the_close_the_top_rows_enter_review(
    contest, alice, bob, sent, django_capture_on_commit_callbacks
):
    carol = factories.UserFactory(username="carol")
    first, second, third = (
        passing(contest, entrant, wall)
        for entrant, wall in ((alice, 1_000), (bob, 2_000), (carol, 3_000))
    )
    sweep(DURING, django_capture_on_commit_callbacks)
    assert set(ProvenanceReview.objects.values_list("submission", flat=True)) == {first.pk}

    sweep(AFTER, django_capture_on_commit_callbacks)

    reviews = dict(ProvenanceReview.objects.values_list("submission", "opened_because"))
    assert reviews == {first.pk: NEW_FIRST_PLACE, second.pk: "rank 2 at the close"}
    assert third.pk not in reviews


def test_a_benchmark_without_a_boundary_reviews_nobody(
    alice, sent, django_capture_on_commit_callbacks
):
    plain = factories.BenchmarkFactory(opens_at=OPENS, closes_at=CLOSES)
    factories.cohorts(plain)
    passing(plain, alice, 1_000)

    assert sweep(AFTER, django_capture_on_commit_callbacks) == 0
    assert not ProvenanceReview.objects.exists() and sent == []


# The statement and the decision --------------------------------------------------------


def test_the_entrant_gives_the_statement_and_nobody_else_can(
    contest, alice, bob, client_for, sent, django_capture_on_commit_callbacks
):
    submission = passing(contest, alice, 1_000)
    sweep(DURING, django_capture_on_commit_callbacks)
    url = f"/api/v1/submissions/{submission.pk}/review/"

    empty = client_for(alice).put(url, {"statement": "  "}, format="json")
    theirs = client_for(bob).put(url, {"statement": "mine"}, format="json")
    given = client_for(alice).put(
        url, {"statement": "ImageNet-21k weights from timm, sha256 abc; no val data"}
    )

    assert (empty.status_code, empty.json()["code"]) == (400, "invalid_parameter")
    assert (theirs.status_code, theirs.json()["code"]) == (404, "not_found")
    assert given.status_code == 200, given.content
    read = client_for(alice).get(url).json()
    assert read["status"] == "under_review"
    assert read["statement"].startswith("ImageNet-21k weights")
    assert "artifacts" not in read  # staff's
    assert client_for(bob).get(url).status_code == 404


def test_staff_clear_a_review_and_the_board_says_so(
    contest, alice, staff, client_for, anon, sent, django_capture_on_commit_callbacks
):
    submission = passing(contest, alice, 1_000)
    sweep(DURING, django_capture_on_commit_callbacks)
    url = f"/api/v1/submissions/{submission.pk}/review/decide/"

    no_reason = client_for(staff).post(url, {"decision": "cleared"}, format="json")
    cleared = client_for(staff).post(
        url, {"decision": "cleared", "reason": "sources and hashes check out"}, format="json"
    )
    again = client_for(staff).post(
        url, {"decision": "disqualified", "reason": "changed my mind"}, format="json"
    )

    assert no_reason.status_code == 400
    assert cleared.status_code == 200, cleared.content
    assert cleared.json()["status"] == "cleared" and "artifacts" in cleared.json()
    assert again.status_code == 400  # decided once
    assert board(anon, contest) == [("alice", "cleared")]
    event = AuditEvent.objects.get(action="review.cleared")
    assert (event.actor, event.reason) == (staff, "sources and hashes check out")
    page = " ".join(
        re.sub(r"<[^>]+>", "", Client().get(f"/b/{contest.slug}/").content.decode()).split()
    )
    assert "alice cleared" in page


def test_disqualifying_after_review_takes_the_row_off_the_board(
    contest, alice, bob, staff, client_for, anon, sent, django_capture_on_commit_callbacks
):
    submission = passing(contest, alice, 1_000)
    passing(contest, bob, 2_000)
    sweep(DURING, django_capture_on_commit_callbacks)
    assert board(anon, contest)[0] == ("alice", "under_review")

    response = client_for(staff).post(
        f"/api/v1/submissions/{submission.pk}/review/decide/",
        {"decision": "disqualified", "reason": "a lookup table of validation hashes"},
        format="json",
    )

    assert response.status_code == 200, response.content
    submission.refresh_from_db()
    assert submission.disqualified_at is not None
    assert submission.disqualification_reason == (
        "provenance review: a lookup table of validation hashes"
    )
    assert board(anon, contest) == [("bob", None)]
    assert AuditEvent.objects.filter(action="review.disqualified").exists()


def test_an_entrant_cannot_decide_and_staff_need_the_permission(
    contest, alice, client_for, sent, django_capture_on_commit_callbacks
):
    submission = passing(contest, alice, 1_000)
    sweep(DURING, django_capture_on_commit_callbacks)
    plain_staff = factories.UserFactory(username="plainstaff", is_staff=True)
    url = f"/api/v1/submissions/{submission.pk}/review/decide/"
    body = {"decision": "cleared", "reason": "mine"}

    assert client_for(alice).post(url, body, format="json").status_code == 404
    assert client_for(plain_staff).post(url, body, format="json").status_code == 403
    assert ProvenanceReview.objects.get().status == ProvenanceReview.UNDER_REVIEW


def test_the_entrant_sees_the_review_on_the_submission_page_and_answers_there(
    contest, alice, sent, django_capture_on_commit_callbacks
):
    submission = passing(contest, alice, 1_000)
    sweep(DURING, django_capture_on_commit_callbacks)
    browser = Client()
    browser.force_login(alice)

    page = browser.get(f"/submissions/{submission.pk}/").content.decode()
    answered = browser.post(
        f"/submissions/{submission.pk}/review", {"statement": "trained on ImageNet-21k only"}
    )

    assert "Provenance review" in page and "under review" in page
    assert answered.status_code == 302
    assert ProvenanceReview.objects.get().statement == "trained on ImageNet-21k only"


def test_the_artifact_listing_is_kept_on_the_review(
    contest, alice, sent, django_capture_on_commit_callbacks, monkeypatch
):
    submission = passing(contest, alice, 1_000)
    sweep(DURING, django_capture_on_commit_callbacks)
    monkeypatch.setattr(engine, "image_exists", lambda ref: False)

    artifacts.review_listing(submission.pk)

    assert ProvenanceReview.objects.get().artifacts == {
        "error": "the submission's image is no longer kept"
    }


def test_contest_staff_decide_in_the_admin_with_a_reason_and_see_the_artifacts(
    contest, alice, sent, django_capture_on_commit_callbacks
):
    submission = passing(contest, alice, 1_000)
    sweep(DURING, django_capture_on_commit_callbacks)
    review = ProvenanceReview.objects.get()
    ProvenanceReview.objects.filter(pk=review.pk).update(
        artifacts={"files": 1, "bytes": 9, "largest": [], "tables": [{"path": "/opt/val.tsv"}]}
    )
    charlie = factories.UserFactory(username="charlie", is_staff=True)
    charlie.groups.add(Group.objects.get(name="contest staff"))
    browser = Client()
    browser.force_login(charlie)
    changelist = reverse("admin:submissions_provenancereview_changelist")
    chosen = {"action": "disqualify", ACTION_CHECKBOX_NAME: [review.pk]}

    detail = browser.get(reverse("admin:submissions_provenancereview_change", args=[review.pk]))
    asked = browser.post(changelist, chosen)
    done = browser.post(changelist, {**chosen, "apply": "yes", "reason": "a validation table"})

    assert "/opt/val.tsv" in detail.content.decode()
    assert 'name="reason"' in asked.content.decode()
    assert done.status_code == 302
    review.refresh_from_db()
    submission.refresh_from_db()
    assert (review.status, review.decided_by, review.decision_reason) == (
        ProvenanceReview.DISQUALIFIED,
        charlie,
        "a validation table",
    )
    assert submission.disqualified_at is not None
    assert AuditEvent.objects.filter(action="review.disqualified", actor=charlie).exists()
