"""A metered-estimation phase's final standings, published through the standings app:
refused (nothing written, nothing charged) while the final rerun is unsettled or a prize
row is not cleared by review; a disqualified entry drops out and the next team moves up;
a correction keeps the old digest; the exports' SHA-256 is the frozen rows' digest."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.audit.models import AuditEvent
from portal.contests.models import Benchmark
from portal.core import errors
from portal.estimation import rules, selectors, services
from portal.estimation.models import Entry, EntryReview, EstimationStandingRow, FinalScore, Suite
from portal.estimation.standings import entry_review_decide, published_scores
from portal.standings.models import Correction, FinalSettings, Standings
from portal.standings.publishing import standings_correct, standings_publish
from portal.standings.selectors import FINAL, board_state
from tests import factories


@pytest.fixture
def phase(db: None) -> Benchmark:
    """An estimation phase that closed an hour ago, with a ready final suite."""
    now = timezone.now()
    benchmark = factories.BenchmarkFactory(
        kind=Benchmark.ESTIMATION,
        opens_at=now - dt.timedelta(days=5),
        closes_at=now - dt.timedelta(hours=1),
        attempt_timezone="UTC",
    )
    factories.PhaseRulesFactory(benchmark=benchmark)
    factories.SuiteFactory(benchmark=benchmark, role=Suite.FINAL)
    return benchmark


@pytest.fixture
def client_for(db: None):
    def make(user: Any) -> APIClient:
        token = ApiToken.objects.create(user=user, label="tests")
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return api

    return make


def final(
    phase: Benchmark, user: Any, score: float | None, *, team: Any = None, status: str = "graded"
) -> Entry:
    """A graded entry of ``user`` (charged to ``team``) with its final score as given."""
    entry = factories.EntryFactory(
        benchmark=phase,
        entrant=user,
        team=team,
        status=Entry.GRADED,
        public_score=0.5,
        submitted_at=phase.closes_at - dt.timedelta(days=1),
    )
    FinalScore.objects.create(
        entry=entry,
        suite=Suite.objects.get(benchmark=phase, role=Suite.FINAL),
        status=status,
        score=score,
        queued_at=phase.closes_at,
    )
    return entry


@pytest.fixture
def four(phase: Benchmark) -> dict[str, Entry]:
    """Four teams' entries, ranked a < b < c < d by their final scores."""
    entries = {}
    for name, score in (("a", 0.1), ("b", 0.2), ("c", 0.3), ("d", 0.4)):
        user = factories.UserFactory(username=f"user-{name}")
        team = factories.team(phase, f"team-{name}", user)
        entries[name] = final(phase, user, score, team=team)
    return entries


def publish(phase: Benchmark, actor: Any, reason: str = "results day") -> Standings:
    return standings_publish(benchmark=phase, actor=actor, reason=reason)


def clear(entry: Entry, actor: Any, reason: str = "read the estimator: honest") -> EntryReview:
    review = EntryReview.objects.get(entry=entry)
    return entry_review_decide(
        review=review, actor=actor, decision=EntryReview.CLEARED, reason=reason
    )


def disqualify(entry: Entry, actor: Any, reason: str = "reads the reference") -> EntryReview:
    review = EntryReview.objects.get(entry=entry)
    return entry_review_decide(
        review=review, actor=actor, decision=EntryReview.DISQUALIFIED, reason=reason
    )


def nothing_published(phase: Benchmark) -> bool:
    return (
        not Standings.objects.filter(benchmark=phase).exists()
        and not EstimationStandingRow.objects.exists()
        and not AuditEvent.objects.filter(action="standings.published").exists()
    )


def test_it_is_refused_when_no_final_rerun_was_started(phase, staff):
    with pytest.raises(errors.InvalidParameter, match="No final rerun was started"):
        publish(phase, staff)
    assert nothing_published(phase)


@pytest.mark.parametrize("unsettled", [Entry.ACCEPTED, Entry.GRADING])
def test_it_is_refused_while_a_final_score_is_unsettled_and_opens_no_review(
    phase, four, staff, unsettled
):
    FinalScore.objects.filter(entry=four["d"]).update(status=unsettled, score=None)
    with pytest.raises(errors.InvalidParameter, match="still grading"):
        publish(phase, staff)
    assert nothing_published(phase)
    assert not EntryReview.objects.exists()


def test_it_is_refused_before_the_close_and_without_a_reason(phase, four, staff):
    Benchmark.objects.filter(pk=phase.pk).update(closes_at=timezone.now() + dt.timedelta(hours=1))
    phase.refresh_from_db()
    with pytest.raises(errors.InvalidParameter, match="after the benchmark closes"):
        publish(phase, staff)
    Benchmark.objects.filter(pk=phase.pk).update(closes_at=timezone.now() - dt.timedelta(hours=1))
    phase.refresh_from_db()
    with pytest.raises(errors.InvalidParameter, match="Give a reason"):
        publish(phase, staff, reason="   ")
    assert nothing_published(phase)
    assert not EntryReview.objects.exists()


def test_staff_without_the_permission_are_refused_before_anything(phase, four):
    clerk = factories.UserFactory(username="clerk", is_staff=True)
    with pytest.raises(errors.PermissionDenied):
        publish(phase, clerk)
    assert nothing_published(phase) and not EntryReview.objects.exists()


def test_publishing_waits_for_each_prize_row_and_opens_their_reviews(phase, four, staff):
    with pytest.raises(errors.InvalidParameter) as refused:
        publish(phase, staff)
    detail = refused.value.detail
    assert "ranks 1 to 3" in detail
    for rank, name in ((1, "a"), (2, "b"), (3, "c")):
        assert f"rank {rank}, team-{name}, entry {four[name].pk} (under_review)" in detail
    assert "team-d" not in detail
    assert nothing_published(phase)
    # The reviews were opened (and kept) for ranks 1 to 3 only, each audited.
    reviewed = set(EntryReview.objects.values_list("entry_id", flat=True))
    assert reviewed == {four["a"].pk, four["b"].pk, four["c"].pk}
    assert AuditEvent.objects.filter(action="estimation.review.open").count() == 3

    clear(four["a"], staff)
    clear(four["b"], staff)
    with pytest.raises(errors.InvalidParameter, match=r"rank 3, team-c") as still:
        publish(phase, staff)
    assert "team-a" not in still.value.detail
    assert nothing_published(phase)

    clear(four["c"], staff)
    standings = publish(phase, staff)
    assert standings.source == Standings.ESTIMATION_FINAL
    found = published_scores(phase)
    assert found is not None
    assert [(r.rank, r.team, r.entry_id, r.score) for r in found.rows] == [
        (1, "team-a", four["a"].pk, 0.1),
        (2, "team-b", four["b"].pk, 0.2),
        (3, "team-c", four["c"].pk, 0.3),
        (4, "team-d", four["d"].pk, 0.4),
    ]
    assert standings.digest == "sha256:" + hashlib.sha256(found.csv.encode()).hexdigest()
    assert [row["review"] for row in found.marked] == ["cleared"] * 3 + [None]
    event = AuditEvent.objects.get(action="standings.published")
    assert event.reason == "results day" and event.details["digest"] == standings.digest
    assert event.details["source"] == "estimation_final" and event.details["rows"] == 4
    assert board_state(phase) == FINAL
    with pytest.raises(errors.InvalidParameter, match="already published"):
        publish(phase, staff)


def test_a_disqualified_winner_drops_out_and_the_next_team_moves_up_for_review(phase, four, staff):
    with pytest.raises(errors.InvalidParameter):
        publish(phase, staff)
    disqualify(four["a"], staff)
    for name in ("b", "c"):
        clear(four[name], staff)
    rows = selectors.final_standings(phase)
    assert [(r.rank, r.team) for r in rows if r.rank] == [
        (1, "team-b"),
        (2, "team-c"),
        (3, "team-d"),
    ]
    assert [r.status for r in rows if r.entry_id == four["a"].pk] == ["disqualified"]
    with pytest.raises(errors.InvalidParameter, match=r"rank 3, team-d, entry \d+"):
        publish(phase, staff)
    assert nothing_published(phase)
    assert EntryReview.objects.get(entry=four["d"]).status == EntryReview.UNDER_REVIEW
    clear(four["d"], staff)
    publish(phase, staff)
    found = published_scores(phase)
    assert found is not None
    assert [(r.rank, r.team) for r in found.rows] == [
        (1, "team-b"),
        (2, "team-c"),
        (3, "team-d"),
    ]
    event = AuditEvent.objects.get(action="estimation.review.disqualified")
    assert event.reason == "reads the reference"
    assert event.target == f"estimation_entry:{four['a'].pk}"


def test_a_disqualified_entry_leaves_its_teams_other_pick_to_rank(phase, four, staff):
    """As for timed standings, a disqualification is of the entry: the team's other
    pick ranks in its place, and is reviewed in its turn."""
    other = final(phase, four["a"].entrant, 0.25, team=four["a"].team)
    with pytest.raises(errors.InvalidParameter):
        publish(phase, staff)
    disqualify(four["a"], staff)
    ranked = [(r.rank, r.entry_id) for r in selectors.final_standings(phase) if r.rank]
    assert ranked[:3] == [(1, four["b"].pk), (2, other.pk), (3, four["c"].pk)]
    with pytest.raises(errors.InvalidParameter, match=rf"rank 2, team-a, entry {other.pk}"):
        publish(phase, staff)


def test_a_review_is_decided_once_with_a_reason_and_the_permission(phase, four, staff):
    with pytest.raises(errors.InvalidParameter):
        publish(phase, staff)
    review = EntryReview.objects.get(entry=four["a"])
    clerk = factories.UserFactory(username="clerk", is_staff=True)
    with pytest.raises(errors.PermissionDenied):
        entry_review_decide(review=review, actor=clerk, decision="cleared", reason="fine")
    with pytest.raises(errors.InvalidParameter, match="reason"):
        entry_review_decide(review=review, actor=staff, decision="cleared", reason="  ")
    with pytest.raises(errors.InvalidParameter, match="decision must be"):
        entry_review_decide(review=review, actor=staff, decision="maybe", reason="hm")
    review.refresh_from_db()
    assert review.status == EntryReview.UNDER_REVIEW and review.decided_at is None
    assert not AuditEvent.objects.filter(action__startswith="estimation.review.c").exists()
    clear(four["a"], staff)
    with pytest.raises(errors.InvalidParameter, match="decided already"):
        disqualify(four["a"], staff)
    assert EntryReview.objects.get(entry=four["a"]).status == EntryReview.CLEARED


def test_prize_positions_follow_the_final_settings(phase, four, staff):
    FinalSettings.objects.create(benchmark=phase, prize_positions=1)
    with pytest.raises(errors.InvalidParameter, match="ranks 1 to 1"):
        publish(phase, staff)
    assert set(EntryReview.objects.values_list("entry_id", flat=True)) == {four["a"].pk}
    clear(four["a"], staff)
    publish(phase, staff)


def published_with_prizes_cleared(phase, four, staff) -> Standings:
    with pytest.raises(errors.InvalidParameter):
        publish(phase, staff)
    for name in ("a", "b", "c"):
        clear(four[name], staff)
    return publish(phase, staff)


def test_a_correction_waits_for_a_new_prize_row_and_keeps_the_old_digest(phase, four, staff):
    standings = published_with_prizes_cleared(phase, four, staff)
    first = standings.digest
    with pytest.raises(errors.InvalidParameter, match="Nothing would change"):
        standings_correct(benchmark=phase, actor=staff, reason="check")
    # The grader's fault on team-d's final score is fixed: it now comes first.
    FinalScore.objects.filter(entry=four["d"]).update(score=0.05)
    with pytest.raises(errors.InvalidParameter, match=r"rank 1, team-d"):
        standings_correct(benchmark=phase, actor=staff, reason="regraded")
    assert not Correction.objects.exists()
    assert Standings.objects.get(pk=standings.pk).digest == first
    clear(four["d"], staff)
    correction = standings_correct(benchmark=phase, actor=staff, reason="regraded")
    standings.refresh_from_db()
    assert correction.previous_digest == first and correction.digest == standings.digest != first
    found = published_scores(phase)
    assert found is not None
    assert [r.team for r in found.rows] == ["team-d", "team-a", "team-b", "team-c"]
    assert standings.digest == "sha256:" + hashlib.sha256(found.csv.encode()).hexdigest()
    event = AuditEvent.objects.get(action="standings.corrected")
    assert event.details == {"previous_digest": first, "digest": standings.digest}


def test_the_standings_page_lists_each_correction_with_both_digests(phase, four, staff, client):
    standings = published_with_prizes_cleared(phase, four, staff)
    first = standings.digest
    FinalScore.objects.filter(entry=four["d"]).update(score=0.05)
    with pytest.raises(errors.InvalidParameter):  # opens team-d's review before prizes
        standings_correct(benchmark=phase, actor=staff, reason="regraded after a grader fault")
    clear(four["d"], staff)
    standings_correct(benchmark=phase, actor=staff, reason="regraded after a grader fault")
    standings.refresh_from_db()

    page = client.get(reverse("contests:standings", kwargs={"slug": phase.slug}))

    text = page.content.decode()
    assert 'id="corrections"' in text
    assert "regraded after a grader fault" in text
    assert f"digest before: <code>{first}</code>, after: <code>{standings.digest}</code>" in text


def test_the_frozen_rows_do_not_follow_later_changes(phase, four, staff):
    published_with_prizes_cleared(phase, four, staff)
    before = published_scores(phase)
    FinalScore.objects.filter(entry=four["c"]).update(score=0.01)
    type(four["a"].team).objects.filter(pk=four["a"].team_id).update(name="renamed")
    after = published_scores(phase)
    assert before is not None and after is not None
    assert after.rows == before.rows and after.csv == before.csv


def test_the_canonical_csv_neutralises_formulas_and_is_the_digest():
    rows = [rules.StandingScore(rank=1, team="=SUM(A1)", entrant="eve", entry_id=7, score=0.125)]
    text = rules.standings_csv(rows)
    assert text == "rank,team,entrant,entry_id,score\n1,'=SUM(A1),eve,7,0.125\n"
    assert rules.standings_digest(rows) == "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def test_the_api_page_and_exports_show_the_scores_and_verify(
    phase, four, staff, client, client_for
):
    base = f"/api/v1/benchmarks/{phase.slug}/"
    assert client.get(f"{base}standings/").status_code == 404
    assert client.get(f"{base}standings.csv").status_code == 404
    refused = client_for(staff).post(f"{base}standings/publish/", {"reason": "results"})
    assert refused.status_code == 400
    assert refused.json()["code"] == "invalid_parameter"
    assert "rank 1, team-a" in refused.json()["detail"]
    assert nothing_published(phase)
    for name in ("a", "b", "c"):
        clear(four[name], staff)
    answer = client_for(staff).post(f"{base}standings/publish/", {"reason": "results"})
    assert answer.status_code == 201, answer.content
    body = client.get(f"{base}standings/").json()
    assert body["source"] == "estimation_final" and body["state"] == "final"
    assert body["rows"][0] == {
        "rank": 1,
        "team": "team-a",
        "entrant": "user-a",
        "entry_id": four["a"].pk,
        "score": 0.1,
        "review": "cleared",
    }
    assert "wall_time_ns" not in body["rows"][0]
    csv = client.get(f"{base}standings.csv")
    assert csv.content.decode().splitlines()[0] == "rank,team,entrant,entry_id,score"
    digest = "sha256:" + hashlib.sha256(csv.content).hexdigest()
    assert digest == body["digest"] == csv["X-Podium-Digest"]
    exported = json.loads(client.get(f"{base}standings.json").content)
    assert exported["digest"] == digest and exported["rows"] == body["rows"]
    page = client.get(reverse("contests:standings", kwargs={"slug": phase.slug}))
    text = page.content.decode()
    assert page.status_code == 200 and "final score" in text and body["digest"] in text
    assert "team-a" in text and "cleared" in text
    detail = client.get(reverse("contests:benchmark_detail", kwargs={"slug": phase.slug}))
    assert body["digest"] in detail.content.decode()


def test_the_admin_clears_with_a_reason_and_publishes(phase, four, staff, client):
    client.force_login(staff)
    with pytest.raises(errors.InvalidParameter):
        publish(phase, staff)
    url = reverse("admin:estimation_entryreview_changelist")
    ids = list(EntryReview.objects.values_list("pk", flat=True))
    asked = client.post(url, {"action": "clear", "_selected_action": ids})
    assert 'name="reason"' in asked.content.decode()
    assert not EntryReview.objects.filter(status=EntryReview.CLEARED).exists()
    done = client.post(
        url,
        {"action": "clear", "_selected_action": ids, "apply": "yes", "reason": "source read"},
        follow=True,
    )
    assert "Decided 3 review(s)." in done.content.decode()
    assert EntryReview.objects.filter(status=EntryReview.CLEARED).count() == 3
    settings = FinalSettings.objects.create(benchmark=phase)
    client.post(
        reverse("admin:standings_finalsettings_changelist"),
        {
            "action": "publish",
            "_selected_action": [settings.pk],
            "apply": "yes",
            "reason": "results day",
        },
        follow=True,
    )
    assert Standings.objects.get(benchmark=phase).source == Standings.ESTIMATION_FINAL


def test_staff_without_the_decide_permission_see_no_action(phase, four, staff, client):
    with pytest.raises(errors.InvalidParameter):
        publish(phase, staff)
    clerk = factories.UserFactory(username="clerk", is_staff=True)
    clerk.user_permissions.add(Permission.objects.get(codename="view_entryreview"))
    client.force_login(clerk)
    page = client.get(reverse("admin:estimation_entryreview_changelist"))
    assert page.status_code == 200
    assert 'value="clear"' not in page.content.decode()


def test_the_final_rerun_endpoint_marks_a_disqualified_entry(phase, four, staff, client):
    with pytest.raises(errors.InvalidParameter):
        publish(phase, staff)
    disqualify(four["a"], staff)
    body = client.get(f"/api/v1/benchmarks/{phase.slug}/estimation/final/").json()
    row = next(r for r in body["rows"] if r["entry"] == four["a"].pk)
    assert (row["rank"], row["status"]) == (None, "disqualified")
    assert [r["team"] for r in body["rows"] if r["rank"]] == ["team-b", "team-c", "team-d"]


def test_the_reviewer_reads_the_estimator_with_a_reason_audited(phase, four, staff, client):
    archive = services.archive_path(four["a"])
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"the estimator's tarball")
    with pytest.raises(errors.InvalidParameter):
        publish(phase, staff)
    review = EntryReview.objects.get(entry=four["a"])
    client.force_login(staff)
    page = client.get(reverse("admin:estimation_entryreview_change", args=[review.pk]))
    url = reverse("admin:estimation_entryreview_archive", args=[review.pk])
    assert url in page.content.decode()
    asked = client.get(url)
    assert 'name="reason"' in asked.content.decode()
    assert not AuditEvent.objects.filter(action="estimation.source.download").exists()
    served = client.post(url, {"apply": "yes", "reason": "review before prizes"})
    assert b"".join(served.streaming_content) == b"the estimator's tarball"
    event = AuditEvent.objects.get(action="estimation.source.download")
    assert event.reason == "review before prizes"
    assert event.target == f"estimation_entry:{four['a'].pk}"
    clerk = factories.UserFactory(username="clerk", is_staff=True)
    clerk.user_permissions.add(Permission.objects.get(codename="view_entryreview"))
    client.force_login(clerk)
    assert client.post(url, {"apply": "yes", "reason": "curious"}).status_code == 403
    page = client.get(reverse("admin:estimation_entryreview_change", args=[review.pk]))
    assert page.status_code == 200 and url not in page.content.decode()
    assert AuditEvent.objects.filter(action="estimation.source.download").count() == 1


def test_the_standings_page_is_provisional_after_the_close_until_published(phase, four, client):
    page = client.get(reverse("contests:standings", kwargs={"slug": phase.slug}))
    text = page.content.decode()
    assert page.status_code == 200 and "provisional" in text
    assert "review of the entries in a prize position" in text
    assert "cohort" not in text  # an estimation phase has suites, not cohorts
