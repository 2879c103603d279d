"""``podium nominations``, ``podium nominate`` and ``podium standings``."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from portal.contests.models import Benchmark
from portal.core import errors
from portal.estimation.models import Entry, EntryReview, FinalScore, Suite
from portal.estimation.standings import entry_review_decide
from portal.standings.models import Nomination
from portal.standings.publishing import standings_publish
from tests import factories
from tests.cli.conftest import Podium
from tests.web.boards import official_run


@pytest.fixture
def closing(db: Any) -> Any:
    now = timezone.now()
    return factories.BenchmarkFactory(
        opens_at=now - dt.timedelta(days=5), closes_at=now + dt.timedelta(hours=1)
    )


@pytest.fixture
def closed(db: Any) -> Any:
    now = timezone.now()
    return factories.BenchmarkFactory(
        opens_at=now - dt.timedelta(days=5), closes_at=now - dt.timedelta(hours=1)
    )


def test_nominating_two_then_the_default(
    server: str, closing: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str]
) -> None:
    sign_in(alice)
    slow = official_run(closing, alice, 300).submission
    fast = official_run(closing, alice, 100).submission

    shown = podium("nominations", closing.slug)
    assert shown.code == 0, shown.err
    assert "Nominations are open" in shown.out
    assert f"Eligible (your passing official submissions, best first): {fast.pk}, {slow.pk}" in (
        shown.out
    )

    named = podium("nominate", closing.slug, str(slow.pk))
    assert named.code == 0, named.err
    assert f"Nominated: {slow.pk}" in named.out
    assert list(Nomination.objects.values_list("submission_id", flat=True)) == [slow.pk]

    back = podium("nominate", closing.slug, "--default")
    assert back.code == 0, back.err
    assert "Nominated: none" in back.out and "your two best" in back.out
    assert not Nomination.objects.exists()


def test_nominating_anothers_submission_is_refused_and_changes_nothing(
    server: str, closing: Any, alice: Any, bob: Any, podium: Podium, sign_in: Callable[[Any], str]
) -> None:
    sign_in(alice)
    theirs = official_run(closing, bob, 100).submission
    refused = podium("nominate", closing.slug, str(theirs.pk))
    assert refused.code == 2
    assert "podium:" in refused.err
    assert not Nomination.objects.exists()
    both = podium("nominate", closing.slug, str(theirs.pk), "--default")
    assert both.code == 2 and "not both" in both.err


def test_a_member_names_a_teammates_submission_for_the_team_and_the_other_sees_who(
    server: str, closing: Any, alice: Any, bob: Any, podium: Podium, sign_in: Callable[[Any], str]
) -> None:
    from portal.teams import services as teams

    teams.team_create(user=alice, benchmark=closing, name="Night Owls")
    invitation = teams.team_invite(user=alice, benchmark=closing, username="bob")
    teams.invitation_accept(user=bob, invitation_id=invitation.pk)
    his = official_run(closing, bob, 100).submission
    official_run(closing, alice, 200)

    sign_in(alice)
    named = podium("nominate", closing.slug, str(his.pk))
    assert named.code == 0, named.err
    assert "Nominations are team Night Owls's" in named.out
    assert f"Nominated: {his.pk} (by alice, " in named.out
    sign_in(bob)
    shown = podium("nominations", closing.slug)
    assert shown.code == 0, shown.err
    assert f"Nominated: {his.pk} (by alice, " in shown.out
    assert f"Counted: {his.pk}\n" in shown.out


def test_standings_print_with_their_digest_and_the_csv_is_checked(
    server: str, closed: Any, alice: Any, bob: Any, staff: Any, podium: Podium, tmp_path: Path
) -> None:
    none_yet = podium("--url", server, "standings", closed.slug)
    assert none_yet.code == 2 and "No final standings" in none_yet.err

    official_run(closed, alice, 200, at=closed.closes_at - dt.timedelta(hours=2))
    official_run(closed, bob, 100, at=closed.closes_at - dt.timedelta(hours=2))
    published = standings_publish(benchmark=closed, actor=staff, reason="results")

    target = tmp_path / "final.csv"
    shown = podium("--url", server, "standings", closed.slug, "--csv", str(target))
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("RANK"))
    assert [line.split()[:2] for line in lines[header + 1 : header + 3]] == [
        ["1", "bob"],
        ["2", "alice"],
    ]
    assert f"Digest: {published.digest}" in shown.out
    assert "sha256:" + hashlib.sha256(target.read_bytes()).hexdigest() == published.digest


def test_a_csv_that_is_not_the_published_one_is_not_saved(
    server: str,
    closed: Any,
    alice: Any,
    staff: Any,
    podium: Podium,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    official_run(closed, alice, 200, at=closed.closes_at - dt.timedelta(hours=2))
    standings_publish(benchmark=closed, actor=staff, reason="results")
    from podium_cli.api import Client

    real = Client.get_bytes

    def tampered(self: Client, path: str) -> Any:
        body, headers = real(self, path)
        return body.replace(b"alice", b"mallory"), headers

    monkeypatch.setattr(Client, "get_bytes", tampered)
    target = tmp_path / "final.csv"
    shown = podium("--url", server, "standings", closed.slug, "--csv", str(target))
    assert shown.code == 2 and "not the published digest" in shown.err
    assert not target.exists()


def test_a_metered_estimation_phases_standings_print_their_scores(
    server: str, alice: Any, staff: Any, podium: Podium, tmp_path: Path
) -> None:
    now = timezone.now()
    phase = factories.BenchmarkFactory(
        kind=Benchmark.ESTIMATION,
        opens_at=now - dt.timedelta(days=5),
        closes_at=now - dt.timedelta(hours=1),
        attempt_timezone="UTC",
    )
    factories.PhaseRulesFactory(benchmark=phase)
    suite = factories.SuiteFactory(benchmark=phase, role=Suite.FINAL)
    entry = factories.EntryFactory(
        benchmark=phase, entrant=alice, status=Entry.GRADED, public_score=0.5
    )
    FinalScore.objects.create(
        entry=entry, suite=suite, status=Entry.GRADED, score=0.125, queued_at=now
    )
    with pytest.raises(errors.InvalidParameter, match="not cleared by review"):
        standings_publish(benchmark=phase, actor=staff, reason="results")
    entry_review_decide(
        review=EntryReview.objects.get(entry=entry), actor=staff, decision="cleared", reason="ok"
    )
    published = standings_publish(benchmark=phase, actor=staff, reason="results")

    target = tmp_path / "final.csv"
    shown = podium("--url", server, "standings", phase.slug, "--csv", str(target))
    assert shown.code == 0, shown.err
    assert "from the final rerun of the estimators" in shown.out
    lines = shown.out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("RANK"))
    assert "FINAL SCORE" in lines[header]
    assert lines[header + 1].split() == ["1", "alice", "0.125", str(entry.pk)]
    assert "sha256:" + hashlib.sha256(target.read_bytes()).hexdigest() == published.digest
