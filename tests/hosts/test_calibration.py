"""Calibration on the portal side: the arithmetic and the due rules (pure), what recording a
calibration does (reference, drift, drain, flags), staff's free rescore of flagged runs,
and the figures published in the API and on the benchmark page.

No Docker here: the wall times are given (``tests/scoring/test_calibration.py`` measures
real ones).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.contests.models import Cohort, HardwareClass
from portal.core import errors, jobs
from portal.hosts import noise
from portal.hosts.calibrations import (
    calibration_flag_dismiss,
    calibration_flag_rescore,
    calibration_record,
)
from portal.hosts.models import CalibrationFlag, HostCalibration, ScoringHost
from portal.hosts.selectors import calibration_due, noise_band
from portal.submissions.models import AttemptLedger, Run, Submission
from tests import factories

NOW = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)
SECOND = 1_000_000_000


# The arithmetic -------------------------------------------------------------------------


def test_the_median_of_an_odd_count_is_a_measured_value_and_of_an_even_the_middle_mean():
    assert noise.median_ns([5, 1, 3]) == 3
    assert noise.median_ns([4, 1, 3, 2]) == 2  # (2 + 3) // 2
    with pytest.raises(ValueError):
        noise.median_ns([])


def test_a_calibrations_noise_is_half_its_range_in_percent_of_its_median():
    assert noise.noise_pct([100, 98, 102]) == pytest.approx(2.0)
    assert noise.noise_pct([100]) == 0.0


def test_drift_is_signed_and_the_limit_itself_is_still_good():
    assert noise.drift_pct(105, 100) == pytest.approx(5.0)
    assert noise.drift_pct(96, 100) == pytest.approx(-4.0)
    assert not noise.drifted(3.0, 3.0)
    assert noise.drifted(3.01, 3.0)
    assert noise.drifted(-3.5, 3.0)  # faster is not comparable either


@pytest.mark.parametrize(
    ("last_at", "ok", "runs", "expected"),
    [
        (None, False, 0, "registration"),
        (NOW - dt.timedelta(minutes=5), False, 0, "recheck"),
        (NOW - dt.timedelta(minutes=5), True, 49, ""),
        (NOW - dt.timedelta(minutes=5), True, 50, "runs"),
        (NOW - dt.timedelta(hours=6), True, 0, "age"),
        (NOW - dt.timedelta(hours=5, minutes=59), True, 0, ""),
    ],
)
def test_when_a_host_must_calibrate(last_at, ok, runs, expected):
    due = noise.calibration_due(
        last_finished_at=last_at,
        last_ok=ok,
        runs_since=runs,
        now=NOW,
        every_runs=50,
        every_s=6 * 3600,
    )

    assert due == expected


def test_a_rule_set_to_zero_is_off():
    due = noise.calibration_due(
        last_finished_at=NOW - dt.timedelta(days=30),
        last_ok=True,
        runs_since=10_000,
        now=NOW,
        every_runs=0,
        every_s=0,
    )

    assert due == ""


def test_the_noise_band_is_the_widest_repetition_around_the_pooled_median():
    # Pooled: 99 100 101 102 103 104, median (101 + 102) // 2 = 101; widest: 104.
    assert noise.noise_band_pct([[100, 101, 99], [103, 102, 104]]) == pytest.approx(3 / 101 * 100)
    assert noise.noise_band_pct([]) is None


# Recording a calibration ---------------------------------------------------------------


def _record(host: ScoringHost, walls: list[int], **kw: Any) -> HostCalibration:
    now = timezone.now()
    return calibration_record(
        host_name=host.name,
        trigger=kw.pop("trigger", HostCalibration.RUNS),
        started_at=now - dt.timedelta(seconds=10),
        finished_at=now,
        wall_ns=walls,
        **kw,
    )


def test_the_first_good_calibration_of_a_class_sets_its_reference(make_host):
    alpha = make_host("alpha", hardware_class="cpu-x86_64")

    row = _record(alpha, [SECOND, SECOND + 10_000_000, SECOND - 10_000_000])

    assert row.ok and row.median_ns == SECOND and row.drift_pct == 0.0
    assert row.noise_pct == pytest.approx(1.0)
    assert row.reason.startswith("the first good calibration of its class")
    hardware = HardwareClass.objects.get(name="cpu-x86_64")  # a CPU class nobody described
    assert hardware.calibration_reference_ns == SECOND == row.reference_ns
    assert hardware.platform == HardwareClass.AMD64 and hardware.gpus == 0


def test_a_host_within_the_limit_stays_active(make_host):
    HardwareClass.objects.update_or_create(
        name="cpu-x86_64", defaults={"calibration_reference_ns": SECOND}
    )
    bravo = make_host("bravo")

    row = _record(bravo, [int(SECOND * 1.03)] * 3)  # exactly the limit

    assert row.ok and row.drift_pct == pytest.approx(3.0)
    bravo.refresh_from_db()
    assert bravo.status == ScoringHost.ACTIVE
    assert not CalibrationFlag.objects.exists()


@pytest.fixture
def timed(alice, benchmark) -> Any:
    """A finished, timed run of a passed submission on ``host`` started at ``at``."""
    cohort = Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)

    def make(host: str, at: dt.datetime, **fields: Any) -> Run:
        environment = factories.EnvironmentFactory(owner=alice, benchmark=benchmark)
        submission = Submission.objects.create(
            entrant=alice,
            benchmark=benchmark,
            environment=environment,
            status=Submission.PASSED,
            submitted_at=at,
            source_name="source.tar.gz",
            source_format="tar.gz",
            source_sha256=uuid.uuid4().hex * 2,
            source_bytes=1,
        )
        AttemptLedger.objects.create(
            entrant=alice,
            benchmark=benchmark,
            submission=submission,
            kind=submission.kind,
            attempt_day=at.date(),
            delta=AttemptLedger.CHARGE,
            reason="upload",
            at=at,
        )
        return Run.objects.create(
            submission=submission,
            cohort=cohort,
            host=host,
            **{
                "status": Run.FINISHED,
                "verdict": "passed",
                "started_at": at,
                "finished_at": at,
                "wall_time_ns": 5 * SECOND,
                **fields,
            },
        )

    return make


def test_a_drift_drains_the_host_and_flags_its_runs_since_its_last_good_calibration(
    make_host, timed
):
    HardwareClass.objects.update_or_create(
        name="cpu-x86_64", defaults={"calibration_reference_ns": SECOND}
    )
    alpha = make_host("alpha")
    make_host("bravo")
    vouched = timed("alpha", timezone.now())
    good = _record(alpha, [SECOND] * 3)
    since = [timed("alpha", timezone.now()) for _ in range(2)]
    timed("alpha", timezone.now(), status=Run.INFRA_FAILED, wall_time_ns=None)  # untimed
    timed("alpha", timezone.now(), purpose=Run.VERIFY)  # not a scored run
    timed("bravo", timezone.now())  # another host's

    row = _record(alpha, [int(SECOND * 1.05)] * 3)

    assert good.ok and not row.ok
    assert row.drift_pct == pytest.approx(5.0)
    assert "+5.00 % off the cpu-x86_64 reference" in row.reason
    alpha.refresh_from_db()
    assert alpha.status == ScoringHost.DRAINING
    drain = AuditEvent.objects.get(action="host.drain", target="host:alpha")
    assert drain.actor is None
    assert drain.reason.startswith("calibration drifted: median 1,050,000,000 ns")
    assert drain.reason.endswith("2 run(s) flagged")
    flagged = set(CalibrationFlag.objects.filter(calibration=row).values_list("run", flat=True))
    assert flagged == {run.pk for run in since}
    assert vouched.pk not in flagged
    # The class's reference is the class's, not the drifting host's.
    assert HardwareClass.objects.get().calibration_reference_ns == SECOND


def test_a_draining_host_that_drifts_again_gets_its_runs_flagged_without_a_second_drain(
    make_host, timed
):
    HardwareClass.objects.update_or_create(
        name="cpu-x86_64", defaults={"calibration_reference_ns": SECOND}
    )
    alpha = make_host("alpha", status=ScoringHost.DRAINING)
    run = timed("alpha", timezone.now())  # never vouched for: it never calibrated well

    row = _record(alpha, [int(SECOND * 0.9)] * 3)

    assert not row.ok and row.drift_pct == pytest.approx(-10.0)
    assert list(row.flags.values_list("run", flat=True)) == [run.pk]
    assert not AuditEvent.objects.filter(action="host.drain").exists()


def test_a_calibration_that_could_not_be_measured_changes_nothing_but_its_row(make_host, timed):
    alpha = make_host("alpha")
    timed("alpha", timezone.now())

    row = _record(alpha, [], error="not measured: the workload's checksum is wrong")

    assert not row.ok and row.median_ns is None and row.drift_pct is None
    assert row.reason == "not measured: the workload's checksum is wrong"
    alpha.refresh_from_db()
    assert alpha.status == ScoringHost.ACTIVE
    assert not CalibrationFlag.objects.exists()
    assert not HardwareClass.objects.exclude(
        calibration_reference_ns=None
    ).exists()  # no reference from no measurement


def test_a_calibration_too_noisy_to_judge_sets_no_reference_and_drains_nothing(
    make_host, timed, settings
):
    settings.PODIUM_CALIBRATION_MAX_NOISE_PCT = 3.0
    alpha = make_host("alpha")
    timed("alpha", timezone.now())

    # A busy machine: the first run slowed by half; the median alone would look fine.
    row = _record(alpha, [int(SECOND * 1.5), SECOND, SECOND, SECOND, SECOND])

    assert not row.ok and row.median_ns == SECOND and row.noise_pct == pytest.approx(25.0)
    assert row.reason == "too noisy to judge: its runs spread ±25.00 % (limit ±3 %)"
    assert not HardwareClass.objects.exclude(
        calibration_reference_ns=None
    ).exists()  # no reference from it
    alpha.refresh_from_db()
    assert alpha.status == ScoringHost.ACTIVE and not CalibrationFlag.objects.exists()
    assert calibration_due("alpha", timezone.now()) == "recheck"  # judged again first
    assert _record(alpha, [SECOND] * 5).ok  # a quiet one then sets the reference


def test_an_unregistered_host_cannot_record_a_calibration(db):
    with pytest.raises(errors.NotFound):
        calibration_record(
            host_name="ghost",
            trigger="registration",
            started_at=timezone.now(),
            finished_at=timezone.now(),
            wall_ns=[SECOND],
        )


def test_runs_since_the_last_calibration_make_it_due(make_host, timed, settings):
    settings.PODIUM_CALIBRATE_EVERY_RUNS = 2
    alpha = make_host("alpha")
    assert calibration_due("alpha", timezone.now()) == "registration"
    _record(alpha, [SECOND] * 3)
    timed("alpha", timezone.now())
    timed("bravo", timezone.now())
    assert calibration_due("alpha", timezone.now()) == ""

    timed("alpha", timezone.now(), purpose=Run.VERIFY)  # a verification uses the machine too

    assert calibration_due("alpha", timezone.now()) == "runs"
    assert calibration_due("alpha", timezone.now() + dt.timedelta(hours=6)) == "runs"


# Staff and the flags ------------------------------------------------------------------


@pytest.fixture
def flagged(make_host, timed) -> list[CalibrationFlag]:
    """Two flagged runs of one submission and one of another, on drained host alpha."""
    HardwareClass.objects.update_or_create(
        name="cpu-x86_64", defaults={"calibration_reference_ns": SECOND}
    )
    alpha = make_host("alpha")
    first = timed("alpha", timezone.now())
    again = Run.objects.create(
        submission=first.submission,
        cohort=first.cohort,
        host="alpha",
        try_number=2,
        status=Run.FINISHED,
        started_at=timezone.now(),
        wall_time_ns=SECOND,
    )
    timed("alpha", timezone.now())
    row = _record(alpha, [2 * SECOND] * 3)
    flags = list(row.flags.order_by("run_id"))
    assert [flag.run_id for flag in flags[:2]] == [first.pk, again.pk]
    return flags


def _ledger(submission: Submission) -> list[int]:
    return list(AttemptLedger.objects.filter(submission=submission).values_list("delta", flat=True))


def test_rescoring_a_flagged_run_charges_nothing_and_resolves_its_submissions_flags(
    flagged, staff, sent, django_capture_on_commit_callbacks
):
    submission = flagged[0].run.submission
    before = _ledger(submission)

    with django_capture_on_commit_callbacks(execute=True):
        calibration_flag_rescore(flag_id=flagged[0].pk, actor=staff, reason="slow host")

    submission.refresh_from_db()
    assert submission.status == Submission.QUEUED
    assert _ledger(submission) == before == [AttemptLedger.CHARGE]
    assert sent == [(jobs.SCORE_NEXT, (submission.benchmark.hardware_class_id, 0))]
    resolutions = {
        flag.pk: (flag.resolution, flag.resolved_by_id)
        for flag in CalibrationFlag.objects.order_by("run_id")
    }
    assert resolutions == {
        flagged[0].pk: ("rescored", staff.pk),
        flagged[1].pk: ("rescored", staff.pk),  # the same submission's other run
        flagged[2].pk: ("", None),
    }
    event = AuditEvent.objects.get(action="host.calibration_flag.rescore")
    assert (event.actor, event.reason, event.target) == (
        staff,
        "slow host",
        f"submission:{submission.pk}",
    )
    assert event.details["flags"] == [flagged[0].pk, flagged[1].pk]
    rescore = AuditEvent.objects.get(action="submission.rescore")
    assert rescore.reason.startswith("calibration of host alpha drifted (+100.00 %)")

    with pytest.raises(errors.InvalidParameter):  # already resolved
        calibration_flag_rescore(flag_id=flagged[1].pk, actor=staff)


def test_a_flag_whose_submission_cannot_be_rescored_stays_open(flagged, staff, sent):
    Submission.objects.filter(pk=flagged[2].run.submission_id).update(status=Submission.RUNNING)

    with pytest.raises(errors.InvalidParameter):
        calibration_flag_rescore(flag_id=flagged[2].pk, actor=staff)

    flagged[2].refresh_from_db()
    assert flagged[2].resolved_at is None
    assert not AuditEvent.objects.filter(action__startswith="host.calibration_flag").exists()


def test_dismissing_a_flag_needs_a_reason_and_is_audited(flagged, staff):
    with pytest.raises(errors.InvalidParameter):
        calibration_flag_dismiss(flag_id=flagged[2].pk, actor=staff, reason=" ")

    calibration_flag_dismiss(flag_id=flagged[2].pk, actor=staff, reason="within noise")

    flagged[2].refresh_from_db()
    assert flagged[2].resolution == "dismissed" and flagged[2].note == "within noise"
    assert AuditEvent.objects.get(action="host.calibration_flag.dismiss").actor == staff
    assert flagged[2].run.submission.status == Submission.PASSED  # nothing requeued


FLAGS = "admin:hosts_calibrationflag_changelist"


def test_contest_staff_rescore_flags_from_the_admin(client, charlie, flagged, sent):
    client.force_login(charlie)
    page = client.get(reverse(FLAGS))
    assert page.status_code == 200
    assert 'value="rescore_for_free"' in page.content.decode()

    asked = client.post(
        reverse(FLAGS), {"action": "rescore_for_free", ACTION_CHECKBOX_NAME: [flagged[2].pk]}
    )
    assert asked.status_code == 200 and "charging nothing" in asked.content.decode()
    done = client.post(
        reverse(FLAGS),
        {
            "action": "rescore_for_free",
            ACTION_CHECKBOX_NAME: [flagged[2].pk],
            "apply": "yes",
            "reason": "",
        },
    )

    assert done.status_code == 302
    flagged[2].refresh_from_db()
    assert flagged[2].resolution == "rescored" and flagged[2].resolved_by == charlie
    assert flagged[2].run.submission.status == Submission.QUEUED


def test_staff_without_the_rescore_permission_cannot_touch_flags(client, rita, flagged):
    rita.user_permissions.add(Permission.objects.get(codename="view_calibrationflag"))
    client.force_login(rita)

    page = client.get(reverse(FLAGS))
    response = client.post(
        reverse(FLAGS),
        {
            "action": "rescore_for_free",
            ACTION_CHECKBOX_NAME: [flagged[0].pk],
            "apply": "yes",
            "reason": "",
        },
    )

    assert page.status_code == 200
    assert 'value="rescore_for_free"' not in page.content.decode()
    assert response.status_code == 200  # the action is not hers: the list again
    assert not CalibrationFlag.objects.exclude(resolution="").exists()
    assert flagged[0].run.submission.status == Submission.PASSED


# What is published -------------------------------------------------------------------


@pytest.fixture
def alice_client(alice, client_for):
    return client_for(alice)


def test_each_host_shows_its_latest_calibration_in_the_api(
    alice_client, make_host, django_assert_max_num_queries
):
    alpha = make_host("alpha")
    make_host("bravo")
    make_host("charlie")
    _record(alpha, [SECOND] * 3)
    latest = _record(alpha, [SECOND, SECOND + 20_000_000, SECOND - 20_000_000])

    with django_assert_max_num_queries(5):  # the token, its user, the hosts, the two queues
        rows = {row["name"]: row for row in alice_client.get("/api/v1/hosts/").json()}

    assert rows["alpha"]["calibration"] == {
        "median_ns": SECOND,
        "noise_pct": 2.0,
        "at": latest.finished_at.astimezone(dt.UTC).isoformat(),
        "ok": True,
    }
    assert rows["bravo"]["calibration"] is None


def test_a_failed_calibration_shows_as_not_ok_without_figures(alice_client, make_host):
    alpha = make_host("alpha")
    _record(alpha, [], error="not measured: the engine did not answer")

    [row] = alice_client.get("/api/v1/hosts/").json()

    assert row["calibration"]["ok"] is False
    assert row["calibration"]["median_ns"] is None and row["calibration"]["noise_pct"] is None


def _classmates(make_host, count: int) -> list[ScoringHost]:
    return [make_host(f"host-{index}") for index in range(count)]


def test_the_benchmark_api_publishes_its_classs_noise_band(anon, benchmark, make_host):
    url = f"/api/v1/benchmarks/{benchmark.slug}/"
    assert anon.get(url).json()["noise_band"] is None

    first, second, drained = _classmates(make_host, 3)
    _record(first, [100 * SECOND // 100, 101 * SECOND // 100, 99 * SECOND // 100])
    _record(second, [102 * SECOND // 100] * 3)
    _record(drained, [SECOND // 2] * 3)  # drifts: not ok, and drained
    other_class = make_host("gpu-1", hardware_class="gpu-h200")
    _record(other_class, [3 * SECOND] * 3)

    band = anon.get(url).json()["noise_band"]

    # Pooled 0.99 1.00 1.01 1.02 1.02 1.02 s: median 1.015 s, widest 0.99 s (2.46 %).
    assert band == {
        "hardware_class": benchmark.hardware_class_id,
        "percent": pytest.approx(2.46, abs=0.005),
        "runs": 2,
    }


def test_the_noise_band_counts_only_recent_good_calibrations_of_active_hosts(
    benchmark, make_host, settings
):
    settings.PODIUM_NOISE_BAND_CALIBRATIONS = 2
    alpha, bravo = _classmates(make_host, 2)
    _record(alpha, [5 * SECOND] * 3)  # the reference; pushed out by the two below
    _record(alpha, [5 * SECOND] * 3)
    _record(bravo, [int(5 * SECOND * 1.02)] * 3)

    band = noise_band(benchmark.hardware_class_id)

    assert band is not None and band.runs == 2
    assert band.percent == pytest.approx(0.99, abs=0.01)  # 1.02 / 1.01 - 1
    ScoringHost.objects.filter(pk=bravo.pk).update(status=ScoringHost.DRAINING)
    _record(alpha, [5 * SECOND] * 3)  # a new calibration refreshes the band
    refreshed = noise_band(benchmark.hardware_class_id)
    assert refreshed is not None and refreshed.percent == 0.0


def test_the_benchmark_page_says_how_noisy_its_hardware_is(client, benchmark, make_host):
    page = client.get(f"/b/{benchmark.slug}/").content.decode()
    assert "Timing noise on this hardware class: not measured yet" in page

    for host in _classmates(make_host, 2):
        _record(host, [SECOND, SECOND + 8_000_000, SECOND - 8_000_000])

    cache.clear()  # the rules' facts of the hosts are cached (RULES_CACHE_S): as once it has passed
    page = client.get(f"/b/{benchmark.slug}/").content.decode()

    assert "Timing noise on this hardware class: ±0.8 %" in page
    assert "(from 2 calibration runs)" in page
