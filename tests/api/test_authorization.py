"""Who may call what: every route of ``portal.api.urls``, every method, every kind of caller.

The matrix below is checked against the URL patterns themselves, so an endpoint (or a
method) added without a row here fails ``test_every_route_has_a_row_in_the_matrix``.

Kinds of endpoint:

- ``PUBLIC``: anyone, no token needed.
- ``CALLER``: needs a token; answers about the caller only (their quota, their lists).
- ``OWNED``: one entrant's object by id; anyone else's is 404 ``not_found``, staff included.
- ``OWNED_STAFF_READS``: as ``OWNED``, but staff may read it for review (200).
- ``OWNED_STAFF_AUDITED``: the source archive, a private write-up; staff read it with
  ``?reason=``, audited.
- ``STAFF``: staff only; to an entrant it does not exist (404 ``not_found``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import URLPattern, reverse
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.api import urls as api_urls
from portal.api.common import PagePagination
from portal.audit.models import AuditEvent
from portal.campaigns.models import Campaign, Round, RoundEntry
from portal.contests.models import Announcement, Cohort, CohortItem
from portal.core import storage
from portal.environments.models import Environment
from portal.estimation.models import Entry, Suite
from portal.standings.models import FinalRerun, Standings, WriteUp
from portal.standings.rules import digest_of
from portal.submissions.models import ProvenanceReview, Submission
from portal.teams.services import team_create, team_invite
from tests import factories

PUBLIC = "public"
CALLER = "caller"
OWNED = "owned"
OWNED_STAFF_READS = "owned, staff reads"
OWNED_STAFF_AUDITED = "owned, staff reads with a reason (audited)"
STAFF = "staff"

MATRIX: dict[str, dict[str, str]] = {
    "tokens": {"POST": PUBLIC, "GET": CALLER},
    "token-detail": {"DELETE": OWNED},
    "benchmarks": {"GET": PUBLIC},
    "benchmark-detail": {"GET": PUBLIC},
    "leaderboard": {"GET": PUBLIC},
    "benchmark-attempts": {"GET": PUBLIC},
    "quota": {"GET": CALLER},
    "practice": {"GET": CALLER},
    "practice-download": {"GET": CALLER},
    "dockerfile-check": {"POST": CALLER},
    "sandbox": {"GET": CALLER},
    "sandbox-supervisor": {"GET": CALLER},
    "benchmark-environments": {"GET": CALLER, "POST": CALLER},
    "benchmark-submissions": {"GET": CALLER, "POST": CALLER},
    "environment-detail": {"GET": OWNED_STAFF_READS, "DELETE": OWNED},
    "environment-rebuild": {"POST": OWNED},
    "environment-build-log": {"GET": OWNED_STAFF_READS},
    "submission-detail": {"GET": OWNED_STAFF_READS},
    "submission-build-log": {"GET": OWNED_STAFF_READS},
    "submission-run-log": {"GET": OWNED_STAFF_READS},
    "submission-source": {"GET": OWNED_STAFF_AUDITED},
    "submission-writeup": {"GET": OWNED_STAFF_READS, "PUT": OWNED, "PATCH": OWNED, "DELETE": OWNED},
    "submission-writeup-download": {"GET": OWNED_STAFF_AUDITED},
    "submission-cancel": {"POST": STAFF},
    "submission-disqualify": {"POST": STAFF},
    "submission-review": {"GET": OWNED_STAFF_READS, "PUT": OWNED},
    "submission-review-decide": {"POST": STAFF},
    "submission-rescore": {"POST": STAFF},
    "audit": {"GET": STAFF},
    "hosts": {"GET": CALLER},
    "contests": {"GET": PUBLIC},
    "contest-detail": {"GET": PUBLIC},
    "contest-announcements": {"GET": PUBLIC, "POST": STAFF},
    "campaigns": {"GET": PUBLIC},
    "campaign-detail": {"GET": PUBLIC},
    "campaign-rounds": {"GET": PUBLIC},
    "campaign-submission": {"GET": OWNED_STAFF_READS},
    "campaign-submission-build-log": {"GET": OWNED_STAFF_READS},
    "round-entry-report": {"GET": PUBLIC},
    "nominations": {"GET": CALLER, "PUT": CALLER},
    "standings": {"GET": PUBLIC},
    "standings-csv": {"GET": PUBLIC},
    "standings-json": {"GET": PUBLIC},
    "standings-publish": {"POST": STAFF},
    "standings-correct": {"POST": STAFF},
    "final-rerun": {"GET": STAFF, "POST": STAFF},
    "team": {"GET": CALLER, "POST": CALLER},
    "team-invitations": {"POST": CALLER},
    "team-leave": {"POST": CALLER},
    "team-member": {"DELETE": CALLER},
    "invitations": {"GET": CALLER},
    "invitation-accept": {"POST": OWNED},
    "invitation-decline": {"POST": OWNED},
    "estimation": {"GET": CALLER},
    "estimation-entries": {"GET": CALLER, "POST": CALLER},
    "estimation-board": {"GET": PUBLIC},
    "estimation-final": {"GET": PUBLIC},
    "estimation-suite": {"GET": CALLER},
    "estimation-entry": {"GET": OWNED_STAFF_READS},
    "estimation-entry-nomination": {"POST": OWNED},
    "schema": {"GET": PUBLIC},
    "docs": {"GET": PUBLIC},
}

ROWS = [
    (name, method, kind) for name, methods in MATRIX.items() for method, kind in methods.items()
]


def _rows(*kinds: str) -> list[Any]:
    return [
        pytest.param(name, method, id=f"{method} {name}")
        for name, method, kind in ROWS
        if kind in kinds
    ]


def _methods(pattern: URLPattern) -> set[str]:
    """The HTTP methods a route's view answers (besides HEAD and OPTIONS)."""
    view = pattern.callback
    view_class = getattr(view, "view_class", None) or getattr(view, "cls", None)
    if view_class is None:  # a plain Django function view
        return {"GET"}
    return {
        method.upper()
        for method in view_class.http_method_names
        if method not in ("head", "options") and hasattr(view_class, method)
    }


def test_every_route_has_a_row_in_the_matrix() -> None:
    routes = {
        str(pattern.name): _methods(pattern)
        for pattern in api_urls.urlpatterns
        if isinstance(pattern, URLPattern)
    }
    assert len(routes) == len(api_urls.urlpatterns), "every API route needs its own name"

    unclassified = {f"{name} {sorted(routes[name])}" for name in set(routes) - set(MATRIX)}
    assert not unclassified, (
        f"API routes with no row in the authorization matrix: {sorted(unclassified)}; "
        "classify each method as PUBLIC, CALLER, OWNED, OWNED_STAFF_READS, "
        "OWNED_STAFF_AUDITED or STAFF in tests/api/test_authorization.py"
    )
    assert not set(MATRIX) - set(routes), (
        f"matrix rows for gone routes: {set(MATRIX) - set(routes)}"
    )
    for name, methods in routes.items():
        assert methods == set(MATRIX[name]), (
            f"{name}: the view answers {sorted(methods)}, the matrix classifies "
            f"{sorted(MATRIX[name])}"
        )


# The world: alice's objects, bob the rival, staff ---------------------------------------


@dataclass
class World:
    slug: str
    environment: Environment
    submission: Submission
    token: ApiToken
    alice: APIClient
    bob: APIClient
    staff: APIClient
    anon: APIClient
    archive: Callable[[], Any]
    round_id: int = 0
    entry_id: int = 0
    invitation_id: int = 0
    # The estimation routes' objects: a phase of its own, alice's (ungraded) entry on it
    # and the estimator archive an upload sends.
    estimation_slug: str = ""
    estimation_entry_id: int = 0
    estimator: Callable[[], Any] | None = None

    def url(self, name: str) -> str:
        pattern = next(p for p in api_urls.urlpatterns if p.name == name)
        if name.startswith("estimation"):
            estimation = {"slug": self.estimation_slug, "entry_id": self.estimation_entry_id}
            kwargs = {key: estimation[key] for key in pattern.pattern.converters}
            return reverse(f"api:{name}", kwargs=kwargs)
        values = {
            "slug": self.slug,
            "environment_id": self.environment.pk,
            "submission_id": self.submission.pk,
            "token_id": self.token.pk,
            "round_id": self.round_id,
            "entry_id": self.entry_id,
            "invitation_id": self.invitation_id,
            "username": "carol",
        }
        kwargs = {key: values[key] for key in pattern.pattern.converters}
        return reverse(f"api:{name}", kwargs=kwargs)

    def call(self, client: APIClient, method: str, name: str, **data: Any) -> Any:
        """One request with what the endpoint needs to get past validation."""
        url = self.url(name)
        if name == "tokens" and method == "POST":
            data = {"username": "alice", "password": "correct horse battery", **data}
        if name == "benchmark-environments" and method == "POST":
            dockerfile = _upload("Dockerfile", b"FROM localhost/podium/busybox:1\n")
            data = {"name": "probe", "dockerfile": dockerfile, **data}
            return client.post(url, data, format="multipart")
        if name == "dockerfile-check":
            dockerfile = _upload("Dockerfile", b"FROM localhost/podium/busybox:1\n")
            return client.post(url, {"dockerfile": dockerfile, **data}, format="multipart")
        if name == "benchmark-submissions" and method == "POST":
            with self.archive().open("rb") as source:
                data = {"environment": self.environment.pk, "source": source, **data}
                return client.post(url, data, format="multipart")
        if name == "estimation-entries" and method == "POST":
            assert self.estimator is not None
            with self.estimator().open("rb") as archive:
                return client.post(url, {"archive": archive, **data}, format="multipart")
        if name == "estimation-entry-nomination":
            return client.post(url, {"nominated": True, **data}, format="json")
        if name == "submission-disqualify":
            data = {"reason": "matrix", **data}
        if name == "contest-announcements" and method == "POST":
            data = {"title": "matrix", "body": "An announcement.", **data}
        if name == "team" and method == "POST":
            data = {"name": "probe", **data}
        if name == "team-invitations":
            data = {"username": "carol", **data}
        if name == "nominations" and method == "PUT":
            return client.put(url, {"submission_ids": [], **data}, format="json")
        if method == "GET":
            return client.get(url, data)
        return getattr(client, method.lower())(url, data)


def _upload(name: str, content: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content)


@pytest.fixture
def world(
    benchmark: Any,
    alice: Any,
    bob: Any,
    staff: Any,
    client_for: Callable[[Any], APIClient],
    anon: APIClient,
    ready_environment: Callable[..., Environment],
    accepted: Callable[..., Submission],
    make_archive: Callable[..., Any],
    whest_tarball: Any,
) -> World:
    # The benchmark is a phase of a contest of the same slug (the contest routes' slug).
    benchmark.contest = factories.ContestFactory(slug=benchmark.slug)
    benchmark.save(update_fields=["contest"])
    environment = ready_environment(alice, benchmark)
    (practice,) = factories.cohorts(benchmark, Cohort.PRACTICE)
    CohortItem.objects.create(
        cohort=practice, position=0, canonical_name="0001.jpg", sha256="0" * 64, reference_class=7
    )
    storage.ensure_dir(storage.cohort_dir(practice.pk)).joinpath("0001.jpg").write_bytes(b"jpg")
    submission = accepted(alice, environment)
    # The benchmark runs a campaign too: one round with alice's entry, and her build log.
    campaign = Campaign.objects.create(
        benchmark=benchmark, hardware_class_id=benchmark.hardware_class_id
    )
    round_ = Round.objects.create(
        campaign=campaign,
        ordinal=1,
        cohort=Cohort.objects.get(benchmark=benchmark, kind=Cohort.OFFICIAL),
        material="0" * 64,
        request_digest="d" * 64,
        slice_count=1,
        created_at=timezone.now(),
    )
    entry = RoundEntry.objects.create(
        round=round_,
        submission=submission,
        role=RoundEntry.CHALLENGER,
        position=0,
        image_digest="sha256:" + "e" * 64,
    )
    storage.submission_build_log(submission.pk).write_text("built\n")
    # Her (private) write-up of it.
    WriteUp.objects.create(
        benchmark=benchmark,
        entrant=alice,
        submission=submission,
        file_name="w.pdf",
        size_bytes=5,
        sha256="0" * 64,
        uploaded_at=timezone.now(),
    )
    path = storage.writeup_path(benchmark.pk, alice.pk)
    storage.ensure_dir(path.parent).joinpath(path.name).write_bytes(b"%PDF-")
    # An apparent winner under provenance review (its statement and staff's decision).
    ProvenanceReview.objects.create(
        submission=submission, opened_at=timezone.now(), opened_because="matrix"
    )
    # Its final standings are out and its final rerun started (rows only), so the public
    # exports and the staff progress answer; publishing again and starting again are
    # refused on the merits (400), as an open benchmark's are.
    Standings.objects.create(
        benchmark=benchmark,
        source=Standings.BOARD,
        published_at=timezone.now(),
        reason="matrix",
        digest=digest_of([]),
    )
    FinalRerun.objects.create(
        benchmark=benchmark,
        cohort=Cohort.objects.get(benchmark=benchmark, kind=Cohort.OFFICIAL),
        final_runs=3,
        extra_runs=2,
        started_at=timezone.now(),
    )
    # carol's team on the benchmark has invited alice.
    carol = factories.UserFactory(username="carol")
    team_create(user=carol, benchmark=benchmark, name="Carol's")
    invitation = team_invite(user=carol, benchmark=benchmark, username="alice")
    # An estimation phase with ready phase and public suites, and alice's entry on it.
    phase = factories.PhaseRulesFactory().benchmark
    factories.SuiteFactory(benchmark=phase, role=Suite.PHASE)
    public = factories.SuiteFactory(benchmark=phase, role=Suite.PUBLIC)
    storage.ensure_dir(storage.suite_dir(public.pk)).joinpath("metadata.json").write_text("{}")
    estimation_entry = factories.EntryFactory(benchmark=phase, entrant=alice)
    return World(
        slug=benchmark.slug,
        environment=environment,
        submission=submission,
        token=ApiToken.objects.create(user=alice, label="alice's other token"),
        alice=client_for(alice),
        bob=client_for(bob),
        staff=client_for(staff),
        anon=anon,
        archive=make_archive,
        round_id=round_.pk,
        entry_id=entry.pk,
        invitation_id=invitation.pk,
        estimation_slug=phase.slug,
        estimation_entry_id=estimation_entry.pk,
        estimator=lambda: whest_tarball,
    )


def _snapshot(world: World) -> tuple[Any, ...]:
    environment = Environment.objects.get(pk=world.environment.pk)
    submission = Submission.objects.get(pk=world.submission.pk)
    return (
        environment.status,
        submission.status,
        submission.disqualified_at,
        ApiToken.objects.filter(pk=world.token.pk).exists(),
        AuditEvent.objects.count(),
        Announcement.objects.count(),
    )


# Anonymous callers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "method"), _rows(CALLER, OWNED, OWNED_STAFF_READS, OWNED_STAFF_AUDITED, STAFF)
)
def test_anonymous_callers_are_not_authenticated(world: World, name: str, method: str) -> None:
    before = _snapshot(world)

    response = world.call(world.anon, method, name)

    assert response.status_code == 401, response.content
    assert response.json()["code"] == "not_authenticated"
    assert _snapshot(world) == before


@pytest.mark.parametrize(("name", "method"), _rows(PUBLIC))
def test_public_endpoints_answer_anyone(world: World, name: str, method: str) -> None:
    response = world.call(world.anon, method, name)

    assert response.status_code in (200, 201), response.content


# Another entrant -----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "method"), _rows(OWNED, OWNED_STAFF_READS, OWNED_STAFF_AUDITED))
def test_another_entrants_objects_are_not_found(world: World, name: str, method: str) -> None:
    before = _snapshot(world)

    response = world.call(world.bob, method, name)

    assert response.status_code == 404, response.content
    assert response.json()["code"] == "not_found"
    assert _snapshot(world) == before


@pytest.mark.parametrize(("name", "method"), _rows(OWNED, OWNED_STAFF_READS, OWNED_STAFF_AUDITED))
def test_the_owner_gets_through(world: World, name: str, method: str) -> None:
    response = world.call(world.alice, method, name)

    # Refusals on the merits (a rebuild of a ready environment: 400; removing one a
    # submission still uses: 409) are fine: who asks is not the problem.
    assert response.status_code in (200, 202, 204, 400, 409), response.content


@pytest.mark.parametrize(("name", "method"), _rows(CALLER))
def test_caller_scoped_endpoints_show_bob_only_his_own(
    world: World, name: str, method: str
) -> None:
    response = world.call(world.bob, method, name)

    if name == "benchmark-submissions" and method == "POST":  # with alice's environment id
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"
        assert not Submission.objects.filter(entrant__username="bob").exists()
        return
    if name in TEAM_ACTIONS and (name, method) != ("team", "POST"):
        # bob is in no team on the benchmark: there is none of his to read or change.
        assert response.status_code == 404, response.content
        assert response.json()["code"] == "not_found"
        return
    assert response.status_code in (200, 201), response.content
    if (name, method) == ("team", "POST"):  # bob made his own team
        assert response.json()["members"][0]["username"] == "bob"
        return
    if (name, method) == ("estimation-entries", "POST"):  # bob entered his own estimator
        assert Entry.objects.get(pk=response.json()["id"]).entrant.username == "bob"
    elif response.status_code == 201:  # bob made his own environment
        assert Environment.objects.get(pk=response.json()["id"]).owner.username == "bob"
    if name in ("benchmark-environments", "benchmark-submissions", "tokens") and method == "GET":
        body = response.json()
        rows = body["results"] if isinstance(body, dict) else body
        assert rows == [] or all(row["id"] not in _alices_ids(world, name) for row in rows)
    if name == "quota":
        assert response.json()["used_today"] == 0  # alice's upload is not bob's


TEAM_ACTIONS = ("team", "team-invitations", "team-leave", "team-member")


def _alices_ids(world: World, name: str) -> set[int]:
    if name == "benchmark-environments":
        return {world.environment.pk}
    if name == "benchmark-submissions":
        return {world.submission.pk}
    return set(ApiToken.objects.filter(user__username="alice").values_list("pk", flat=True))


@pytest.mark.parametrize(("name", "method"), _rows(STAFF))
def test_staff_endpoints_do_not_exist_for_entrants(world: World, name: str, method: str) -> None:
    before = _snapshot(world)

    response = world.call(world.alice, method, name)

    assert response.status_code == 404, response.content
    assert response.json()["code"] == "not_found"
    assert _snapshot(world) == before


# Staff ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "method"), _rows(OWNED_STAFF_READS))
def test_staff_read_any_entrants_details_and_logs(world: World, name: str, method: str) -> None:
    response = world.call(world.staff, method, name)

    assert response.status_code == 200, response.content


@pytest.mark.parametrize(("name", "method"), _rows(OWNED))
def test_staff_do_not_change_entrants_objects_through_entrant_endpoints(
    world: World, name: str, method: str
) -> None:
    before = _snapshot(world)

    response = world.call(world.staff, method, name)

    assert response.status_code == 404, response.content
    assert response.json()["code"] == "not_found"
    assert _snapshot(world) == before


def test_staff_read_a_source_only_with_a_reason_and_on_the_record(world: World) -> None:
    forming = AuditEvent.objects.count()  # carol's team and her invitation
    without = world.call(world.staff, "GET", "submission-source")
    assert without.status_code == 400
    assert AuditEvent.objects.count() == forming

    response = world.call(world.staff, "GET", "submission-source", reason="plagiarism review")

    assert response.status_code == 200
    assert b"".join(response.streaming_content)
    event = AuditEvent.objects.get(action="source.download")
    assert event.reason == "plagiarism review"


@pytest.mark.parametrize(("name", "method"), _rows(STAFF))
def test_staff_endpoints_answer_staff(world: World, name: str, method: str) -> None:
    response = world.call(world.staff, method, name)

    # 201: a staff post (an announcement) made; 400: refused on the merits.
    assert response.status_code in (200, 201, 202, 400), response.content
    if response.status_code == 400:
        assert response.json()["code"] == "invalid_parameter"


def test_a_staff_read_is_not_a_staff_list(world: World) -> None:
    """Lists stay the caller's own: staff see other entrants' work one id at a time."""
    environments = world.call(world.staff, "GET", "benchmark-environments")
    submissions = world.call(world.staff, "GET", "benchmark-submissions")

    assert environments.json() == []
    assert submissions.json()["results"] == []


# Pagination ------------------------------------------------------------------------------


def test_the_submissions_list_is_paginated(
    world: World, monkeypatch: pytest.MonkeyPatch, alice: Any, accepted: Callable[..., Submission]
) -> None:
    monkeypatch.setattr(PagePagination, "page_size", 2)
    newer = []
    for _ in range(2):  # each build ends before the next upload, so a build slot is free
        Submission.objects.filter(entrant=alice).update(status=Submission.QUEUED)
        newer.append(accepted(alice, world.environment, kind=Submission.PRACTICE))

    first = world.call(world.alice, "GET", "benchmark-submissions").json()
    second = world.call(world.alice, "GET", "benchmark-submissions", page=2).json()

    assert first["count"] == 3
    assert [row["id"] for row in first["results"]] == [s.pk for s in reversed(newer)]
    assert first["previous"] is None
    assert "page=2" in first["next"]
    assert [row["id"] for row in second["results"]] == [world.submission.pk]
    assert second["next"] is None


@pytest.mark.parametrize(
    ("page", "status", "code"),
    [
        ("abc", 400, "invalid_parameter"),
        ("", 400, "invalid_parameter"),
        ("1.5", 400, "invalid_parameter"),
        ("-1", 400, "invalid_parameter"),
        ("last", 400, "invalid_parameter"),
        ("0", 404, "not_found"),
        ("99", 404, "not_found"),
    ],
)
def test_a_bad_page_is_refused(world: World, page: str, status: int, code: str) -> None:
    response = world.call(world.alice, "GET", "benchmark-submissions", page=page)

    assert response.status_code == status
    assert response.json()["code"] == code


def test_unpaginated_lists_are_plain_and_bounded(
    world: World, benchmark: Any, alice: Any, ready_environment: Callable[..., Environment]
) -> None:
    """Environments are bounded by max_environments and benchmarks by staff: plain lists."""
    ready_environment(alice, benchmark, status=Environment.REMOVED)

    environments = world.call(world.alice, "GET", "benchmark-environments").json()
    benchmarks = world.call(world.anon, "GET", "benchmarks").json()
    leaderboard = world.call(world.anon, "GET", "leaderboard").json()

    assert [row["id"] for row in environments] == [world.environment.pk]  # removed ones hidden
    assert len(environments) <= benchmark.max_environments
    assert sorted(row["slug"] for row in benchmarks) == sorted(
        [benchmark.slug, world.estimation_slug]
    )
    assert leaderboard == {"state": "live", "rows": [], "verifying": []}


# Throttling ------------------------------------------------------------------------------


def _rates(settings: Any, **rates: str) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], **rates},
    }


def test_token_requests_are_throttled(world: World, settings: Any) -> None:
    _rates(settings, tokens="3/min")

    codes = [world.call(world.anon, "POST", "tokens").status_code for _ in range(4)]

    assert codes == [201, 201, 201, 429]
    refused = world.call(world.anon, "POST", "tokens")
    assert refused.json()["code"] == "throttled"
    assert "Retry-After" in refused.headers
    assert world.call(world.alice, "GET", "tokens").status_code == 200  # GET is not counted


@pytest.mark.parametrize("name", ["benchmark-environments", "benchmark-submissions"])
def test_uploads_are_throttled_per_user(world: World, settings: Any, name: str) -> None:
    _rates(settings, uploads="1/hour")

    first = world.call(world.alice, "POST", name, kind=Submission.PRACTICE)
    second = world.call(world.alice, "POST", name, kind=Submission.PRACTICE)

    assert first.status_code == 201, first.content
    assert second.status_code == 429
    assert second.json()["code"] == "throttled"
    assert world.call(world.alice, "GET", name).status_code == 200  # reading is not counted
    other = world.call(world.bob, "POST", name, kind=Submission.PRACTICE)
    assert other.status_code != 429  # the count is alice's, not everyone's


# A browser session's unsafe requests need the CSRF token ---------------------------------


def session_client(user: Any) -> APIClient:
    """A client signed in by session cookie that enforces CSRF as a browser meets it."""
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def test_a_session_request_without_the_csrf_token_is_refused_as_such(
    alice: Any, benchmark: Any
) -> None:
    # A page elsewhere making the signed-in browser post to the API: no token to send.
    client = session_client(alice)

    response = client.post(
        f"/api/v1/benchmarks/{benchmark.slug}/environments/",
        {"name": "forged", "dockerfile": SimpleUploadedFile("Dockerfile", b"FROM x\n")},
        format="multipart",
    )

    assert response.status_code == 403
    assert response.json()["code"] == "csrf_failed"
    assert "CSRF token" in response.json()["detail"]
    assert not Environment.objects.exists()


def test_a_session_request_with_the_csrf_token_and_a_token_request_without_one_pass(
    alice: Any, benchmark: Any, client_for: Callable[[Any], APIClient]
) -> None:
    client = session_client(alice)
    # A page of the portal, as the browser first loads one, sets the csrftoken cookie.
    assert client.get(f"/b/{benchmark.slug}/environments/").status_code == 200
    url = f"/api/v1/benchmarks/{benchmark.slug}/dockerfile-check/"
    body = {"dockerfile": "FROM localhost/podium/python:bookworm\n"}

    with_token = client.post(
        url, body, format="json", HTTP_X_CSRFTOKEN=client.cookies["csrftoken"].value
    )
    by_api_token = client_for(alice).post(url, body, format="json")

    assert (with_token.status_code, with_token.json()["ok"]) == (200, True)
    assert (by_api_token.status_code, by_api_token.json()["ok"]) == (200, True)
    assert client.get(f"/api/v1/benchmarks/{benchmark.slug}/").status_code == 200
