"""Staff act by permission, not by ``is_staff``; a used cohort's benchmark and kind are frozen.

Each refusal below is a request that went through while staff tools checked ``is_staff``
alone: a staff account outside the "contest staff" group is refused (admin 403, API
403 ``permission_denied``), nothing changes and nothing is recorded as done.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.urls import reverse

from portal.audit.models import AuditEvent
from portal.contests.cohorts import cohort_change
from portal.contests.models import Cohort, CohortFrozen
from portal.submissions.models import Run, Submission
from tests import factories
from tests.security.conftest import CONTEST_STAFF

CONTEST_STAFF_PERMISSIONS = {
    "submissions.download_source",
    "submissions.download_evidence",
    "submissions.requeue_submission",
    "submissions.rescore_submission",
    "submissions.cancel_submission",
    "submissions.disqualify_submission",
    "submissions.review_anomaly",
    "submissions.view_anomaly",
    "submissions.view_verificationset",
    "submissions.decide_review",
    "submissions.view_provenancereview",
    "standings.publish_standings",
    "standings.view_standings",
    "standings.view_finalsettings",
    "standings.add_finalsettings",
    "standings.change_finalsettings",
    "standings.view_writeup",
    "estimation.decide_entry_review",
    "estimation.view_entryreview",
    "estimation.view_estimationstandingrow",
    "hosts.manage_host",
    "hosts.view_scoringhost",
    "hosts.view_hostcalibration",
    "hosts.view_calibrationflag",
    "campaigns.manage_campaign",
    "campaigns.view_campaign",
    "campaigns.view_round",
    "campaigns.view_crown",
    "contests.export_cohort_members",
    "contests.export_cohort_answers",
    "submissions.view_submission",
    "submissions.view_run",
    "submissions.view_submissionevent",
    "submissions.view_attemptledger",
    "contests.view_cohort",
    "contests.view_contest",
    "contests.change_contest",
    "contests.view_announcement",
    "contests.add_announcement",
    "contests.change_announcement",
    "teams.view_team",
    "teams.view_teammember",
    "teams.view_teaminvitation",
}


def _state(submission: Submission) -> tuple[Any, ...]:
    submission.refresh_from_db()
    return (
        submission.status,
        submission.disqualified_at,
        submission.events.count(),
        submission.ledger.count(),
        submission.runs.count(),
    )


@pytest.fixture
def target(request: pytest.FixtureRequest, submission: Submission) -> Any:
    """The submission an action applies to: accepted for cancel and requeue, passed
    (with a scored run) for rescore and disqualify."""

    def pick(action: str) -> Submission:
        if action in ("cancel", "cancel_and_refund", "requeue"):
            return submission
        return request.getfixturevalue("scored").submission

    return pick


def _login(client: Any, user: Any) -> Any:
    client.force_login(user)
    return client


# The group ----------------------------------------------------------------------------


def test_the_contest_staff_group_holds_exactly_the_staff_permissions(db):
    group = Group.objects.get(name=CONTEST_STAFF)

    held = {
        f"{app_label}.{codename}"
        for app_label, codename in group.permissions.values_list(
            "content_type__app_label", "codename"
        )
    }
    assert held == CONTEST_STAFF_PERMISSIONS


def test_a_member_holds_them_and_a_plain_staff_account_holds_none(contest_staff, plain_staff):
    assert contest_staff.has_perms(CONTEST_STAFF_PERMISSIONS)
    assert not any(plain_staff.has_perm(name) for name in CONTEST_STAFF_PERMISSIONS)
    assert not contest_staff.has_perm("contests.change_cohort")  # cohorts: superusers only


# The API ------------------------------------------------------------------------------

API_ACTIONS = ["cancel", "disqualify", "rescore"]


@pytest.mark.parametrize("action", API_ACTIONS)
def test_staff_without_the_group_cannot_act_through_the_api(
    action, target, plain_staff, client_for
):
    chosen = target(action)
    before = _state(chosen)

    response = client_for(plain_staff).post(
        f"/api/v1/submissions/{chosen.pk}/{action}/", {"reason": "because I can"}
    )

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert _state(chosen) == before
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize("action", API_ACTIONS)
def test_the_refusal_comes_before_the_reason_is_looked_at(action, target, plain_staff, client_for):
    chosen = target(action)

    response = client_for(plain_staff).post(f"/api/v1/submissions/{chosen.pk}/{action}/")

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


@pytest.mark.parametrize(
    ("action", "status"), [("cancel", 200), ("disqualify", 200), ("rescore", 202)]
)
def test_contest_staff_act_through_the_api(action, status, target, contest_staff, client_for, sent):
    chosen = target(action)

    response = client_for(contest_staff).post(
        f"/api/v1/submissions/{chosen.pk}/{action}/", {"reason": "reviewed"}
    )

    assert response.status_code == status
    event = AuditEvent.objects.get()
    assert (event.action, event.actor) == (f"submission.{action}", contest_staff)


def test_staff_without_the_group_cannot_download_a_source_through_the_api(
    submission, plain_staff, client_for
):
    response = client_for(plain_staff).get(
        f"/api/v1/submissions/{submission.pk}/source", {"reason": "curious"}
    )

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert not AuditEvent.objects.exists()


def test_contest_staff_download_a_source_through_the_api(submission, contest_staff, client_for):
    response = client_for(contest_staff).get(
        f"/api/v1/submissions/{submission.pk}/source", {"reason": "winner review"}
    )

    assert response.status_code == 200
    assert b"".join(response.streaming_content)[:2] == b"\x1f\x8b"
    assert AuditEvent.objects.get().action == "source.download"


def test_plain_staff_still_read_a_submission_for_review(submission, plain_staff, client_for):
    response = client_for(plain_staff).get(f"/api/v1/submissions/{submission.pk}/")

    assert response.status_code == 200


# The admin: downloads ------------------------------------------------------------------


@pytest.mark.parametrize("account", ["plain_staff", "reviewer"])
def test_staff_without_the_group_cannot_download_a_source_in_the_admin(
    account, request, client, submission
):
    _login(client, request.getfixturevalue(account))
    url = reverse("admin:submissions_submission_source", args=[submission.pk])

    asked = client.get(url)
    served = client.post(url, {"apply": "yes", "reason": "curious"})

    assert asked.status_code == served.status_code == 403
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize("account", ["plain_staff", "reviewer"])
def test_staff_without_the_group_cannot_download_an_evidence_bundle_in_the_admin(
    account, request, client, scored
):
    _login(client, request.getfixturevalue(account))
    url = reverse("admin:submissions_run_evidence", args=[scored.pk])

    asked = client.get(url)
    served = client.post(url, {"apply": "yes", "reason": "curious"})

    assert asked.status_code == served.status_code == 403
    assert not AuditEvent.objects.exists()


def test_a_reviewer_sees_the_records_but_no_download_links(client, reviewer, scored):
    _login(client, reviewer)

    submission_page = client.get(
        reverse("admin:submissions_submission_change", args=[scored.submission_id])
    )
    run_page = client.get(reverse("admin:submissions_run_change", args=[scored.pk]))

    assert submission_page.status_code == run_page.status_code == 200
    source_url = reverse("admin:submissions_submission_source", args=[scored.submission_id])
    assert source_url not in submission_page.content.decode()
    assert reverse("admin:submissions_run_evidence", args=[scored.pk]) not in (
        run_page.content.decode()
    )


def test_contest_staff_download_sources_and_evidence_in_the_admin(client, contest_staff, scored):
    _login(client, contest_staff)
    source_url = reverse("admin:submissions_submission_source", args=[scored.submission_id])
    evidence_url = reverse("admin:submissions_run_evidence", args=[scored.pk])

    page = client.get(reverse("admin:submissions_submission_change", args=[scored.submission_id]))
    source = client.post(source_url, {"apply": "yes", "reason": "appeal"})
    bundle = client.post(evidence_url, {"apply": "yes", "reason": "appeal"})

    assert source_url in page.content.decode()
    assert b"".join(source.streaming_content)[:2] == b"\x1f\x8b"
    assert b"".join(bundle.streaming_content)[:2] == b"\x1f\x8b"
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == [
        "source.download",
        "run.evidence.download",
    ]


# The admin: actions --------------------------------------------------------------------

ADMIN_ACTIONS = {
    "cancel_and_refund": "submission.cancel",
    "requeue": "submission.requeue",
    "rescore": "submission.rescore",
    "disqualify": "submission.disqualify",
}


def _act(client: Any, action: str, submission: Submission) -> Any:
    return client.post(
        reverse("admin:submissions_submission_changelist"),
        {
            "action": action,
            ACTION_CHECKBOX_NAME: [submission.pk],
            "apply": "yes",
            "reason": "reviewed",
        },
    )


@pytest.mark.parametrize("action", sorted(ADMIN_ACTIONS))
def test_a_reviewer_cannot_run_a_staff_action_in_the_admin(action, target, client, reviewer):
    chosen = target(action)
    before = _state(chosen)
    _login(client, reviewer)

    listing = client.get(reverse("admin:submissions_submission_changelist"))
    _act(client, action, chosen)

    assert listing.status_code == 200
    assert f'value="{action}"' not in listing.content.decode()
    assert _state(chosen) == before
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize("action", sorted(ADMIN_ACTIONS))
def test_contest_staff_run_the_staff_actions_in_the_admin(
    action, target, client, contest_staff, sent
):
    chosen = target(action)
    before = _state(chosen)
    _login(client, contest_staff)

    listing = client.get(reverse("admin:submissions_submission_changelist"))
    _act(client, action, chosen)

    assert f'value="{action}"' in listing.content.decode()
    assert _state(chosen) != before
    event = AuditEvent.objects.get()
    assert (event.action, event.actor) == (ADMIN_ACTIONS[action], contest_staff)


@pytest.mark.parametrize("action", ["export_members", "export_answers"])
def test_a_reviewer_cannot_export_a_cohort(action, client, reviewer, official):
    _login(client, reviewer)

    response = client.post(
        reverse("admin:contests_cohort_changelist"),
        {"action": action, ACTION_CHECKBOX_NAME: [official.pk], "apply": "yes", "reason": "x"},
    )

    assert "cats/a.jpg" not in response.content.decode()
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize(
    ("action", "event"),
    [("export_members", "cohort.members.export"), ("export_answers", "cohort.answers.export")],
)
def test_contest_staff_export_a_cohort(action, event, client, contest_staff, official):
    _login(client, contest_staff)

    response = client.post(
        reverse("admin:contests_cohort_changelist"),
        {"action": action, ACTION_CHECKBOX_NAME: [official.pk], "apply": "yes", "reason": "x"},
    )

    assert "cats/a.jpg" in response.content.decode()
    assert AuditEvent.objects.get().action == event


# Cohorts freeze once used --------------------------------------------------------------


def test_a_used_official_cohort_cannot_be_switched_to_practice_in_the_admin(
    client, staff, scored, alice, client_for
):
    cohort = scored.cohort
    # The benchmark publishes no practice cohort (the upload fixtures made an empty one).
    Cohort.objects.filter(benchmark=cohort.benchmark, kind=Cohort.PRACTICE).delete()
    _login(client, staff)
    url = reverse("admin:contests_cohort_change", args=[cohort.pk])

    page = client.get(url)
    client.post(url, {"benchmark": cohort.benchmark_id, "kind": Cohort.PRACTICE})

    assert 'name="kind"' not in page.content.decode()  # read-only once used
    cohort.refresh_from_db()
    assert cohort.kind == Cohort.OFFICIAL
    assert not AuditEvent.objects.filter(action="cohort.change").exists()
    practice = client_for(alice).get(f"/api/v1/benchmarks/{cohort.benchmark.slug}/practice/")
    assert practice.status_code == 404
    assert "cats/a.jpg" not in practice.content.decode()


def test_a_used_cohort_is_refused_by_the_service_the_form_and_a_plain_save(scored, staff):
    cohort = scored.cohort

    with pytest.raises(CohortFrozen):
        cohort_change(cohort=cohort, benchmark=cohort.benchmark, kind=Cohort.PRACTICE, actor=staff)
    cohort.kind = Cohort.PRACTICE
    with pytest.raises(ValidationError, match="used by a run"):
        cohort.full_clean()
    with pytest.raises(CohortFrozen):
        cohort.save()

    assert Cohort.objects.get(pk=cohort.pk).kind == Cohort.OFFICIAL
    assert not AuditEvent.objects.exists()


def test_a_used_cohort_cannot_move_to_another_benchmark(scored, staff):
    other = factories.BenchmarkFactory(
        opens_at=scored.cohort.benchmark.opens_at, closes_at=scored.cohort.benchmark.closes_at
    )

    with pytest.raises(CohortFrozen):
        cohort_change(cohort=scored.cohort, benchmark=other, kind=Cohort.OFFICIAL, actor=staff)

    assert Cohort.objects.get(pk=scored.cohort_id).benchmark_id == scored.cohort.benchmark_id


def test_changing_an_unused_cohorts_kind_in_the_admin_is_audited(client, staff, official):
    _login(client, staff)
    assert not Run.objects.filter(cohort=official).exists()

    response = client.post(
        reverse("admin:contests_cohort_change", args=[official.pk]),
        {"benchmark": official.benchmark_id, "kind": Cohort.PRACTICE},
        HTTP_USER_AGENT="Staff laptop",
    )

    assert response.status_code == 302
    official.refresh_from_db()
    assert official.kind == Cohort.PRACTICE
    event = AuditEvent.objects.get()
    assert (event.action, event.target, event.actor, event.user_agent) == (
        "cohort.change",
        f"cohort:{official.pk}",
        staff,
        "Staff laptop",
    )
    assert event.details == {"changes": {"kind": ["official", "practice"]}}


def test_saving_an_unused_cohort_unchanged_records_nothing(client, staff, official):
    _login(client, staff)

    client.post(
        reverse("admin:contests_cohort_change", args=[official.pk]),
        {"benchmark": official.benchmark_id, "kind": Cohort.OFFICIAL},
    )

    assert not AuditEvent.objects.exists()


def test_an_unused_cohort_cannot_take_a_kind_its_benchmark_already_has(official, staff):
    Cohort.objects.create(benchmark=official.benchmark, kind=Cohort.PRACTICE)

    with pytest.raises(ValidationError):
        cohort_change(
            cohort=official, benchmark=official.benchmark, kind=Cohort.PRACTICE, actor=staff
        )

    assert Cohort.objects.get(pk=official.pk).kind == Cohort.OFFICIAL
    assert not AuditEvent.objects.exists()
