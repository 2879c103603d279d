"""Metered estimation's API (docs/api.md, "Metered estimation"): the phase, entries (upload,
every refusal charging nothing, the team's UTC day), what another team sees, the withheld
half before and after the close, nominations, the board, the final rerun, the suite."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.utils import timezone
from rest_framework.test import APIClient

from portal.contests.models import Benchmark
from portal.core import storage
from portal.core.task_names import ESTIMATION_GRADE
from portal.estimation import services
from portal.estimation.models import Entry, PhaseRules, Suite
from portal.teams import services as teams
from tests import factories
from tests.api.conftest import HOSTILE

Client = Callable[[Any], APIClient]


def _url(benchmark: Benchmark, rest: str = "") -> str:
    return f"/api/v1/benchmarks/{benchmark.slug}/estimation/{rest}"


def _entry_url(entry_id: int, rest: str = "") -> str:
    return f"/api/v1/estimation/entries/{entry_id}/{rest}"


def _entry_files(data_dir: Path) -> list[Path]:
    return sorted(p for p in (data_dir / "estimation" / "entries").rglob("*") if p.is_file())


def _team(benchmark: Benchmark, *members: Any, name: str = "T") -> Any:
    captain, *others = members
    team = teams.team_create(user=captain, benchmark=benchmark, name=name)
    for member in others:
        invitation = teams.team_invite(user=captain, benchmark=benchmark, username=member.username)
        teams.invitation_accept(user=member, invitation_id=invitation.pk)
    return team


# The phase ------------------------------------------------------------------------------


def test_the_phase_gives_its_rules_the_allowance_and_the_suites(
    phase: Benchmark, alice: Any, client_for: Client
) -> None:
    response = client_for(alice).get(_url(phase))

    assert response.status_code == 200, response.content
    data = response.json()
    rules = data["rules"]
    assert (rules["width"], rules["depth"], rules["flop_budget"]) == (8, 2, 1_000_000)
    assert rules["residual_rule"] == "capped"
    assert rules["residual_cap_ms"] == 400
    assert rules["lambda_flops_per_second"] == 1e11
    assert (rules["wall_cap_s"], rules["entrant_cores"]) == (120, 1)
    assert rules["memory_bytes"] == phase.run_memory_bytes
    assert (rules["attempts_per_day"], rules["attempt_timezone"]) == (2, "UTC")
    assert (rules["public_mlps"], rules["withheld_mlps"], rules["final_mlps"]) == (2, 2, 4)
    assert rules["versions"] == {"whestbench": "0.16.2", "flopscope": "0.12.4"}
    assert rules["max_archive_bytes"] == 50 * 1024 * 1024
    assert any("above 400 ms" in sentence for sentence in rules["summary"])
    assert data["quota"]["used_today"] == 0
    assert data["quota"]["remaining_today"] == 2
    assert data["quota"]["timezone"] == "UTC"
    assert [(s["role"], s["status"], s["n_mlps"]) for s in data["suites"]] == [
        ("phase", "ready", 4),
        ("public", "ready", 4),
    ]
    assert not any("seed" in key for suite in data["suites"] for key in suite)


def test_the_priced_rule_gives_its_lambda_and_no_cap(
    phase: Benchmark, alice: Any, client_for: Client
) -> None:
    PhaseRules.objects.filter(benchmark=phase).update(
        residual_rule=PhaseRules.PRICED, lambda_flops_per_second=2e10
    )

    rules = client_for(alice).get(_url(phase)).json()["rules"]

    assert (rules["residual_rule"], rules["residual_cap_ms"]) == ("priced", None)
    assert any("charged at 2e+10 FLOPs per second" in s for s in rules["summary"])


def test_estimation_routes_do_not_exist_under_another_kind_of_benchmark(
    benchmark: Benchmark, alice: Any, client_for: Client, anon: APIClient, whest_tarball: Path,
    enter: Callable[..., Any],
) -> None:  # fmt: skip
    client = client_for(alice)
    for response in [
        client.get(_url(benchmark)),
        client.get(_url(benchmark, "entries/")),
        enter(client, benchmark, whest_tarball),
        anon.get(_url(benchmark, "board/")),
        anon.get(_url(benchmark, "final/")),
        client.get(_url(benchmark, "suite/")),
    ]:
        assert response.status_code == 404, response.content
        assert response.json()["code"] == "not_found"
    assert not Entry.objects.exists()


def test_the_phase_needs_a_signed_in_caller(phase: Benchmark, anon: APIClient) -> None:
    for path in ("", "entries/", "suite/"):
        response = anon.get(_url(phase, path))
        assert response.status_code == 401
        assert response.json()["code"] == "not_authenticated"


# Entering -------------------------------------------------------------------------------


def test_an_entry_is_accepted_charged_and_queued(
    phase: Benchmark,
    alice: Any,
    client_for: Client,
    whest_tarball: Path,
    enter: Callable[..., Any],
    sent: list[tuple[str, tuple[Any, ...]]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    client = client_for(alice)

    with django_capture_on_commit_callbacks(execute=True):
        response = enter(client, phase, whest_tarball)

    assert response.status_code == 201, response.content
    data = response.json()
    entry = Entry.objects.get(pk=data["id"])
    assert entry.entrant == alice
    assert data["status"] == "accepted"
    assert data["estimator_class"] == "estimator.Estimator"
    assert data["archive_name"] == whest_tarball.name
    digest = hashlib.sha256(whest_tarball.read_bytes()).hexdigest()
    assert data["archive_sha256"] == f"sha256:{digest}"
    assert data["mlps"] == [] and data["withheld_score"] is None and data["fallbacks"] is None
    assert services.archive_path(entry).read_bytes() == whest_tarball.read_bytes()
    assert sent == [(ESTIMATION_GRADE, (entry.pk,))]
    assert client.get(_url(phase)).json()["quota"]["used_today"] == 1
    assert [row["id"] for row in client.get(_url(phase, "entries/")).json()] == [entry.pk]


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_archive_is_refused_and_charges_nothing(
    phase: Benchmark,
    alice: Any,
    client_for: Client,
    hostile_tarball: Callable[[str], Path],
    enter: Callable[..., Any],
    data_dir: Path,
    sent: list[tuple[str, tuple[Any, ...]]],
    kind: str,
) -> None:
    response = enter(client_for(alice), phase, hostile_tarball(kind))

    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_archive"
    assert response.json()["detail"]
    assert not Entry.objects.exists()
    assert _entry_files(data_dir) == []
    assert sent == []


def test_a_sha256_mismatch_is_named(
    phase: Benchmark, alice: Any, client_for: Client, hostile_tarball: Callable[[str], Path],
    enter: Callable[..., Any],
) -> None:  # fmt: skip
    detail = enter(client_for(alice), phase, hostile_tarball("sha256_mismatch")).json()["detail"]

    assert "estimator.py" in detail and "sha256" in detail.lower()


def test_an_archive_over_the_benchmarks_bound_is_refused_unread(
    phase: Benchmark, alice: Any, client_for: Client, whest_tarball: Path,
    enter: Callable[..., Any], data_dir: Path,
) -> None:  # fmt: skip
    Benchmark.objects.filter(pk=phase.pk).update(max_upload_bytes=100)

    response = enter(client_for(alice), phase, whest_tarball)

    assert response.status_code == 413
    assert response.json()["code"] == "archive_too_large"
    assert "100 bytes" in response.json()["detail"]
    assert not Entry.objects.exists()
    assert _entry_files(data_dir) == []


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"opens_at": dt.timedelta(days=1)}, 409, "window_not_open"),
        ({"closes_at": dt.timedelta(days=-1)}, 409, "window_closed"),
    ],
)
def test_an_entry_outside_the_window_is_refused(
    phase: Benchmark, alice: Any, client_for: Client, whest_tarball: Path,
    enter: Callable[..., Any], data_dir: Path, change: dict[str, dt.timedelta], status: int,
    code: str,
) -> None:  # fmt: skip
    now = timezone.now()
    fields = {field: now + delta for field, delta in change.items()}
    if "closes_at" in fields:
        fields["opens_at"] = now - dt.timedelta(days=5)
    Benchmark.objects.filter(pk=phase.pk).update(**fields)

    response = enter(client_for(alice), phase, whest_tarball)

    assert (response.status_code, response.json()["code"]) == (status, code)
    assert not Entry.objects.exists()
    assert _entry_files(data_dir) == []


def test_an_entry_without_a_ready_phase_suite_is_refused(
    phase: Benchmark, alice: Any, client_for: Client, whest_tarball: Path,
    enter: Callable[..., Any], data_dir: Path,
) -> None:  # fmt: skip
    Suite.objects.filter(benchmark=phase, role=Suite.PHASE).update(status=Suite.GENERATING)

    response = enter(client_for(alice), phase, whest_tarball)

    assert (response.status_code, response.json()["code"]) == (409, "no_cohort")
    assert "nothing was charged" in response.json()["detail"]
    assert not Entry.objects.exists()
    assert _entry_files(data_dir) == []


def test_an_unverified_address_is_refused(
    phase: Benchmark, client_for: Client, whest_tarball: Path, enter: Callable[..., Any],
    data_dir: Path,
) -> None:  # fmt: skip
    carol = factories.UserFactory(username="carol", email_verified=False)

    response = enter(client_for(carol), phase, whest_tarball)

    assert (response.status_code, response.json()["code"]) == (403, "email_not_verified")
    assert not Entry.objects.exists()
    assert _entry_files(data_dir) == []


def test_an_entry_without_an_archive_is_refused(
    phase: Benchmark, alice: Any, client_for: Client
) -> None:
    response = client_for(alice).post(_url(phase, "entries/"), {}, format="multipart")

    assert (response.status_code, response.json()["code"]) == (400, "invalid_parameter")
    assert not Entry.objects.exists()


def test_a_session_upload_without_the_csrf_token_is_refused(
    phase: Benchmark, alice: Any, whest_tarball: Path
) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(alice)

    with whest_tarball.open("rb") as handle:
        response = client.post(_url(phase, "entries/"), {"archive": handle}, format="multipart")

    assert (response.status_code, response.json()["code"]) == (403, "csrf_failed")
    assert not Entry.objects.exists()


# The team's UTC day ---------------------------------------------------------------------


def test_two_members_share_their_teams_two_a_day_and_the_utc_day_resets_it(
    phase: Benchmark, alice: Any, bob: Any, client_for: Client, whest_tarball: Path,
    enter: Callable[..., Any], data_dir: Path,
) -> None:  # fmt: skip
    _team(phase, alice, bob)
    late = dt.datetime.combine(timezone.now().date(), dt.time(23, 59), tzinfo=dt.UTC)
    with time_machine.travel(late, tick=False):
        first = enter(client_for(alice), phase, whest_tarball)
        second = enter(client_for(bob), phase, whest_tarball)
        files = _entry_files(data_dir)
        third = enter(client_for(alice), phase, whest_tarball)
        quota = client_for(bob).get(_url(phase)).json()["quota"]

    assert [first.status_code, second.status_code] == [201, 201]
    assert (third.status_code, third.json()["code"]) == (429, "quota_exhausted")
    assert "Your team has used all 2" in third.json()["detail"]
    assert Entry.objects.count() == 2
    assert _entry_files(data_dir) == files
    assert (quota["used_today"], quota["remaining_today"]) == (2, 0)
    assert quota["resets_at"] == (late + dt.timedelta(minutes=1)).isoformat()
    with time_machine.travel(late + dt.timedelta(minutes=1), tick=False):
        fourth = enter(client_for(alice), phase, whest_tarball)
    assert fourth.status_code == 201
    assert set(Entry.objects.values_list("team__name", flat=True)) == {"T"}


def test_a_refunded_entry_is_not_counted(
    phase: Benchmark, alice: Any, client_for: Client, whest_tarball: Path,
    enter: Callable[..., Any],
) -> None:  # fmt: skip
    client = client_for(alice)
    ids = [enter(client, phase, whest_tarball).json()["id"] for _ in "ab"]
    services.entry_fail(ids[0], "the host failed", refund=True)

    response = enter(client, phase, whest_tarball)

    assert response.status_code == 201
    assert client.get(_url(phase)).json()["quota"]["used_today"] == 2


# What each caller sees ------------------------------------------------------------------


def test_another_teams_entry_is_not_found_until_it_is_on_the_board(
    phase: Benchmark, alice: Any, bob: Any, client_for: Client
) -> None:
    entry = factories.EntryFactory(benchmark=phase, entrant=alice)
    bobs = client_for(bob)

    hidden = bobs.get(_entry_url(entry.pk))
    assert (hidden.status_code, hidden.json()["code"]) == (404, "not_found")
    assert bobs.get(_url(phase, "entries/")).json() == []

    services.entry_claim(entry.pk, "host-1")
    services.entry_record(entry.pk, factories.whest_grade([0.5, 0.7, 0.9, 1.1]))
    shown = bobs.get(_entry_url(entry.pk)).json()

    assert shown["rank"] == 1 and shown["entry"] == entry.pk
    assert shown["public_score"] == pytest.approx(0.6)
    assert shown["withheld_score"] is None
    for private in ("mlps", "archive_name", "archive_sha256", "estimator_class", "status"):
        assert private not in shown


def test_a_teammates_entry_is_shown_in_full(
    phase: Benchmark, alice: Any, bob: Any, client_for: Client
) -> None:
    _team(phase, alice, bob)
    entry = factories.EntryFactory(benchmark=phase, entrant=alice)

    response = client_for(bob).get(_entry_url(entry.pk))

    assert response.status_code == 200
    assert response.json()["archive_name"] == "submission.tar.gz"
    listed = client_for(bob).get(_url(phase, "entries/")).json()
    assert [row["id"] for row in listed] == [entry.pk]


def test_the_withheld_half_is_hidden_before_the_close_and_shown_after(
    phase: Benchmark, alice: Any, client_for: Client
) -> None:
    entry = factories.EntryFactory(benchmark=phase, entrant=alice)
    services.entry_claim(entry.pk, "host-1")
    services.entry_record(entry.pk, factories.whest_grade([0.5, 0.7, 0.9, 1.1], fallbacks=(3,)))
    client = client_for(alice)

    before = client.get(_entry_url(entry.pk)).json()
    board_before = client.get(_url(phase, "board/")).json()
    listed_before = client.get(_url(phase, "entries/")).json()[0]
    with time_machine.travel(phase.closes_at + dt.timedelta(seconds=1), tick=False):
        after = client.get(_entry_url(entry.pk)).json()
        board_after = client.get(_url(phase, "board/")).json()

    assert before["status"] == "graded"
    assert before["public_score"] == pytest.approx(0.6)
    assert before["withheld_score"] is None and listed_before["withheld_score"] is None
    assert before["withheld_shown"] is False
    assert [row["index"] for row in before["mlps"]] == [0, 1]
    assert before["fallbacks"] == 0  # the withheld MLP's fallback is not shown yet
    assert set(before["mlps"][0]) == {
        "index", "name", "final_layer_mse", "score", "flops_used", "residual_wall_time_s",
        "wall_time_s", "effective_compute", "fallback", "reason",
    }  # fmt: skip
    assert board_before["state"] == "live"
    assert board_before["rows"][0]["withheld_score"] is None
    assert board_before["rows"][0]["fallbacks"] == 0
    assert after["withheld_score"] == pytest.approx(1.0)
    assert after["withheld_shown"] is True
    assert [row["index"] for row in after["mlps"]] == [0, 1, 2, 3]
    assert after["mlps"][3]["fallback"] is True
    assert after["mlps"][3]["reason"] == "over the FLOP budget"
    assert after["fallbacks"] == 1
    assert board_after["state"] == "closed"
    assert board_after["rows"][0]["withheld_score"] == pytest.approx(1.0)


def test_the_entry_gives_seed_004s_ratio(phase: Benchmark, alice: Any, client_for: Client) -> None:
    entry = factories.EntryFactory(benchmark=phase, entrant=alice)
    services.entry_claim(entry.pk, "host-1")
    # 1000 FLOPs and 1e-8 s residual per MLP at lambda 1e11: 1000 / (1000 + 1000).
    services.entry_record(entry.pk, factories.whest_grade([1, 1, 1, 1], residual_s=1e-8))

    data = client_for(alice).get(_entry_url(entry.pk)).json()

    assert data["ratio"] == pytest.approx(0.5)
    assert data["mean_flops"] == 1000


# Nominations ----------------------------------------------------------------------------


def test_a_team_nominates_at_most_its_limit_and_may_withdraw(
    phase: Benchmark, alice: Any, bob: Any, client_for: Client
) -> None:
    _team(phase, alice, bob)
    entries = []
    for scores in ([1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]):
        entry = factories.EntryFactory(benchmark=phase, entrant=alice)
        services.entry_claim(entry.pk, "host-1")
        entries.append(services.entry_record(entry.pk, factories.whest_grade(scores)))
    client = client_for(bob)

    def nominate(entry: Entry, value: bool) -> Any:
        return client.post(_entry_url(entry.pk, "nomination/"), {"nominated": value}, format="json")

    first, second = nominate(entries[0], True), nominate(entries[1], True)
    third = nominate(entries[2], True)

    assert [first.status_code, second.status_code] == [200, 200]
    assert first.json()["nominated"] is True
    assert (third.status_code, third.json()["code"]) == (400, "invalid_parameter")
    assert "nominated 2 entries already" in third.json()["detail"]
    withdrawn = nominate(entries[0], False)
    assert (withdrawn.status_code, withdrawn.json()["nominated"]) == (200, False)
    assert nominate(entries[2], True).status_code == 200
    assert set(Entry.objects.filter(nominated=True).values_list("pk", flat=True)) == {
        entries[1].pk, entries[2].pk,
    }  # fmt: skip


def test_an_ungraded_or_another_teams_entry_is_not_nominated(
    phase: Benchmark, alice: Any, bob: Any, client_for: Client
) -> None:
    entry = factories.EntryFactory(benchmark=phase, entrant=alice)
    url = _entry_url(entry.pk, "nomination/")

    ungraded = client_for(alice).post(url, {"nominated": True}, format="json")
    others = client_for(bob).post(url, {"nominated": True}, format="json")
    malformed = client_for(alice).post(url, {"nominated": "perhaps"}, format="json")

    assert (ungraded.status_code, ungraded.json()["code"]) == (400, "invalid_parameter")
    assert (others.status_code, others.json()["code"]) == (404, "not_found")
    assert (malformed.status_code, malformed.json()["code"]) == (400, "invalid_parameter")
    assert not Entry.objects.filter(nominated=True).exists()


# The board and the final rerun ----------------------------------------------------------


def test_the_board_ranks_each_teams_best_public_score_for_anyone(
    phase: Benchmark, alice: Any, bob: Any, anon: APIClient
) -> None:
    for entrant, scores in [(alice, [2, 2, 0, 0]), (alice, [1, 1, 9, 9]), (bob, [1.5, 1.5, 0, 0])]:
        entry = factories.EntryFactory(benchmark=phase, entrant=entrant)
        services.entry_claim(entry.pk, "host-1")
        services.entry_record(entry.pk, factories.whest_grade(scores))

    board = anon.get(_url(phase, "board/")).json()

    assert [(r["rank"], r["entrant"], r["public_score"]) for r in board["rows"]] == [
        (1, "alice", 1.0),
        (2, "bob", 1.5),
    ]
    assert all(r["withheld_score"] is None for r in board["rows"])
    assert all(r["ratio_outlier"] is False for r in board["rows"])


def test_a_ratio_far_under_the_median_is_flagged(phase: Benchmark, anon: APIClient) -> None:
    for i, residual in enumerate([1e-8, 1e-8, 1e-3]):  # ratios 0.5, 0.5, 1e-5
        entry = factories.EntryFactory(
            benchmark=phase, entrant=factories.UserFactory(username=f"u{i}")
        )
        services.entry_claim(entry.pk, "host-1")
        services.entry_record(entry.pk, factories.whest_grade([1, 1, 1, 1], residual_s=residual))

    rows = anon.get(_url(phase, "board/")).json()["rows"]

    assert [r["ratio_outlier"] for r in rows] == [False, False, True]


def test_the_final_standings_follow_the_rerun(
    phase: Benchmark, alice: Any, bob: Any, anon: APIClient, staff: Any
) -> None:
    assert anon.get(_url(phase, "final/")).json() == {"state": "not_started", "rows": []}
    for entrant in (alice, bob):
        entry = factories.EntryFactory(benchmark=phase, entrant=entrant)
        services.entry_claim(entry.pk, "host-1")
        services.entry_record(entry.pk, factories.whest_grade([1, 1, 1, 1]))
    factories.SuiteFactory(benchmark=phase, role=Suite.FINAL)
    finals = services.final_start(
        benchmark=phase, user=staff, now=phase.closes_at + dt.timedelta(seconds=1)
    )
    running = anon.get(_url(phase, "final/")).json()
    for final, score in zip(finals, [0.9, 0.4], strict=True):
        services.final_claim(final.pk)
        services.final_record(final.pk, factories.whest_grade([score] * 4))

    done = anon.get(_url(phase, "final/")).json()

    assert running["state"] == "running"
    assert {r["status"] for r in running["rows"]} == {"accepted"}
    assert done["state"] == "complete"
    assert [(r["rank"], r["score"]) for r in done["rows"]] == [(1, 0.4), (2, 0.9)]


# The public suite -----------------------------------------------------------------------


def test_the_public_suite_downloads_into_a_folder_whestbench_loads(
    phase: Benchmark, alice: Any, client_for: Client, tmp_path: Path
) -> None:
    import whestbench

    response = client_for(alice).get(_url(phase, "suite/"))

    assert response.status_code == 200
    assert response["Content-Type"] == "application/gzip"
    assert f"{phase.slug}-public-suite.tar.gz" in response["Content-Disposition"]
    body = b"".join(response.streaming_content)
    folder = tmp_path / "suite"
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as archive:
        assert {m.uid for m in archive.getmembers()} == {0}
        archive.extractall(folder, filter="data")
    dataset = whestbench.load_dataset(str(folder))
    assert len(dataset) == 4
    assert whestbench.metadata(dataset)["width"] == 8
    again = b"".join(client_for(alice).get(_url(phase, "suite/")).streaming_content)
    assert again == body  # built once, then served as a file


def test_no_ready_public_suite_is_no_cohort(
    phase: Benchmark, alice: Any, client_for: Client
) -> None:
    Suite.objects.filter(benchmark=phase, role=Suite.PUBLIC).update(status=Suite.GENERATING)

    response = client_for(alice).get(_url(phase, "suite/"))

    assert (response.status_code, response.json()["code"]) == (409, "no_cohort")
    assert not (storage.data_dir() / "estimation" / "downloads").exists()
