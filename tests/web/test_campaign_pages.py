"""The campaign pages: the crown (or vacant), what the next round waits for, the rounds
with their ordinals, void reasons and scores, and each entry's report. Every score on
them says which round it is from."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.utils import timezone

from portal.campaigns.models import Campaign, Crown, Round, RoundEntry
from tests import factories
from tests.api.test_campaigns import (
    ANSWER,
    REQUEST_POSITION,
    crown,
    make_campaign,
    make_round,
    make_submission,
    slice_rows,
)

SCORE = re.compile(r'<span class="score">([^<]*)</span>')
SCORE_WITH_ROUND = re.compile(
    r'<span class="score">([^<]*)</span> <span class="score-round muted">round (\d+)</span>'
)


@pytest.fixture
def rounds(alice: Any, bob: Any) -> dict[str, Any]:
    """Round 1 void; round 2 scored (alice 0.3125 takes the crown, bob 0.1); round 3
    pending and waiting for capacity."""
    campaign = make_campaign()
    leader = make_submission(alice, campaign)
    rival = make_submission(bob, campaign)
    void = make_round(
        campaign, 1, Round.VOID, [{"submission": leader}], void_reason="the host died"
    )
    scored = make_round(
        campaign,
        2,
        Round.SCORED,
        [
            {"submission": leader, "score": 0.3125, "slices": slice_rows([0.25, 0.3125, 0.4])},
            {"submission": rival, "score": 0.1, "slices": slice_rows([0.1, 0.1, 0.1])},
        ],
    )
    crown(campaign, leader, scored, 0.3125)
    pending = make_round(
        campaign,
        3,
        Round.PENDING,
        [{"submission": leader, "role": RoundEntry.LEADER}, {"submission": rival}],
        tries=3,
        next_try_at=timezone.now() + dt.timedelta(minutes=20),
    )
    return {"campaign": campaign, "void": void, "scored": scored, "pending": pending}


def page(client: Any, user: Any, url: str) -> str:
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def assert_every_score_names_its_round(html: str, expected: list[tuple[str, str]]) -> None:
    assert len(SCORE.findall(html)) == len(SCORE_WITH_ROUND.findall(html))
    assert SCORE_WITH_ROUND.findall(html) == expected


def test_the_campaign_page_shows_crown_rounds_and_queue(client, bob, rounds):
    html = page(client, bob, "/c/eva02/")

    assert "<strong>alice</strong> holds the crown" in html
    headings = re.findall(r'<h3 id="round-(\d+)-heading">', html)
    assert headings == ["3", "2", "1"]  # newest first
    assert "Void: the host died." in html
    assert "Round 3 is\n    <strong>waiting for capacity</strong>" in html
    assert "not stuck" in html
    assert "from 5 minutes up to 1 hour" in html
    scored = rounds["scored"]
    for entry in scored.entries.all():
        assert f"/c/eva02/rounds/{scored.pk}/entries/{entry.pk}/" in html


def test_every_score_on_the_campaign_page_names_its_round(client, bob, rounds):
    html = page(client, bob, "/c/eva02/")

    # The crown, then round 2's two entries (round 3 has no scores yet, round 1 is void).
    assert_every_score_names_its_round(html, [("0.3125", "2"), ("0.3125", "2"), ("0.1000", "2")])


def test_a_vacant_crown_says_vacant(client, alice):
    campaign = make_campaign()
    make_round(campaign, 1, Round.VOID, [{"submission": make_submission(alice, campaign)}])

    html = page(client, alice, "/c/eva02/")

    assert "<strong>Vacant</strong>" in html
    assert "</strong> holds the crown" not in html


def test_the_queue_explains_what_the_next_round_waits_for(client, alice, bob):
    campaign = make_campaign()
    make_submission(alice, campaign, queued_at=timezone.now() - dt.timedelta(hours=2))
    make_submission(bob, campaign)

    html = page(client, alice, "/c/eva02/")

    text = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    assert (
        "2 of 5 queued. The next round starts when 5 are queued, or when the oldest "
        "queued event is 6 hours old:"
    ) in text
    assert "alice (you)" in text


def test_a_fresh_pending_round_waits_for_a_host(client, alice):
    campaign = make_campaign()
    make_round(campaign, 1, Round.PENDING, [{"submission": make_submission(alice, campaign)}])

    html = page(client, alice, "/c/eva02/")

    assert "Round 1 is waiting for a" in html
    assert "stuck" not in html.replace("not stuck", "")


def test_the_rounds_page_lists_every_round_newest_first(client, bob, rounds):
    html = page(client, bob, "/c/eva02/rounds/")

    assert re.findall(r'<h2 id="round-(\d+)-heading">', html) == ["3", "2", "1"]
    assert_every_score_names_its_round(html, [("0.3125", "2"), ("0.1000", "2")])


def test_the_report_page_shows_slices_summary_and_environment(client, bob, rounds):
    scored = rounds["scored"]
    entry = scored.entries.get(position=0)

    html = page(client, bob, f"/c/eva02/rounds/{scored.pk}/entries/{entry.pk}/")

    assert "<h1>Round 2: alice's entry</h1>" in html
    assert_every_score_names_its_round(html, [("0.3125", "2")])
    assert "3 of 3 scored; 1 under tolerance (below the agreement gate)" in html
    assert re.findall(r'<th scope="row">(\d)</th>', html) == ["0", "1", "2"]
    assert "1.3750" in html  # slice 1's candidate seconds
    assert "AMD EPYC 9454" in html
    assert ANSWER not in html
    assert str(REQUEST_POSITION) not in html


def test_a_report_under_another_round_is_not_found(client, bob, rounds):
    entry = rounds["scored"].entries.get(position=0)
    client.force_login(bob)

    response = client.get(f"/c/eva02/rounds/{rounds['void'].pk}/entries/{entry.pk}/")

    assert response.status_code == 404


def test_an_unknown_campaign_is_not_found(client, alice, benchmark):
    client.force_login(alice)

    assert client.get("/c/nope/").status_code == 404
    assert client.get(f"/c/{benchmark.slug}/").status_code == 404  # a leaderboard benchmark


def test_campaign_pages_are_public(client, rounds):
    """Like the leaderboard: the crown, the rounds and each entry's arithmetic need no
    sign-in."""
    scored = rounds["scored"]
    entry = scored.entries.get(position=0)
    for url in (
        "/c/eva02/",
        "/c/eva02/rounds/",
        f"/c/eva02/rounds/{scored.pk}/entries/{entry.pk}/",
    ):
        response = client.get(url)

        assert response.status_code == 200, url
        assert entry.submission.entrant.username in response.content.decode(), url


def test_the_benchmark_list_links_a_campaign_to_its_page(client, benchmark):
    make_campaign()
    factories.UserFactory(username="viewer")

    html = client.get("/").content.decode()

    assert html.count('href="/c/') == 1
    assert 'href="/c/eva02/"' in html


def test_the_page_shows_why_a_crown_is_vacant_each_void_s_cause_and_each_draw(client, rounds):
    """Anyone, signed out, reads why the crown went, who caused each void, and the
    material a pending round's requests were drawn from, before it runs."""
    campaign = rounds["campaign"]
    Round.objects.filter(pk=rounds["void"].pk).update(void_cause="host")
    Round.objects.filter(pk=rounds["pending"].pk).update(material="c0ffee" * 10 + "c0ff")
    Crown.objects.filter(campaign=campaign).delete()
    Campaign.objects.filter(pk=campaign.pk).update(
        crown_note="The crown is vacant: its leader was disqualified: copied code."
    )

    html = client.get("/c/eva02/").content.decode()

    assert "copied code" in html
    assert "Void (host): the host died" in html
    assert "material " + "c0ffee" * 10 + "c0ff" in html
    assert "host 1" in html  # voids counted by cause
