"""Staff only: cancel, disqualify, rescore, audited source download, audit export."""

from __future__ import annotations

import csv
import io
import json

import pytest

from portal.audit.models import AuditEvent
from portal.contests.models import Cohort, LeaderboardEntry
from portal.core import jobs
from portal.submissions.leaderboard import leaderboard_refresh_entrant
from portal.submissions.models import AttemptLedger, Run, Submission


@pytest.fixture
def submission(benchmark, alice, ready_environment, accepted) -> Submission:
    return accepted(alice, ready_environment(alice, benchmark))


def _pass(submission: Submission, wall_time_ns: int) -> Run:
    cohort, _ = Cohort.objects.get_or_create(benchmark=submission.benchmark, kind=Cohort.OFFICIAL)
    Submission.objects.filter(pk=submission.pk).update(status=Submission.PASSED)
    run = Run.objects.create(
        submission=submission,
        cohort=cohort,
        status=Run.FINISHED,
        passed=True,
        verdict=Submission.PASSED,
        wall_time_ns=wall_time_ns,
        matches=9990,
        total=10000,
    )
    leaderboard_refresh_entrant(benchmark=submission.benchmark, entrant_id=submission.entrant_id)
    return run


ACTIONS = ["cancel", "disqualify", "rescore"]


@pytest.mark.parametrize("action", ACTIONS)
def test_entrants_do_not_see_staff_actions(action, submission, alice, client_for):
    response = client_for(alice).post(
        f"/api/v1/submissions/{submission.pk}/{action}/", {"reason": "mine"}
    )

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    submission.refresh_from_db()
    assert submission.status == Submission.ACCEPTED
    assert submission.disqualified_at is None


@pytest.mark.parametrize("action", ACTIONS)
def test_staff_actions_need_a_token(action, submission, anon):
    response = anon.post(f"/api/v1/submissions/{submission.pk}/{action}/", {"reason": "x"})

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_staff_cancel_refunds_the_attempt(submission, staff, alice, client_for, benchmark):
    response = client_for(staff).post(
        f"/api/v1/submissions/{submission.pk}/cancel/", {"reason": "host on fire"}
    )

    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert response.json()["attempt"] == {"charged": True, "refunded": True}
    refund = AttemptLedger.objects.get(submission=submission, delta=-1)
    assert "host on fire" in refund.reason
    quota = client_for(alice).get(f"/api/v1/benchmarks/{benchmark.slug}/quota/").json()
    assert quota["used_today"] == 0
    event = AuditEvent.objects.get(action="submission.cancel")
    assert (event.actor, event.target, event.reason) == (
        staff,
        f"submission:{submission.pk}",
        "host on fire",
    )


def test_a_finished_submission_cannot_be_cancelled(submission, staff, client_for):
    _pass(submission, 1_000)

    response = client_for(staff).post(f"/api/v1/submissions/{submission.pk}/cancel/")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"
    assert not AttemptLedger.objects.filter(delta=-1).exists()


def test_cancelling_twice_refunds_once(submission, staff, client_for):
    client = client_for(staff)
    client.post(f"/api/v1/submissions/{submission.pk}/cancel/")

    again = client.post(f"/api/v1/submissions/{submission.pk}/cancel/")

    assert again.status_code == 400
    assert AttemptLedger.objects.filter(submission=submission, delta=-1).count() == 1


def test_disqualifying_hands_the_place_to_the_next_best_run(
    benchmark, alice, staff, client_for, ready_environment, accepted, anon
):
    environment = ready_environment(alice, benchmark)
    best, second = accepted(alice, environment), accepted(alice, environment)
    _pass(best, 1_000_000)
    _pass(second, 2_000_000)
    assert LeaderboardEntry.objects.get(entrant=alice).submission == best

    response = client_for(staff).post(
        f"/api/v1/submissions/{best.pk}/disqualify/", {"reason": "hard-coded answers"}
    )

    assert response.status_code == 200
    assert response.json()["disqualified"] is True
    rows = anon.get(f"/api/v1/benchmarks/{benchmark.slug}/leaderboard/").json()["rows"]
    assert [(row["submission_id"], row["wall_time_ns"]) for row in rows] == [(second.pk, 2_000_000)]
    best.refresh_from_db()
    assert best.disqualified_by == staff
    assert best.disqualification_reason == "hard-coded answers"
    assert AuditEvent.objects.filter(
        action="submission.disqualify", target=f"submission:{best.pk}"
    ).exists()


def test_disqualifying_the_only_run_removes_the_row(submission, staff, client_for, anon, benchmark):
    _pass(submission, 1_000)

    client_for(staff).post(f"/api/v1/submissions/{submission.pk}/disqualify/", {"reason": "r"})

    assert anon.get(f"/api/v1/benchmarks/{benchmark.slug}/leaderboard/").json()["rows"] == []


def test_disqualifying_needs_a_reason(submission, staff, client_for):
    response = client_for(staff).post(f"/api/v1/submissions/{submission.pk}/disqualify/")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"
    submission.refresh_from_db()
    assert submission.disqualified_at is None


def test_staff_rescore_queues_a_new_scored_run(
    submission, staff, client_for, sent, django_capture_on_commit_callbacks
):
    _pass(submission, 1_000)

    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(staff).post(f"/api/v1/submissions/{submission.pk}/rescore/")

    assert response.status_code == 202
    assert response.json()["status"] == "queued"
    assert sent == [(jobs.SCORE_NEXT, (submission.benchmark.hardware_class_id, 0))]
    assert AuditEvent.objects.filter(action="submission.rescore").count() == 1
    assert AttemptLedger.objects.filter(submission=submission).count() == 1


def test_an_unfinished_submission_is_not_rescored(submission, staff, client_for, sent):
    response = client_for(staff).post(f"/api/v1/submissions/{submission.pk}/rescore/")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"
    assert sent == []


def test_staff_source_download_is_audited(submission, staff, client_for):
    response = client_for(staff).get(
        f"/api/v1/submissions/{submission.pk}/source",
        {"reason": "winner review"},
        REMOTE_ADDR="203.0.113.7",
    )

    assert response.status_code == 200
    assert b"".join(response.streaming_content)[:2] == b"\x1f\x8b"
    event = AuditEvent.objects.get()
    assert event.action == "source.download"
    assert event.actor == staff
    assert event.target == f"submission:{submission.pk}"
    assert event.reason == "winner review"
    assert event.remote_addr == "203.0.113.7"


def test_staff_source_download_needs_a_reason(submission, staff, client_for):
    response = client_for(staff).get(f"/api/v1/submissions/{submission.pk}/source")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"
    assert not AuditEvent.objects.exists()


def test_the_audit_exports_as_csv_and_jsonl(submission, staff, client_for):
    client = client_for(staff)
    client.get(f"/api/v1/submissions/{submission.pk}/source", {"reason": 'review, "quoted"'})

    as_csv = client.get("/api/v1/audit/", {"format": "csv", "action": "source.download"})
    as_jsonl = client.get("/api/v1/audit/", {"format": "jsonl", "action": "source.download"})

    assert as_csv.status_code == as_jsonl.status_code == 200
    assert as_csv["Content-Type"].startswith("text/csv")
    assert as_jsonl["Content-Type"] == "application/x-ndjson"
    rows = list(csv.DictReader(io.StringIO(b"".join(as_csv.streaming_content).decode())))
    assert [(row["actor"], row["action"], row["reason"]) for row in rows] == [
        ("staff", "source.download", 'review, "quoted"')
    ]
    lines = b"".join(as_jsonl.streaming_content).decode().splitlines()
    record = json.loads(lines[0])
    assert len(lines) == 1
    assert record["target"] == f"submission:{submission.pk}"
    assert set(record) == {
        "id",
        "at",
        "actor",
        "action",
        "target",
        "remote_addr",
        "user_agent",
        "reason",
        "details",
    }


def test_the_audit_export_refuses_other_formats(staff, client_for):
    response = client_for(staff).get("/api/v1/audit/", {"format": "xml"})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"


def test_the_audit_is_staff_only(alice, client_for, anon):
    entrant = client_for(alice).get("/api/v1/audit/", {"format": "csv"})
    anonymous = anon.get("/api/v1/audit/", {"format": "jsonl"})

    assert entrant.status_code == 404
    assert entrant.json()["code"] == "not_found"
    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "not_authenticated"
