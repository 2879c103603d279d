"""The pages of a metered-estimation phase: the benchmark page (rules, quota, upload form,
the team's entries, board, chart, final standings), every refusal of the upload shown on
its form with nothing charged, an entry's page (its ledger to its team, its board figures
to others, withheld data only after the close) and nominations."""

from __future__ import annotations

import datetime as dt
import io
import re
import tarfile
import zipfile
from pathlib import Path

import pytest
from allauth.account.models import EmailAddress
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone

from portal.core import storage
from portal.core.task_names import ESTIMATION_GRADE
from portal.estimation import services
from portal.estimation.models import Entry, FinalScore, PhaseRules, Suite
from portal.web.estimation_chart import TIMES as X
from tests import factories
from tests.web.estimation_entries import (
    accepted,
    grade,
    graded,
    mlp,
    ready_suite,
)
from tests.whest import whest_bake, whest_package


@pytest.fixture(scope="session")
def tarball(tmp_path_factory) -> Path:
    """A real ``whest package`` tarball (made once per test process)."""
    return whest_package(tmp_path_factory.mktemp("estimator"))


@pytest.fixture
def phase(db) -> PhaseRules:
    return factories.PhaseRulesFactory(benchmark__attempts_per_day=10)


@pytest.fixture
def bench(phase):
    return phase.benchmark


def page_of(bench) -> str:
    return reverse("contests:benchmark_detail", kwargs={"slug": bench.slug})


def upload_url(bench) -> str:
    return reverse("contests:estimation_upload", kwargs={"slug": bench.slug})


def entry_url(entry) -> str:
    return reverse("contests:estimation_entry", kwargs={"pk": entry.pk})


def upload(path: Path, name: str = "sub.tar.gz") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, path.read_bytes(), content_type="application/gzip")


def text(response) -> str:
    """The page's text without its tags, whitespace collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())


# The benchmark page ---------------------------------------------------------------------


def test_the_page_states_the_phases_rules_in_words(client, bench):
    page = client.get(page_of(bench))

    assert page.status_code == 200
    words = text(page)
    assert "8 wide with 2 hidden layers" in words
    assert f"B = 1 {X} 10⁶ FLOPs per MLP" in words
    assert "capped at 400 ms per MLP; over the cap fails the MLP" in words
    assert "120 s per MLP" in words
    assert "1 physical core with 8 GiB of memory" in words
    assert "10 entries per team (or lone entrant) per UTC day" in words
    assert "2 public MLPs score the live board; 2 more are withheld" in words
    assert f"s m = MSE final,m {X} max(0.1, C m / B m )" in words
    assert "the zero prediction" in words and "the factor is 1" in words
    assert "fresh private suite of 4 MLPs generated from held-out seeds" in words
    assert "Sign in" in words and 'name="estimator"' not in page.content.decode()


def test_a_priced_phase_states_lambda(client, phase):
    PhaseRules.objects.filter(pk=phase.pk).update(residual_rule=PhaseRules.PRICED)

    words = text(client.get(page_of(phase.benchmark)))

    assert f"priced at λ = 1 {X} 10¹¹ FLOPs per second" in words
    assert "capped at" not in words


def test_a_signed_in_entrant_sees_the_quota_and_the_upload_form(client, alice, bench):
    ready_suite(bench)
    accepted(bench, alice)
    client.force_login(alice)

    page = client.get(page_of(bench))

    words = text(page)
    assert "9 of 10 entries left today for you (1 used); the day is the UTC day" in words
    body = page.content.decode()
    assert f'action="{upload_url(bench)}"' in body
    assert 'type="file" name="estimator"' in body
    assert 'enctype="multipart/form-data"' in body
    assert f"podium run --local {bench.slug} submission.tar.gz" in words


def test_the_page_lists_the_teams_entries_with_status_score_and_link(client, alice, bob, bench):
    factories.team(bench, "Gauss", alice, bob)
    mine = graded(bench, alice, [1e-3, 2e-3, 5.0, 5.0])
    theirs = accepted(bench, bob)
    stranger = accepted(bench, factories.UserFactory(username="carol"))
    client.force_login(alice)

    page = client.get(page_of(bench))

    table = page.content.decode().split('id="entries"')[1].split("</table>")[0]
    assert f'href="{entry_url(mine)}"' in table and f'href="{entry_url(theirs)}"' in table
    assert f"#{stranger.pk}<" not in table
    assert "graded" in table and "accepted" in table and "bob" in table
    assert f"7.5 {X} 10⁻⁴" in table  # the public score: the mean of the public MLPs' s_m
    assert "Your team's entries" in text(page)


def test_a_phase_without_rules_says_so(client, benchmark):
    benchmark.kind = "estimation"
    benchmark.save()

    page = client.get(page_of(benchmark))

    assert page.status_code == 200
    assert "not published yet" in text(page)


# Uploads --------------------------------------------------------------------------------


def test_an_upload_is_accepted_charged_and_shown_on_its_page(
    client, alice, bench, tarball, sent, django_capture_on_commit_callbacks
):
    ready_suite(bench)
    client.force_login(alice)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(upload_url(bench), {"estimator": upload(tarball)})

    entry = Entry.objects.get()
    assert response.status_code == 302 and response["Location"] == entry_url(entry)
    assert entry.entrant == alice and entry.status == Entry.ACCEPTED
    assert entry.estimator_class == "estimator.Estimator"
    assert (storage.entry_dir(entry.pk) / "submission.tar.gz").read_bytes() == tarball.read_bytes()
    assert [name for name, _ in sent] == [ESTIMATION_GRADE]
    page = client.get(entry_url(entry))
    assert "Queued for grading" in text(page)
    assert "9 of 10 entries left today" in text(client.get(page_of(bench)))


def refused(client, bench, data, *, status: int) -> str:
    response = client.post(upload_url(bench), data)
    assert response.status_code == status
    assert Entry.objects.count() == 0
    assert not (storage.data_dir() / "estimation" / "entries").exists()
    body = response.content.decode()
    found = re.search(r'class="form-errors"[^>]*>(.*?)</div>', body, flags=re.S)
    errors = found.group(1) if found else ""
    assert 'name="estimator"' in body  # the form again, with the refusal on it
    return " ".join(re.sub(r"<[^>]+>", " ", errors).split()) or text(response)


def test_an_upload_without_a_ready_suite_is_refused(client, alice, bench, tarball):
    client.force_login(alice)

    words = refused(client, bench, {"estimator": upload(tarball)}, status=409)

    assert "no ready suite of MLPs yet" in words and "nothing was charged" in words


def test_an_upload_before_the_opening_is_refused(client, alice, bench, tarball):
    ready_suite(bench)
    bench.opens_at = timezone.now() + dt.timedelta(hours=2)
    bench.save()
    client.force_login(alice)

    words = refused(client, bench, {"estimator": upload(tarball)}, status=409)

    assert "Uploads open at" in words


def test_an_upload_after_the_close_is_refused(client, alice, bench, tarball):
    ready_suite(bench)
    bench.opens_at = timezone.now() - dt.timedelta(days=3)
    bench.closes_at = timezone.now() - dt.timedelta(hours=1)
    bench.save()
    client.force_login(alice)

    words = refused(client, bench, {"estimator": upload(tarball)}, status=409)

    assert "This benchmark has closed" in words


def test_an_upload_over_the_teams_daily_allowance_is_refused(client, alice, bob, bench, tarball):
    ready_suite(bench)
    bench.attempts_per_day = 1
    bench.save()
    factories.team(bench, "Gauss", alice, bob)
    accepted(bench, bob)  # the teammate's entry uses the team's day
    client.force_login(alice)

    response = client.post(upload_url(bench), {"estimator": upload(tarball)})

    assert response.status_code == 429
    assert Entry.objects.count() == 1
    assert "Your team has used all 1 submissions of today (UTC)" in text(response)


def test_a_file_that_is_not_a_tarball_is_refused(client, alice, bench):
    ready_suite(bench)
    client.force_login(alice)
    junk = SimpleUploadedFile("sub.tar.gz", b"this is not a gzip file")

    words = refused(client, bench, {"estimator": junk}, status=400)

    assert words == (
        "An estimator is the .tar.gz that `whest package` makes; this upload is not an archive."
    )


def test_a_zip_is_refused(client, alice, bench, tmp_path):
    ready_suite(bench)
    client.force_login(alice)
    path = tmp_path / "sub.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("estimator.py", "print('hello')\n")

    words = refused(client, bench, {"estimator": upload(path, "sub.zip")}, status=400)

    assert words.endswith("this upload is a zip archive.")


def test_a_tarball_that_whest_package_did_not_make_is_refused(client, alice, bench, tmp_path):
    ready_suite(bench)
    client.force_login(alice)
    path = tmp_path / "sub.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        body = b"print('hello')\n"
        info = tarfile.TarInfo("estimator.py")
        info.size = len(body)
        archive.addfile(info, io.BytesIO(body))

    words = refused(client, bench, {"estimator": upload(path)}, status=400)

    assert "whest validate-package refused it" in words


def test_an_upload_over_the_phases_bound_is_refused_unread(client, alice, bench, tarball):
    ready_suite(bench)
    bench.max_upload_bytes = 100
    bench.save()
    client.force_login(alice)

    words = refused(client, bench, {"estimator": upload(tarball)}, status=413)

    assert "100 bytes" in words


def test_an_upload_from_an_unverified_address_is_refused(client, alice, bench, tarball):
    ready_suite(bench)
    EmailAddress.objects.filter(user=alice).update(verified=False)
    client.force_login(alice)

    words = refused(client, bench, {"estimator": upload(tarball)}, status=403)

    assert "Verify your email address" in words


def test_an_upload_without_a_file_is_refused(client, alice, bench):
    ready_suite(bench)
    client.force_login(alice)

    response = client.post(upload_url(bench), {})

    assert response.status_code == 400 and Entry.objects.count() == 0
    assert "This field is required" in text(response)


def test_uploads_over_the_throttle_are_refused(client, alice, bench, tarball, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "uploads": "1/hour",
        },
    }
    client.force_login(alice)
    client.post(upload_url(bench), {"estimator": upload(tarball)})  # refused: no suite

    words = refused(client, bench, {"estimator": upload(tarball)}, status=429)

    assert "uploads in the last hour" in words


def test_signed_out_uploads_go_to_sign_in(client, bench, tarball):
    response = client.post(upload_url(bench), {"estimator": upload(tarball)})

    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert Entry.objects.count() == 0


def test_the_upload_url_of_another_kind_of_benchmark_is_404(client, alice, benchmark, tarball):
    client.force_login(alice)

    response = client.post(upload_url(benchmark), {"estimator": upload(tarball)})

    assert response.status_code == 404


# The board, the chart, the final standings ----------------------------------------------


def test_the_board_ranks_each_teams_best_and_withholds_until_the_close(client, alice, bob, bench):
    carol = factories.UserFactory(username="carol")
    factories.team(bench, "Gauss", alice, bob)
    graded(bench, alice, [4e-3, 4e-3, 1e-6, 1e-6])
    best = graded(bench, bob, [2e-3, 2e-3, 7.77e-7, 7.77e-7])
    solo = graded(bench, carol, [3e-3, 3e-3, 1e-6, 1e-6], failed="")

    page = client.get(page_of(bench))

    board = page.content.decode().split('id="board"')[1].split("</table>")[0]
    rows = re.findall(r'<tr id="rank-(\d+)".*?</tr>', board, flags=re.S)
    assert rows == ["1", "2"]  # the team once, with its best
    assert board.index("Gauss") < board.index("carol")
    assert f"#{best.pk}<" in board and f"#{solo.pk}<" in board
    assert "Withheld score" not in board and "3.89" not in board
    assert f"5 {X} 10⁵" in board  # mean FLOPs

    bench.closes_at = timezone.now() - dt.timedelta(minutes=1)
    bench.opens_at = timezone.now() - dt.timedelta(days=2)
    bench.save()
    closed = client.get(page_of(bench)).content.decode()
    board = closed.split('id="board"')[1].split("</table>")[0]
    assert "Withheld score" in board and f"3.89 {X} 10⁻⁷" in board  # 7.77e-7 x max(0.1, 0.5)


def test_the_board_flags_a_ratio_far_under_the_median(client, bench, phase):
    PhaseRules.objects.filter(pk=phase.pk).update(residual_rule=PhaseRules.PRICED)
    honest = [factories.UserFactory(username=f"honest{i}") for i in range(2)]
    for user in honest:
        graded(bench, user, [1e-3, 1e-3, 1e-3, 1e-3], lambda_flops_per_second=1e11, residual_s=1e-7)
    hidden = graded(
        bench,
        factories.UserFactory(username="offmeter"),
        [5e-4] * 4,
        flops=1_000,
        residual_s=1e-5,
        lambda_flops_per_second=1e11,
    )

    page = client.get(page_of(bench)).content.decode()

    board = page.split('id="board"')[1].split("</table>")[0]
    flagged = re.findall(r'<tr id="rank-\d+".*?</tr>', board, flags=re.S)
    assert [f"#{hidden.pk}<" in row for row in flagged] == [True, False, False]
    assert ["flagged" in row for row in flagged] == [True, False, False]
    note = text_of(page.split('id="ratio-note"')[1].split("</p>")[0])
    assert "under 10% of the board's median ratio" in note


def text_of(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_the_chart_shows_the_band_the_budget_and_the_viewers_entries(client, alice, bob, bench):
    ready_suite(bench)
    mine = graded(bench, alice, [1e-3] * 4)
    theirs = graded(bench, bob, [2e-3] * 4, flops=100_000)
    client.force_login(alice)

    body = client.get(page_of(bench)).content.decode()

    svg = body.split('<svg role="img"')[1].split("</svg>")[0]
    assert 'class="mc-band"' in svg and 'class="mc-median"' in svg
    assert 'class="budget-marker"' in svg
    assert f'class="entry-point own" data-entry="{mine.pk}"' in svg
    assert f'class="entry-point" data-entry="{theirs.pk}"' in svg
    assert f'href="{entry_url(mine)}"' in svg


def test_an_imported_suite_records_what_the_band_needs(client, bench, tmp_path_factory):
    dataset = whest_bake(tmp_path_factory.mktemp("suite") / "dataset")

    suite = services.suite_import(benchmark=bench, role=Suite.PHASE, folder=dataset, user=None)

    variances = suite.stats["avg_variances"]
    assert len(variances) == 4 and all(v > 0 for v in variances)
    assert (storage.suite_dir(suite.pk) / "metadata.json").is_file()
    svg = client.get(page_of(bench)).content.decode().split("<svg")[1]
    assert 'class="mc-band"' in svg and "<circle class=" not in svg  # no entry yet


def test_final_standings_show_above_the_board(client, alice, bob, bench):
    final_suite = ready_suite(bench, role=Suite.FINAL)
    first = graded(bench, alice, [1e-3] * 4)
    second = graded(bench, bob, [2e-3] * 4)
    now = timezone.now()
    FinalScore.objects.create(
        entry=first, suite=final_suite, status=Entry.GRADED, score=3e-3, queued_at=now
    )
    FinalScore.objects.create(
        entry=second, suite=final_suite, status=Entry.GRADED, score=1e-3, queued_at=now
    )

    body = client.get(page_of(bench)).content.decode()

    assert body.index("Final standings") < body.index('id="leaderboard"')
    finals = body.split('id="final-standings"')[1].split("</table>")[0]
    assert finals.index("bob") < finals.index("alice")  # the rerun decides, not the board


# The entry page -------------------------------------------------------------------------


def test_the_entry_page_shows_its_team_the_ledger_and_hides_withheld_rows(
    client, alice, bob, bench
):
    factories.team(bench, "Gauss", alice, bob)
    entry = graded(
        bench,
        alice,
        [1e-3, 3e-3, 4.44e-4, 5e-3],
        flops=200_000,
        residual_s=0.25,
    )
    client.force_login(bob)  # a teammate sees it in full

    page = client.get(entry_url(entry))

    assert page.status_code == 200
    words = text(page)
    assert f"Public score 4 {X} 10⁻⁴" in words  # the mean of 1e-3 and 3e-3, times C/B = 0.2
    assert "shown once the phase closes" in words
    assert f"Mean FLOPs 2 {X} 10⁵" in words
    assert "Mean residual wall time 250 ms" in words
    assert f"Mean effective compute 2 {X} 10⁵" in words
    # 2e5 metered FLOPs against 2e5 + 1e11 x 0.25 s: most of the time went off the meter.
    assert f"Ratio 8 {X} 10⁻⁶" in words
    body = page.content.decode()
    assert "mlp-00" in body and "mlp-01" in body
    assert "mlp-02" not in body and "mlp-03" not in body and "4.44" not in body
    assert "Withheld MLPs" not in body

    bench.opens_at = timezone.now() - dt.timedelta(days=2)
    bench.closes_at = timezone.now() - dt.timedelta(minutes=1)
    bench.save()
    after = client.get(entry_url(entry)).content.decode()
    assert "mlp-03" in after and "Withheld MLPs (2)" in after and f"4.44 {X} 10⁻⁴" in after


def test_the_ledger_shows_each_fallback_with_its_reason(client, alice, bench):
    entry = accepted(bench, alice)
    services.entry_claim(entry.pk, "host")
    services.entry_record(
        entry.pk,
        grade(
            [
                mlp(0, mse=1e-3),
                mlp(1, mse=0.2, failed="residual_wall_time_exhausted"),
                mlp(2, mse=0.3, failed="error"),
                mlp(3, mse=1e-3),
            ]
        ),
    )
    client.force_login(alice)

    page = client.get(entry_url(entry))

    words = text(page)
    assert "zero prediction over the residual-time cap" in words
    assert "Fallbacks 1 public MLP got the zero prediction" in words  # the withheld one unsaid
    assert "ValueError" not in words


def test_another_teams_entry_is_404_unless_on_the_board(client, alice, bob, bench):
    best = graded(bench, bob, [1e-3] * 4)
    worse = graded(bench, bob, [9e-3] * 4)
    pending = accepted(bench, bob)
    client.force_login(alice)

    assert client.get(entry_url(worse)).status_code == 404
    assert client.get(entry_url(pending)).status_code == 404
    shown = client.get(entry_url(best))
    assert shown.status_code == 200
    body = shown.content.decode()
    assert 'id="board-figures"' in body and "mlp-00" not in body and "Per-MLP ledger" not in body
    assert "Nominate" not in body
    assert "Withheld score" not in body
    client.logout()
    assert client.get(entry_url(best)).status_code == 200
    assert client.get(entry_url(worse)).status_code == 404


def test_nominating_and_withdrawing_an_entry(client, alice, bob, bench):
    factories.team(bench, "Gauss", alice, bob)
    entry = graded(bench, bob, [1e-3] * 4)
    url = reverse("contests:estimation_nominate", kwargs={"pk": entry.pk})
    client.force_login(alice)

    assert "Nominate for the final rerun" in text(client.get(entry_url(entry)))
    response = client.post(url, {"action": "nominate"})
    entry.refresh_from_db()
    assert response.status_code == 302 and entry.nominated
    page = client.get(entry_url(entry))
    assert "is nominated for the final rerun" in text(page)
    assert "Withdraw the nomination" in text(page)

    client.post(url, {"action": "withdraw"})
    entry.refresh_from_db()
    assert not entry.nominated


def test_another_team_cannot_nominate_and_an_ungraded_entry_is_refused(client, alice, bob, bench):
    theirs = graded(bench, bob, [1e-3] * 4)
    pending = accepted(bench, alice)
    client.force_login(alice)

    other = client.post(
        reverse("contests:estimation_nominate", kwargs={"pk": theirs.pk}), {"action": "nominate"}
    )
    assert other.status_code == 404
    response = client.post(
        reverse("contests:estimation_nominate", kwargs={"pk": pending.pk}),
        {"action": "nominate"},
        follow=True,
    )
    assert "Only a graded entry can be nominated" in text(response)
    assert not Entry.objects.filter(nominated=True).exists()


def test_the_estimation_pages_pass_the_basic_accessibility_checks(client, alice, bob, bench):
    from tests.web.test_accessibility import problems

    ready_suite(bench)
    factories.team(bench, "Gauss", alice, factories.UserFactory(username="dora"))
    mine = graded(bench, alice, [1e-3, 2e-3, 3e-3, 4e-3], failed="")
    theirs = graded(bench, bob, [2e-3] * 4)
    found = {"anonymous page": problems(client.get(page_of(bench)).content.decode())}
    found["anonymous entry"] = problems(client.get(entry_url(theirs)).content.decode())
    client.force_login(alice)
    found["page"] = problems(client.get(page_of(bench)).content.decode())
    found["entry"] = problems(client.get(entry_url(mine)).content.decode())
    found["board figures"] = problems(client.get(entry_url(theirs)).content.decode())
    refused = client.post(upload_url(bench), {"estimator": SimpleUploadedFile("x.tar.gz", b"x")})
    found["a refused upload"] = problems(refused.content.decode())

    assert {page: issues for page, issues in found.items() if issues} == {}
