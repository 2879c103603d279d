"""Teams through the REST API: forming one, each refusal with its code, and what
members share (environments, submissions and their feedback) while others get 404."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.submissions.intake import submission_accept
from portal.submissions.models import Submission
from tests import factories
from tests.submissions.test_concurrent_charging import source_archive


@pytest.fixture
def clients(client_for: Any, alice: Any, bob: Any) -> dict[str, Any]:
    carol = factories.UserFactory(username="carol")
    return {user.username: client_for(user) for user in (alice, bob, carol)}


def team_url(benchmark: Any, rest: str = "") -> str:
    return f"/api/v1/benchmarks/{benchmark.slug}/team/{rest}"


def pair(clients: dict[str, Any], benchmark: Any) -> dict[str, Any]:
    """alice's team "Pair" with bob in it, through the API."""
    assert clients["alice"].post(team_url(benchmark), {"name": "Pair"}).status_code == 201
    invited = clients["alice"].post(team_url(benchmark, "invitations/"), {"username": "bob"})
    assert invited.status_code == 201
    accepted = clients["bob"].post(f"/api/v1/invitations/{invited.json()['id']}/accept/")
    assert accepted.status_code == 200
    return dict(accepted.json())


def test_create_invite_accept_and_read_the_team(clients, benchmark):
    assert clients["alice"].get(team_url(benchmark)).json()["code"] == "not_found"  # alone

    team = pair(clients, benchmark)

    assert team["name"] == "Pair"
    assert team["captain"] == "alice"
    assert [m["username"] for m in team["members"]] == ["alice", "bob"]
    assert team["size_max"] == 5
    assert clients["bob"].get(team_url(benchmark)).json() == team
    assert clients["bob"].get("/api/v1/invitations/").json() == []
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"team.create", "team.invite", "team.join"} <= actions


def test_an_invitation_is_listed_for_its_invitee_and_can_be_declined(clients, benchmark):
    clients["alice"].post(team_url(benchmark), {"name": "Pair"})
    invitation = clients["alice"].post(team_url(benchmark, "invitations/"), {"username": "bob"})

    listed = clients["bob"].get("/api/v1/invitations/").json()
    assert [(i["team"], i["invited_by"], i["state"]) for i in listed] == [
        ("Pair", "alice", "pending")
    ]
    assert (
        clients["carol"]
        .post(f"/api/v1/invitations/{invitation.json()['id']}/decline/")
        .json()["code"]
        == "not_found"
    )
    declined = clients["bob"].post(f"/api/v1/invitations/{invitation.json()['id']}/decline/")

    assert declined.json()["state"] == "declined"
    assert clients["bob"].get(team_url(benchmark)).status_code == 404


@pytest.mark.parametrize(
    ("name", "detail"),
    [("", "name"), ("x" * 101, "name")],
)
def test_a_bad_name_is_invalid_parameter(clients, benchmark, name, detail):
    response = clients["alice"].post(team_url(benchmark), {"name": name})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"


def test_each_refusal_answers_its_code(clients, benchmark):
    pair(clients, benchmark)
    alice, bob, carol = clients["alice"], clients["bob"], clients["carol"]

    second = alice.post(team_url(benchmark), {"name": "Other"})
    assert (second.status_code, second.json()["code"]) == (400, "invalid_parameter")
    nobody = alice.post(team_url(benchmark, "invitations/"), {"username": "nobody"})
    assert (nobody.status_code, nobody.json()["code"]) == (404, "not_found")
    member = alice.post(team_url(benchmark, "invitations/"), {"username": "bob"})
    assert (member.status_code, member.json()["code"]) == (400, "invalid_parameter")
    not_captain = bob.delete(team_url(benchmark, "members/alice/"))
    assert (not_captain.status_code, not_captain.json()["code"]) == (403, "permission_denied")
    outsider = carol.post(team_url(benchmark, "leave/"))
    assert (outsider.status_code, outsider.json()["code"]) == (404, "not_found")
    stranger = alice.delete(team_url(benchmark, "members/carol/"))
    assert (stranger.status_code, stranger.json()["code"]) == (404, "not_found")
    unknown = carol.post("/api/v1/invitations/999999/accept/")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "not_found")

    benchmark.team_freeze_at = timezone.now() - dt.timedelta(minutes=1)
    benchmark.save()
    frozen = bob.post(team_url(benchmark, "leave/"))
    assert (frozen.status_code, frozen.json()["code"]) == (409, "window_closed")
    removed = alice.delete(team_url(benchmark, "members/bob/"))
    assert (removed.status_code, removed.json()["code"]) == (409, "window_closed")
    assert [m["username"] for m in alice.get(team_url(benchmark)).json()["members"]] == [
        "alice",
        "bob",
    ]


def test_the_captain_removes_a_member_and_a_member_leaves(clients, benchmark):
    pair(clients, benchmark)

    removed = clients["alice"].delete(team_url(benchmark, "members/bob/"))
    assert [m["username"] for m in removed.json()["members"]] == ["alice"]
    assert clients["alice"].post(team_url(benchmark, "leave/")).status_code == 204
    assert clients["alice"].get(team_url(benchmark)).status_code == 404


def test_the_quota_is_the_teams(clients, benchmark, alice, tmp_path):
    pair(clients, benchmark)
    factories.cohorts(benchmark)
    archive = tmp_path / "kit.tar.gz"
    archive.write_bytes(source_archive())
    submission_accept(
        entrant=alice,
        benchmark=benchmark,
        environment=factories.EnvironmentFactory(owner=alice, benchmark=benchmark),
        source_file=archive,
        source_name="kit.tar.gz",
    )

    quota = clients["bob"].get(f"/api/v1/benchmarks/{benchmark.slug}/quota/").json()
    assert quota["official"]["used_today"] == 1


def test_members_share_environments_and_submissions_and_others_get_404(
    clients, benchmark, alice, tmp_path
):
    pair(clients, benchmark)
    factories.cohorts(benchmark)
    environment = factories.EnvironmentFactory(owner=alice, benchmark=benchmark)
    source = source_archive()

    uploaded = clients["bob"].post(
        f"/api/v1/benchmarks/{benchmark.slug}/submissions/",
        {
            "environment": environment.pk,
            "kind": "official",
            "source": SimpleUploadedFile("kit.tar.gz", source),
        },
        format="multipart",
    )
    assert uploaded.status_code == 201, uploaded.json()
    submission_id = uploaded.json()["id"]
    assert uploaded.json()["entrant"] == "bob"

    environments = clients["bob"].get(f"/api/v1/benchmarks/{benchmark.slug}/environments/")
    assert [(e["id"], e["owner"]) for e in environments.json()] == [(environment.pk, "alice")]
    listed = clients["alice"].get(f"/api/v1/benchmarks/{benchmark.slug}/submissions/").json()
    assert [s["id"] for s in listed["results"]] == [submission_id]
    assert clients["alice"].get(f"/api/v1/submissions/{submission_id}/").status_code == 200
    assert clients["alice"].get(f"/api/v1/submissions/{submission_id}/build-log").status_code == 200
    # The source stays its uploader's.
    assert clients["alice"].get(f"/api/v1/submissions/{submission_id}/source").status_code == 404
    for url in (
        f"/api/v1/submissions/{submission_id}/",
        f"/api/v1/submissions/{submission_id}/run-log",
        f"/api/v1/environments/{environment.pk}/",
    ):
        response = clients["carol"].get(url)
        assert (response.status_code, response.json()["code"]) == (404, "not_found"), url
    refused = clients["carol"].post(
        f"/api/v1/benchmarks/{benchmark.slug}/submissions/",
        {
            "environment": environment.pk,
            "kind": "official",
            "source": SimpleUploadedFile("kit.tar.gz", source),
        },
        format="multipart",
    )
    assert (refused.status_code, refused.json()["code"]) == (404, "not_found")
    assert Submission.objects.count() == 1


def test_after_leaving_a_former_teammates_submission_is_404(clients, benchmark, alice, tmp_path):
    pair(clients, benchmark)
    factories.cohorts(benchmark)
    archive = tmp_path / "kit.tar.gz"
    archive.write_bytes(source_archive())
    submission = submission_accept(
        entrant=alice,
        benchmark=benchmark,
        environment=factories.EnvironmentFactory(owner=alice, benchmark=benchmark),
        source_file=archive,
        source_name="kit.tar.gz",
    )
    assert clients["bob"].get(f"/api/v1/submissions/{submission.pk}/").status_code == 200

    clients["bob"].post(team_url(benchmark, "leave/"))

    assert clients["bob"].get(f"/api/v1/submissions/{submission.pk}/").status_code == 404
