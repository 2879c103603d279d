"""The final rerun on the official cohort is a stated choice: without a final cohort,
starting it needs staff to type the confirmation; the rerun, the rules page, the
standings page, their JSON and the CSV export's header say which cohort decided."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest
import time_machine
from django.urls import reverse

from portal.audit.models import AuditEvent
from portal.contests.models import Cohort
from portal.core import errors
from portal.standings.models import FinalRerun, FinalSettings
from portal.standings.publishing import standings_publish
from portal.standings.rerun import OFFICIAL_COHORT_CONFIRMATION, final_rerun_start
from portal.submissions.models import Run
from tests.standings.test_rerun import play
from tests.web.boards import official_run


def begin(benchmark, staff, at, confirm=""):
    with time_machine.travel(at, tick=False):
        return final_rerun_start(
            benchmark=benchmark, actor=staff, reason="over", confirm_official_cohort=confirm
        )


def publish(benchmark, staff, at):
    with time_machine.travel(at, tick=False):
        return standings_publish(benchmark=benchmark, actor=staff, reason="results")


@pytest.mark.parametrize("confirm", ["", "yes", "rerun on the official"])
def test_without_a_final_cohort_it_is_refused_unless_confirmed_in_words(
    closing, staff, alice, after_close, confirm
):
    official_run(closing, alice, 100)
    with pytest.raises(errors.InvalidParameter) as refused:
        begin(closing, staff, after_close, confirm)
    said = refused.value.detail
    assert "no final cohort" in said and "not fresh" in said
    assert (
        f"manage.py import_cohort --benchmark {closing.slug} --kind final --images DIR "
        "--answers FILE" in said
    )
    assert f'"{OFFICIAL_COHORT_CONFIRMATION}"' in said
    assert not FinalRerun.objects.exists()
    assert not Run.objects.filter(purpose=Run.FINAL).exists()
    assert not AuditEvent.objects.filter(action="standings.final_rerun_started").exists()


def test_confirmed_it_reruns_on_the_official_cohort_and_every_export_says_so(
    closing, staff, alice, after_close, client
):
    a = official_run(closing, alice, 100).submission
    rerun = begin(closing, staff, after_close, f"  {OFFICIAL_COHORT_CONFIRMATION} ")
    assert rerun.cohort.kind == Cohort.OFFICIAL
    event = AuditEvent.objects.get(action="standings.final_rerun_started")
    assert event.details["cohort"] == "official" and event.details["fresh"] is False
    play({a.pk: [90]})
    publish(closing, staff, after_close + dt.timedelta(hours=5))
    page = client.get(f"/b/{closing.slug}/standings/").content.decode()
    assert '<strong id="deciding-cohort">official cohort: not fresh</strong>' in page
    api = f"/api/v1/benchmarks/{closing.slug}/standings"
    assert client.get(f"{api}/").json()["cohort"] == "official"
    assert client.get(f"{api}.json").json()["cohort"] == "official"
    exported = client.get(f"{api}.csv")
    assert exported["X-Podium-Cohort"] == "official cohort: not fresh"
    # The rows stay the canonical CSV whose SHA-256 is the published digest.
    body = exported.content
    assert exported["X-Podium-Digest"] == "sha256:" + hashlib.sha256(body).hexdigest()
    assert b"fresh" not in body and b"cohort" not in body


def test_with_a_final_cohort_no_confirmation_is_needed_and_it_says_fresh(
    closing, staff, alice, after_close, client
):
    a = official_run(closing, alice, 100).submission
    Cohort.objects.create(benchmark=closing, kind=Cohort.FINAL)
    rules = client.get(f"/b/{closing.slug}/").content.decode()
    assert '<strong id="deciding-cohort">final cohort (private, fresh)</strong>' in rules
    rerun = begin(closing, staff, after_close)
    assert rerun.cohort.kind == Cohort.FINAL
    assert AuditEvent.objects.get(action="standings.final_rerun_started").details["fresh"]
    play({a.pk: [90]})
    with time_machine.travel(after_close + dt.timedelta(hours=5), tick=False):
        provisional = client.get(f"/b/{closing.slug}/standings/").content.decode()
    assert "final cohort (private, fresh)" in provisional
    publish(closing, staff, after_close + dt.timedelta(hours=5))
    page = client.get(f"/b/{closing.slug}/standings/").content.decode()
    assert '<strong id="deciding-cohort">final cohort (private, fresh)</strong>' in page
    exported = client.get(f"/api/v1/benchmarks/{closing.slug}/standings.csv")
    assert exported["X-Podium-Cohort"] == "final cohort (private, fresh)"


def test_the_rules_page_says_not_fresh_without_a_final_cohort(closing, client):
    rules = client.get(f"/b/{closing.slug}/").content.decode()
    assert '<strong id="deciding-cohort">official cohort: not fresh</strong>' in rules


def test_the_rules_page_states_the_prize_positions_reviewed(closing, client):
    closing.validation_boundary = "No validation image in any artifact."
    closing.save(update_fields=["validation_boundary"])
    FinalSettings.objects.create(benchmark=closing, prize_positions=5)
    rules = client.get(f"/b/{closing.slug}/").content.decode()
    assert "Ranks 1 to 5 are prize positions" in rules


def test_the_api_refuses_without_the_words_and_starts_with_them(
    closing, staff, alice, after_close, client_for
):
    official_run(closing, alice, 100)
    client = client_for(staff)
    url = f"/api/v1/benchmarks/{closing.slug}/final-rerun/"
    with time_machine.travel(after_close, tick=False):
        refused = client.post(url, {"reason": "over"})
        assert refused.status_code == 400 and refused.json()["code"] == "invalid_parameter"
        assert "no final cohort" in refused.json()["detail"]
        assert not FinalRerun.objects.exists()
        started = client.post(
            url, {"reason": "over", "confirm_official_cohort": OFFICIAL_COHORT_CONFIRMATION}
        )
    assert started.status_code == 201 and started.json()["cohort"] == "official"


def test_the_admin_asks_for_the_words_and_refuses_without_them(
    admin_client, closing, alice, after_close
):
    official_run(closing, alice, 100)
    settings = FinalSettings.objects.create(benchmark=closing)
    url = reverse("admin:standings_finalsettings_changelist")
    chosen = {"action": "start_final_rerun", "_selected_action": [settings.pk]}
    with time_machine.travel(after_close, tick=False):
        asked = admin_client.post(url, chosen).content.decode()
        assert 'name="confirm_official_cohort"' in asked
        refused = admin_client.post(
            url, {**chosen, "apply": "yes", "reason": "over"}, follow=True
        ).content.decode()
        assert "no final cohort" in refused and not FinalRerun.objects.exists()
        admin_client.post(
            url,
            {
                **chosen,
                "apply": "yes",
                "reason": "over",
                "confirm_official_cohort": OFFICIAL_COHORT_CONFIRMATION,
            },
        )
    assert FinalRerun.objects.get(benchmark=closing).cohort.kind == Cohort.OFFICIAL
