"""The campaign API: campaigns with their crown, queue and rounds; an entry's report; a
campaign submission's timeline and build log.

Anyone reads campaigns, rounds and reports, signed in or not; a submission's timeline and build
log under the campaign path are its entrant's (and staff's), like ``/submissions/``.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.utils import timezone

from portal.api.common import PagePagination
from portal.campaigns import creation, recording, rounds, rules
from portal.campaigns.models import Campaign, Crown, Round, RoundEntry
from portal.contests.models import Benchmark, Cohort, CohortItem
from portal.core import storage
from portal.submissions.builds import submission_build_finished
from portal.submissions.models import Submission, SubmissionEvent
from tests import factories
from tests.campaigns.conftest import HOST, report

REQUEST_POSITION = 918_273  # a cohort position in the round's request set: never shown
ANSWER = "answer-7f3e9c"  # a per-image answer in the round's evidence: never shown
ENVIRONMENT = {"cpu_model": "AMD EPYC 9454", "cores": 8, "cpu_quota": "800000 100000"}

# Builders (the page tests use them too) -----------------------------------------------


def make_campaign(slug: str = "eva02", **fields: Any) -> Campaign:
    benchmark = factories.BenchmarkFactory(
        slug=slug, title=f"Campaign {slug}", kind=Benchmark.CAMPAIGN
    )
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)  # the request pool
    fields.setdefault("baseline_image_digest", "sha256:" + "b" * 64)
    return Campaign.objects.create(
        benchmark=benchmark, hardware_class_id=benchmark.hardware_class_id, **fields
    )


def make_submission(
    entrant: Any,
    campaign: Campaign,
    *,
    status: str = Submission.BENCH_QUEUED,
    queued_at: dt.datetime | None = None,
) -> Submission:
    environment = factories.EnvironmentFactory(
        owner=entrant, benchmark=campaign.benchmark, image_digest="sha256:" + "e" * 64
    )
    now = timezone.now()
    return Submission.objects.create(
        entrant=entrant,
        benchmark=campaign.benchmark,
        environment=environment,
        status=status,
        submitted_at=now,
        queued_at=queued_at or now,
        source_name="entry.tar.gz",
        source_format="tar.gz",
        source_sha256="1" * 64,
        source_bytes=1,
    )


def slice_rows(speedups: list[float | None], reason: str = "", matches: int = 100) -> list[Any]:
    """An entry's ``slices`` as the domain stores them (with per-slice agreement)."""
    return [
        {
            "slice": index,
            "baseline_s": 2.0,
            "candidate_s": None if speedup is None else round(2.0 * (1 - speedup), 6),
            "speedup": speedup,
            "matches": matches if index else 90,  # slice 0 is under the agreement gate
            "total": 100,
            "reason": "" if speedup is not None else reason,
        }
        for index, speedup in enumerate(speedups)
    ]


def make_round(
    campaign: Campaign,
    ordinal: int,
    status: str = Round.SCORED,
    entries: list[dict[str, Any]] | None = None,
    **fields: Any,
) -> Round:
    """A round with ``entries`` (each: submission, and optionally role, verdict, score,
    reason, slices), in that order."""
    now = timezone.now()
    fields.setdefault("created_at", now - dt.timedelta(hours=10 - ordinal))
    if status in (Round.SCORED, Round.VOID):
        fields.setdefault("started_at", fields["created_at"])
        fields.setdefault("finished_at", fields["created_at"] + dt.timedelta(minutes=20))
        fields.setdefault("host", "gpu-host-1")
    round_ = Round.objects.create(
        campaign=campaign,
        ordinal=ordinal,
        cohort=Cohort.objects.get(benchmark=campaign.benchmark, kind=Cohort.OFFICIAL),
        status=status,
        material="0" * 64,
        request_positions=[REQUEST_POSITION, 5, 6],
        request_digest="d" * 64,
        slice_count=3,
        evidence={  # as recording.round_record keeps it, with an answer besides
            "request_positions": [REQUEST_POSITION, 5, 6],
            "environment": ENVIRONMENT,
            "outcome": {"entries": [{"slices": [{"answers": [ANSWER]}]}]},
        },
        **fields,
    )
    for position, entry in enumerate(entries or []):
        verdict = entry.get("verdict", RoundEntry.PASSED if status == Round.SCORED else "none")
        RoundEntry.objects.create(
            round=round_,
            submission=entry["submission"],
            role=entry.get("role", RoundEntry.CHALLENGER),
            position=position,
            image_digest="sha256:" + "e" * 64,
            verdict=verdict,
            score=entry.get("score"),
            agreement=entry.get("agreement"),
            slices=entry.get("slices", []),
            reason=entry.get("reason", ""),
        )
    return round_


def crown(campaign: Campaign, submission: Submission, round_: Round, score: float) -> Crown:
    return Crown.objects.create(
        campaign=campaign, submission=submission, score=score, round=round_, since=timezone.now()
    )


@pytest.fixture
def history(alice: Any, bob: Any) -> dict[str, Any]:
    """Round 1 void, round 2 scored (alice takes the crown over bob), round 3 pending and
    waiting for capacity; carol queued for the next round."""
    campaign = make_campaign()
    leader = make_submission(alice, campaign)
    rival = make_submission(bob, campaign)
    void = make_round(
        campaign,
        1,
        Round.VOID,
        [{"submission": leader}],
        void_reason="closing baseline drifted 0.08 (ceiling 0.05)",
    )
    scored = make_round(
        campaign,
        2,
        Round.SCORED,
        [
            {"submission": leader, "score": 0.3125, "agreement": 0.995, "slices": []},
            {
                "submission": rival,
                "verdict": RoundEntry.DISQUALIFIED,
                "agreement": 0.5,
                "reason": "agreement 0.5000 under 0.99",
                "slices": slice_rows([None, None, None], reason="disqualified: agreement"),
            },
        ],
    )
    RoundEntry.objects.filter(round=scored, position=0).update(
        slices=slice_rows([0.25, 0.3125, 0.4])
    )
    crown(campaign, leader, scored, 0.3125)
    pending = make_round(
        campaign,
        3,
        Round.PENDING,
        [{"submission": leader, "role": RoundEntry.LEADER}, {"submission": rival}],
        tries=2,
        next_try_at=timezone.now() + dt.timedelta(minutes=10),
    )
    carol = factories.UserFactory(username="carol")
    queued = make_submission(carol, campaign)
    return {
        "campaign": campaign,
        "leader": leader,
        "rival": rival,
        "void": void,
        "scored": scored,
        "pending": pending,
        "queued": queued,
    }


def entry_of(round_: Round, submission: Submission) -> RoundEntry:
    return RoundEntry.objects.get(round=round_, submission=submission)


# Campaigns -------------------------------------------------------------------------------

CAMPAIGN_KEYS = {
    "id",
    "slug",
    "title",
    "paused",
    "closed",
    "pool_size",
    "crown_note",
    "voids_by_cause",
    "hardware_class",
    "baseline_image_digest",
    "rules",
    "crown",
    "queue",
    "rounds",
}
ROUND_KEYS = {
    "id",
    "ordinal",
    "status",
    "void_reason",
    "created_at",
    "started_at",
    "finished_at",
    "waiting_for_capacity",
    "tries",
    "next_try_at",
    "host",
    "void_cause",
    "material",
    "request_count",
    "request_digest",
    "evidence_digest",
    "entries",
}
ENTRY_KEYS = {
    "id",
    "submission",
    "entrant",
    "role",
    "position",
    "verdict",
    "score",
    "agreement",
    "reason",
}


def test_a_campaign_gives_its_crown_queue_and_rounds(client_for, bob, history):
    body = client_for(bob).get("/api/v1/campaigns/eva02/").json()

    assert set(body) == CAMPAIGN_KEYS
    assert body["slug"] == "eva02"
    assert body["crown"] == {
        "submission": history["leader"].pk,
        "entrant": "alice",
        "score": 0.3125,
        "round": {"id": history["scored"].pk, "ordinal": 2},
        "since": body["crown"]["since"],
    }
    assert [row["ordinal"] for row in body["rounds"]] == [3, 2, 1]
    assert body["queue"]["state"] == "waiting_for_capacity"
    assert body["queue"]["round"] == {"id": history["pending"].pk, "ordinal": 3}
    assert "Round 3 is waiting for capacity" in body["queue"]["explanation"]
    assert [row["entrant"] for row in body["queue"]["entries"]] == ["carol"]


def test_the_campaign_list_gives_every_campaign(client_for, bob, history):
    make_campaign("second")

    body = client_for(bob).get("/api/v1/campaigns/").json()

    assert [campaign["slug"] for campaign in body] == ["eva02", "second"]
    assert all(set(campaign) == CAMPAIGN_KEYS for campaign in body)
    assert body[1]["crown"] is None
    assert body[1]["rounds"] == []


def test_a_vacant_crown_is_null(client_for, alice):
    campaign = make_campaign()
    make_round(campaign, 1, Round.VOID, [{"submission": make_submission(alice, campaign)}])

    body = client_for(alice).get("/api/v1/campaigns/eva02/").json()

    assert body["crown"] is None


def test_an_unknown_campaign_is_not_found(client_for, alice, benchmark):
    for slug in ("nope", benchmark.slug):  # a leaderboard benchmark is no campaign
        response = client_for(alice).get(f"/api/v1/campaigns/{slug}/")

        assert response.status_code == 404
        assert response.json()["code"] == "not_found"


def test_campaigns_rounds_and_reports_are_public_but_timelines_are_not(
    anon, client_for, bob, history
):
    """The score's arithmetic is public, like the leaderboard: anyone reads the crown, the
    rounds and every entry's report without signing in, and reads what bob reads. A
    submission's timeline and build log stay its owner's."""
    for url in (
        "/api/v1/campaigns/",
        "/api/v1/campaigns/eva02/rounds/",
        f"/api/v1/rounds/{history['scored'].pk}/entries/"
        f"{entry_of(history['scored'], history['leader']).pk}/report",
    ):
        response = anon.get(url)

        assert response.status_code == 200, url
        assert response.json() == client_for(bob).get(url).json(), url
    detail = anon.get("/api/v1/campaigns/eva02/").json()
    assert detail["crown"]["entrant"] == "alice"
    leader = history["leader"].pk
    for url in (
        f"/api/v1/campaigns/eva02/submissions/{leader}/",
        f"/api/v1/campaigns/eva02/submissions/{leader}/build-log",
    ):
        response = anon.get(url)

        assert response.status_code == 401, url
        assert response.json()["code"] == "not_authenticated"


def test_a_round_publishes_the_draw_so_anyone_can_redo_it(anon, history):
    """Material, campaign id and pool size are public from the round's creation (a pending
    round shows them before it runs): the positions they give hash to the request digest."""
    campaign = history["campaign"]
    pending = history["pending"]
    pending.material = "ab" * 32
    positions = rules.draw_requests(rules.round_seed(pending.material, campaign.pk), range(7), 3)
    pending.request_positions = positions
    pending.request_digest = rules.request_digest(positions)
    pending.save()
    cohort = Cohort.objects.get(benchmark=campaign.benchmark, kind=Cohort.OFFICIAL)
    CohortItem.objects.filter(cohort=cohort).delete()
    for position in range(7):
        CohortItem.objects.create(
            cohort=cohort,
            position=position,
            canonical_name=f"{position}.jpg",
            sha256="0" * 64,
            reference_class=0,
        )

    body = anon.get("/api/v1/campaigns/eva02/").json()
    row = next(r for r in body["rounds"] if r["ordinal"] == pending.ordinal)

    assert row["status"] == "pending"
    redone = rules.draw_requests(
        rules.round_seed(row["material"], body["id"]), range(body["pool_size"]), 3
    )
    assert rules.request_digest(redone) == row["request_digest"]
    assert row["request_count"] == 3


# The queue -------------------------------------------------------------------------------


def test_the_queue_says_what_the_next_round_waits_for(client_for, alice, bob):
    campaign = make_campaign()
    oldest = timezone.now() - dt.timedelta(hours=2)
    make_submission(alice, campaign, queued_at=oldest)
    make_submission(bob, campaign)

    queue = client_for(alice).get("/api/v1/campaigns/eva02/").json()["queue"]

    assert queue["state"] == "waiting"
    assert queue["queued"] == 2
    assert queue["trigger_queued"] == 5
    assert queue["trigger_wait_s"] == 6 * 3600
    assert dt.datetime.fromisoformat(queue["due_at"]) == oldest + dt.timedelta(hours=6)
    assert queue["explanation"].startswith(
        "2 of 5 queued. The next round starts when 5 are queued, or when the oldest "
        "queued event is 6 hours old (at "
    )
    assert queue["round"] is None
    assert [row["in_next_round"] for row in queue["entries"]] == [True, True]


@pytest.mark.parametrize(
    ("setup", "state", "words"),
    [
        ("nothing", "empty", "Nothing is queued"),
        ("paused", "paused", "paused"),
        ("no baseline", "no_baseline", "baseline image"),
        ("fresh pending", "waiting_for_host", "Round 1 is waiting for a"),
        ("running", "running", "Round 1 is running on gpu-host-1"),
    ],
)
def test_every_queue_state_explains_itself(client_for, alice, setup, state, words):
    fields = {"paused": setup == "paused"}
    if setup == "no baseline":
        fields["baseline_image_digest"] = ""
    campaign = make_campaign(**fields)
    if setup in ("paused", "no baseline"):
        make_submission(alice, campaign)
    if setup == "fresh pending":
        make_round(campaign, 1, Round.PENDING, [{"submission": make_submission(alice, campaign)}])
    if setup == "running":
        entries = [{"submission": make_submission(alice, campaign)}]
        make_round(campaign, 1, Round.RUNNING, entries, host="gpu-host-1")

    queue = client_for(alice).get("/api/v1/campaigns/eva02/").json()["queue"]

    assert queue["state"] == state
    assert words in queue["explanation"]


# Rounds ----------------------------------------------------------------------------------


def test_rounds_are_listed_newest_first_with_their_entries(client_for, bob, history):
    body = client_for(bob).get("/api/v1/campaigns/eva02/rounds/").json()

    assert body["count"] == 3
    rounds = body["results"]
    assert [row["ordinal"] for row in rounds] == [3, 2, 1]
    assert [row["status"] for row in rounds] == ["pending", "scored", "void"]
    assert all(set(row) == ROUND_KEYS for row in rounds)
    pending, scored, void = rounds
    assert pending["waiting_for_capacity"] is True
    assert pending["tries"] == 2
    assert pending["void_reason"] is None
    assert void["void_reason"] == "closing baseline drifted 0.08 (ceiling 0.05)"
    assert [entry["verdict"] for entry in void["entries"]] == ["none"]
    assert void["entries"][0]["score"] is None
    leader, rival = scored["entries"]
    assert set(leader) == ENTRY_KEYS
    assert leader == {
        "id": entry_of(history["scored"], history["leader"]).pk,
        "submission": history["leader"].pk,
        "entrant": "alice",
        "role": "challenger",
        "position": 0,
        "verdict": "passed",
        "score": 0.3125,
        "agreement": 0.995,
        "reason": None,
    }
    assert (rival["entrant"], rival["verdict"], rival["score"]) == ("bob", "disqualified", None)
    assert rival["reason"] == "agreement 0.5000 under 0.99"


def test_the_rounds_list_is_paginated(client_for, bob, history, monkeypatch):
    monkeypatch.setattr(PagePagination, "page_size", 2)

    first = client_for(bob).get("/api/v1/campaigns/eva02/rounds/").json()
    second = client_for(bob).get("/api/v1/campaigns/eva02/rounds/", {"page": 2}).json()

    assert [row["ordinal"] for row in first["results"]] == [3, 2]
    assert [row["ordinal"] for row in second["results"]] == [1]
    assert second["next"] is None


def test_rounds_of_an_unknown_campaign_are_not_found(client_for, alice):
    response = client_for(alice).get("/api/v1/campaigns/nope/rounds/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


# Reports ---------------------------------------------------------------------------------


def report_url(round_: Round, entry: RoundEntry) -> str:
    return f"/api/v1/rounds/{round_.pk}/entries/{entry.pk}/report"


def test_a_report_gives_rows_summary_and_environment(client_for, bob, history):
    scored = history["scored"]
    entry = entry_of(scored, history["leader"])

    response = client_for(bob).get(report_url(scored, entry))  # anyone signed in

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"campaign", "round", "entry", "rows", "summary", "environment"}
    assert body["campaign"] == "eva02"
    assert body["round"] == {"id": scored.pk, "ordinal": 2, "status": "scored", "void_reason": None}
    assert (body["entry"]["id"], body["entry"]["score"]) == (entry.pk, 0.3125)
    assert [row.pop("compared") for row in body["rows"]] == [100, 100, 100]
    assert [row.pop("matches") for row in body["rows"]] == [90, 100, 100]
    assert body["rows"] == [
        {"slice": 0, "baseline_s": 2.0, "candidate_s": 1.5, "speedup": 0.25, "reason": None},
        {"slice": 1, "baseline_s": 2.0, "candidate_s": 1.375, "speedup": 0.3125, "reason": None},
        {"slice": 2, "baseline_s": 2.0, "candidate_s": 1.2, "speedup": 0.4, "reason": None},
    ]
    assert body["summary"] == {"slices": 3, "slices_scored": 3, "slices_under_tolerance": 1}
    assert body["environment"] == ENVIRONMENT


def test_a_slice_that_scored_nothing_says_why(client_for, alice, history):
    scored = history["scored"]

    body = client_for(alice).get(report_url(scored, entry_of(scored, history["rival"]))).json()

    assert [row["speedup"] for row in body["rows"]] == [None, None, None]
    assert {row["reason"] for row in body["rows"]} == {"disqualified: agreement"}
    assert body["summary"]["slices_scored"] == 0
    assert body["entry"]["reason"] == "agreement 0.5000 under 0.99"


def test_a_report_never_shows_answers_or_requests(client_for, bob, history):
    scored = history["scored"]

    body = client_for(bob).get(report_url(scored, entry_of(scored, history["leader"]))).json()

    text = json.dumps(body)
    assert ANSWER not in text
    assert str(REQUEST_POSITION) not in text
    assert "request" not in text
    assert all(
        set(row)
        == {"slice", "baseline_s", "candidate_s", "compared", "matches", "speedup", "reason"}
        for row in body["rows"]
    )


def test_a_report_of_an_entry_under_another_round_is_not_found(client_for, bob, history):
    entry = entry_of(history["scored"], history["leader"])

    for url in (
        report_url(history["void"], entry),
        f"/api/v1/rounds/{history['scored'].pk}/entries/999999/report",
    ):
        response = client_for(bob).get(url)

        assert response.status_code == 404, url
        assert response.json()["code"] == "not_found"


# A campaign submission: timeline and build log ------------------------------------------


def submission_url(submission: Submission, slug: str = "eva02") -> str:
    return f"/api/v1/campaigns/{slug}/submissions/{submission.pk}/"


def test_the_timeline_gives_the_latest_round_entry(client_for, alice, history):
    leader = history["leader"]
    at = timezone.now() - dt.timedelta(hours=12)
    for offset, status in enumerate(("accepted", "building", "bench_queued")):
        SubmissionEvent.objects.create(
            submission=leader, status=status, at=at + dt.timedelta(minutes=offset)
        )

    body = client_for(alice).get(submission_url(leader)).json()

    assert set(body) == {
        "id",
        "campaign",
        "kind",
        "status",
        "submitted_at",
        "failure_reason",
        "timeline",
        "entry",
    }
    assert (body["id"], body["campaign"], body["status"]) == (leader.pk, "eva02", "bench_queued")
    assert [event["status"] for event in body["timeline"]] == [
        "accepted",
        "building",
        "bench_queued",
    ]
    assert set(body["timeline"][0]) == {"status", "at", "note"}
    entry = body["entry"]  # round 3 is the latest it is in: pending, no verdict yet
    assert entry["round"] == {
        "id": history["pending"].pk,
        "ordinal": 3,
        "status": "pending",
        "void_reason": None,
    }
    assert (entry["role"], entry["verdict"], entry["score"]) == ("leader", "none", None)


def test_a_submission_that_never_ran_has_no_entry(client_for, history):
    queued = history["queued"]

    body = client_for(queued.entrant).get(submission_url(queued)).json()

    assert body["entry"] is None


def write_build_log(submission: Submission, lines: int) -> None:
    path = storage.submission_build_log(submission.pk)
    storage.ensure_dir(path.parent)
    path.write_text("".join(f"line {n}\n" for n in range(1, lines + 1)))


def build_log_url(submission: Submission, slug: str = "eva02") -> str:
    return f"{submission_url(submission, slug)}build-log"


def test_the_build_log_tail_is_plain_text_200_lines_by_default(client_for, alice, history):
    leader = history["leader"]
    write_build_log(leader, 2500)
    client = client_for(alice)

    default = client.get(build_log_url(leader))
    most = client.get(build_log_url(leader), {"tail": 2000})
    one = client.get(build_log_url(leader), {"tail": 1})

    assert default.status_code == 200
    assert default["Content-Type"] == "text/plain; charset=utf-8"
    text = default.content.decode()
    assert text.splitlines() == [f"line {n}" for n in range(2301, 2501)]
    assert len(most.content.decode().splitlines()) == 2000
    assert one.content == b"line 2500\n"


@pytest.mark.parametrize("tail", ["0", "2001", "-1", "abc", ""])
def test_a_tail_out_of_bounds_is_refused(client_for, alice, history, tail):
    write_build_log(history["leader"], 5)

    response = client_for(alice).get(build_log_url(history["leader"]), {"tail": tail})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"


def test_a_missing_build_log_is_not_found(client_for, alice, history):
    response = client_for(alice).get(build_log_url(history["leader"]))

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_another_entrants_timeline_and_log_are_not_found(client_for, bob, history):
    leader = history["leader"]  # alice's
    write_build_log(leader, 5)

    for url in (submission_url(leader), build_log_url(leader)):
        response = client_for(bob).get(url)

        assert response.status_code == 404, url
        assert response.json() == {"code": "not_found", "detail": response.json()["detail"]}
        assert "line" not in response.content.decode()


def test_staff_read_any_timeline_and_log(client_for, staff, history):
    leader = history["leader"]
    write_build_log(leader, 5)

    assert client_for(staff).get(submission_url(leader)).status_code == 200
    assert client_for(staff).get(build_log_url(leader)).content.endswith(b"line 5\n")


def test_a_submission_of_another_benchmark_is_not_found_here(client_for, alice, benchmark, history):
    elsewhere = make_submission(alice, make_campaign("other"))
    write_build_log(elsewhere, 5)

    for url in (submission_url(elsewhere), build_log_url(elsewhere)):
        response = client_for(alice).get(url)

        assert response.status_code == 404, url
        assert response.json()["code"] == "not_found"


# End to end: a round recorded by the domain's services reads back the same way ----------


def built(benchmark: Benchmark, digest: str) -> Submission:
    """An official submission whose build just finished (so it joins the campaign's queue)."""
    entrant = factories.UserFactory()
    submission = Submission.objects.create(
        entrant=entrant,
        benchmark=benchmark,
        environment=factories.EnvironmentFactory(owner=entrant, benchmark=benchmark),
        status=Submission.BUILDING,
        submitted_at=timezone.now(),
        source_name="source.tar.gz",
        source_format="tar.gz",
        source_sha256="0" * 64,
        source_bytes=1,
    )
    submission_build_finished(
        submission_id=submission.pk, ok=True, image_tag="podium/sub:1", image_digest=digest
    )
    return submission


def test_a_round_recorded_by_the_services_reads_back(client_for, bob):
    benchmark = factories.BenchmarkFactory(kind=Benchmark.CAMPAIGN)
    cohort = Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    CohortItem.objects.bulk_create(
        CohortItem(
            cohort=cohort,
            position=position,
            canonical_name=f"{position}.jpg",
            sha256=f"{position:064x}",
            reference_class=position,
        )
        for position in range(40)
    )
    campaign = creation.campaign_create(benchmark=benchmark, round_size=20, slice_count=4)
    campaign = creation.campaign_baseline_record(
        campaign=campaign, image_tag="podium/starter-kit:1", image_digest="sha256:" + "b" * 64
    )
    first = built(benchmark, "sha256:" + "1" * 64)
    second = built(benchmark, "sha256:" + "2" * 64)
    round_ = rounds.round_maybe_start(campaign, force=True)
    assert round_ is not None
    claim = rounds.round_claim(round_.pk, HOST)
    assert claim is not None
    # first: 8 s a slice against 10 (a 0.2 speedup); second: too many wrong answers.
    assert recording.round_record(report(claim, {second.pk: {"wrong": 5}}))
    client = client_for(bob)

    overview = client.get(f"/api/v1/campaigns/{campaign.slug}/").json()
    entry = RoundEntry.objects.get(round=round_, submission=first)
    body = client.get(f"/api/v1/rounds/{round_.pk}/entries/{entry.pk}/report").json()
    failed = RoundEntry.objects.get(round=round_, submission=second)
    failed_body = client.get(f"/api/v1/rounds/{round_.pk}/entries/{failed.pk}/report").json()

    assert overview["crown"]["submission"] == first.pk
    assert overview["crown"]["round"] == {"id": round_.pk, "ordinal": round_.ordinal}
    assert [row["status"] for row in overview["rounds"]] == ["scored"]
    assert body["entry"]["verdict"] == "passed"
    assert [row["speedup"] for row in body["rows"]] == pytest.approx([0.2] * 4)
    assert {row["reason"] for row in body["rows"]} == {None}
    assert body["summary"] == {"slices": 4, "slices_scored": 4, "slices_under_tolerance": 0}
    assert body["environment"] == {
        "cpu_model": "test CPU",
        "cpu_cores": 16,
        "cgroup_cpu_quota": "max",
    }
    assert "request" not in json.dumps(body)
    assert failed_body["entry"]["verdict"] != "passed"
    assert all(row["speedup"] is None and row["reason"] for row in failed_body["rows"])
    assert failed_body["summary"]["slices_scored"] == 0
