"""``scoring.run.calibration``: the calibration workload timed as a scored run, on the held
machine; a host that drifts from its class is drained and its runs flagged.

The Docker test is real end to end: the workload runs in the scored-run sandbox under the
supervisor, and the drift comes from genuinely slowing it (a CPU quota on its container),
not from a number put in its place.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.contests import rules, sandbox
from portal.contests.hardware import hardware_class_row
from portal.contests.models import HardwareClass
from portal.core import jobs
from portal.hosts.models import CalibrationFlag, HostCalibration, ScoringHost
from portal.submissions.models import AttemptLedger, Run, Submission
from scoring import engine, worker
from scoring.cohort.staging import StagedRun
from scoring.host import hosts, machine
from scoring.run import calibration
from tests import factories
from tests.scoring.test_staging import make_cohort, make_submission

REPO = Path(__file__).resolve().parents[2]
# A quota of 0.6 CPU makes the one-threaded workload 1 / 0.6 = 1.67 times as slow on a quiet
# machine, and the lowest CPU weight that comes with it (calibration.container_spec) makes it
# yield to everything else on a busy one: far past the 3 % limit even where this shared
# 2-core machine slowed the reference too (seen: repetitions from 1.15 to 2.3 s under load).
SLOW_CPUS = 0.6


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    subprocess.run(
        ["make", "scoring/supervisor/supervise", "scoring/calibrate/calibrate"],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    return {
        "supervisor": REPO / "scoring" / "supervisor" / "supervise",
        "workload": REPO / "scoring" / "calibrate" / "calibrate",
    }


def _staged(tmp_path: Path) -> StagedRun:
    return StagedRun(
        run_id=0,
        root=tmp_path,
        input_dir=tmp_path / "input",
        manifest=tmp_path / "input" / "manifest.tsv",
        rows=1,
        references=[],
        request_ids=[],
        staged_names=[],
    )


# The sandbox --------------------------------------------------------------------------


def test_the_workload_runs_in_a_scored_runs_sandbox_as_its_entrypoint(tmp_path, settings):
    spec = calibration.container_spec(
        staged=_staged(tmp_path),
        host="alpha",
        workload=Path("/opt/calibrate"),
        supervisor=Path("/opt/supervise"),
    )

    assert spec["entrypoint"][0] == sandbox.SUPERVISOR_PATH
    assert spec["entrypoint"][-4:] == [
        rules.RUN_ENTRYPOINT,
        sandbox.MANIFEST_PATH,
        sandbox.IMAGE_ROOT,
        sandbox.OUTPUT_PATH,
    ]
    assert spec["image"] == settings.PODIUM_CALIBRATION_IMAGE
    # The scored run's sandbox, as runner.container_spec makes it.
    assert spec["network_mode"] == "none" and spec["read_only"] is True
    assert spec["cap_drop"] == ["ALL"] and spec["security_opt"] == ["no-new-privileges"]
    assert spec["environment"] == []
    assert {mount["Target"]: mount["ReadOnly"] for mount in spec["mounts"]} == {
        sandbox.SUPERVISOR_PATH: True,
        sandbox.INPUT_DIR: True,
        rules.RUN_ENTRYPOINT: True,
    }
    # A calibration of this host, never a run the reaper would settle.
    assert spec["labels"] == {calibration.LABEL: "alpha", machine.HOST_LABEL: "alpha"}
    assert "nano_cpus" not in spec and "cpu_shares" not in spec  # as a scored run


def test_a_cpu_quota_is_only_what_a_test_asks_for(tmp_path):
    spec = calibration.container_spec(
        staged=_staged(tmp_path),
        host="alpha",
        workload=Path("/opt/calibrate"),
        supervisor=Path("/opt/supervise"),
        cpus=0.85,
    )

    assert spec["nano_cpus"] == 850_000_000
    assert spec["cpu_shares"] == calibration.SLOWED_CPU_SHARES


# When a host calibrates -----------------------------------------------------------------


class FakeSession:
    host = "alpha"


@pytest.fixture
def alpha(db, settings) -> ScoringHost:
    settings.PODIUM_CALIBRATION = True  # whatever the test session's default
    now = timezone.now()
    return ScoringHost.objects.create(
        name="alpha",
        hardware_class=hardware_class_row(settings.PODIUM_HARDWARE_CLASS),
        architecture="x86_64",
        registered_at=now,
        last_heartbeat_at=now,
    )


def _record(host: ScoringHost, walls: list[int], **kw: Any) -> HostCalibration:
    from portal.hosts.calibrations import calibration_record

    now = timezone.now()
    return calibration_record(
        host_name=host.name,
        trigger=kw.pop("trigger", HostCalibration.REGISTRATION),
        started_at=now - dt.timedelta(seconds=10),
        finished_at=now,
        wall_ns=walls,
        **kw,
    )


def test_a_host_that_never_calibrated_calibrates_before_its_first_claim(
    alpha, settings, monkeypatch
):
    calibrated: list[str] = []
    monkeypatch.setattr(
        calibration, "calibrate", lambda session, trigger: calibrated.append(trigger)
    )

    assert calibration.keep_calibrated(FakeSession()) is True  # still active

    assert calibrated == ["registration"]


def test_a_calibrated_host_claims_without_calibrating_until_it_is_due(alpha, monkeypatch):
    _record(alpha, [1_000_000_000] * 3)
    monkeypatch.setattr(calibration, "calibrate", lambda session, trigger: pytest.fail(trigger))

    assert calibration.keep_calibrated(FakeSession()) is True


def test_calibration_can_be_turned_off(alpha, settings, monkeypatch):
    settings.PODIUM_CALIBRATION = False
    monkeypatch.setattr(calibration, "calibrate", lambda session, trigger: pytest.fail(trigger))

    assert calibration.keep_calibrated(FakeSession()) is True
    assert calibration.calibrate_when_due() is None
    assert calibration.start_at_registration() is None


def test_the_heartbeat_calls_for_a_calibration_once_after_the_first_registration(
    settings, monkeypatch, db
):
    settings.PODIUM_HOST_NAME = "alpha"
    monkeypatch.setattr(hosts, "machine_facts", lambda: {})
    started: list[str] = []
    heartbeat = hosts.HostHeartbeat(on_registered=lambda: started.append("calibrate"))

    heartbeat.beat()
    heartbeat.beat()
    ScoringHost.objects.all().delete()
    heartbeat.beat()  # registers again: not a worker's start

    assert started == ["calibrate"]
    assert ScoringHost.objects.filter(name="alpha").exists()


def test_a_measurement_that_fails_is_recorded_and_drains_nothing(
    alpha, settings, monkeypatch, tmp_path
):
    settings.PODIUM_CALIBRATION_WORKLOAD = tmp_path / "missing"

    class Session:
        host = "alpha"

    row = calibration.calibrate(Session(), trigger="registration")

    assert row.ok is False and row.median_ns is None
    assert row.reason.startswith("not measured: cannot read the workload")
    alpha.refresh_from_db()
    assert alpha.status == ScoringHost.ACTIVE


# For real --------------------------------------------------------------------------------


@pytest.fixture
def calibrating(settings, binaries, monkeypatch, db):
    """This test process as a scoring host with calibration on and the real binaries."""
    settings.PODIUM_SUPERVISOR = binaries["supervisor"]
    settings.PODIUM_CALIBRATION_WORKLOAD = binaries["workload"]
    settings.PODIUM_CALIBRATION = True
    settings.PODIUM_CALIBRATION_REPETITIONS = 5
    settings.PODIUM_CALIBRATE_EVERY_RUNS = 2
    settings.PODIUM_CALIBRATION_CPUS = None
    # This shared 2-core machine is far from a quiet scoring host (runs seen spreading
    # ±40 %): judge by the median whatever the spread (the noise rule is tested with
    # given figures in tests/hosts/test_calibration.py).
    settings.PODIUM_CALIBRATION_MAX_NOISE_PCT = 1000.0
    # No lease renewal inside the test's transaction (the heartbeat has its own connection).
    settings.PODIUM_LEASE_S = 600
    monkeypatch.setattr(hosts, "machine_facts", lambda: {"architecture": "x86_64"})
    hosts.register()
    return machine.scoring_host()


@pytest.mark.docker
def test_a_host_calibrates_then_drifts_is_drained_and_its_runs_are_rescored_free(
    calibrating, settings, alice, client, sent, django_capture_on_commit_callbacks
):
    name = calibrating
    benchmark = factories.BenchmarkFactory(hardware_class=settings.PODIUM_HARDWARE_CLASS)
    cohort = make_cohort(benchmark, [1, 2])
    made_before = {c["Id"] for c in engine.list_containers(calibration.LABEL)}

    # At the worker's start: the class's first good calibration sets its reference.
    first = calibration.calibrate_when_due()

    assert first is not None and first.ok, first and first.reason
    print("reference calibration:", first.wall_ns, first.noise_pct)
    assert first.trigger == HostCalibration.REGISTRATION
    assert len(first.wall_ns) == 5 and all(wall > 100_000_000 for wall in first.wall_ns)
    reference = HardwareClass.objects.get(name=settings.PODIUM_HARDWARE_CLASS)
    assert reference.calibration_reference_ns == first.median_ns == first.reference_ns
    assert first.drift_pct == 0.0 and first.noise_pct is not None
    assert calibration.calibrate_when_due() is None  # not due again

    # Two scored runs on this host since then, one before it (vouched for), one elsewhere.
    scored = make_submission(alice, benchmark, status=Submission.PASSED)

    def finished_run(host: str, started_at: dt.datetime) -> Run:
        return Run.objects.create(
            submission=scored,
            cohort=cohort,
            try_number=Run.objects.filter(submission=scored).count() + 1,
            host=host,
            status=Run.FINISHED,
            verdict="passed",
            started_at=started_at,
            finished_at=started_at,
            wall_time_ns=1_000_000,
        )

    before = finished_run(name, first.started_at - dt.timedelta(minutes=5))
    since = [finished_run(name, timezone.now()) for _ in range(2)]
    finished_run("another-host", timezone.now())
    waiting = make_submission(alice, benchmark)  # queued: a wake-up has work to claim
    charged = list(AttemptLedger.objects.filter(submission=scored).values_list("delta", flat=True))

    # Due (2 runs): the next wake-up calibrates first, genuinely slowed down.
    settings.PODIUM_CALIBRATION_CPUS = SLOW_CPUS
    with django_capture_on_commit_callbacks(execute=True):
        worker.score_next(benchmark.hardware_class_id)

    drifted = HostCalibration.objects.filter(host__name=name).order_by("-finished_at").first()
    print("slowed calibration:", drifted and (drifted.wall_ns, drifted.drift_pct))
    assert drifted is not None and drifted.pk != first.pk
    assert drifted.trigger == HostCalibration.RUNS
    assert drifted.ok is False
    assert drifted.drift_pct is not None and drifted.drift_pct > 3.0, drifted.wall_ns
    # Drained, audited with the calibration as the reason; nothing claimed.
    assert ScoringHost.objects.get(name=name).status == ScoringHost.DRAINING
    drain = AuditEvent.objects.get(action="host.drain", target=f"host:{name}")
    assert drain.actor is None and drain.reason.startswith("calibration drifted: median")
    waiting.refresh_from_db()
    assert waiting.status == Submission.QUEUED and not waiting.runs.exists()
    assert (jobs.SCORE_NEXT, (benchmark.hardware_class_id, 0)) in sent  # for another host
    # Its runs since the last good calibration are flagged, and only those.
    flags = CalibrationFlag.objects.filter(calibration=drifted)
    assert sorted(flags.values_list("run_id", flat=True)) == sorted(run.pk for run in since)
    assert not CalibrationFlag.objects.filter(run=before).exists()
    # No calibration container is left behind.
    assert {c["Id"] for c in engine.list_containers(calibration.LABEL)} <= made_before

    # Staff rescore them from the admin: free of charge, the submission queued again.
    charlie = factories.UserFactory(username="charlie", is_staff=True)
    charlie.groups.add(Group.objects.get(name="contest staff"))
    client.force_login(charlie)
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("admin:hosts_calibrationflag_changelist"),
            {
                "action": "rescore_for_free",
                ACTION_CHECKBOX_NAME: [flags[0].pk],
                "apply": "yes",
                "reason": "host alpha ran slow",
            },
        )

    assert response.status_code == 302
    scored.refresh_from_db()
    assert scored.status == Submission.QUEUED
    assert (
        list(AttemptLedger.objects.filter(submission=scored).values_list("delta", flat=True))
        == charged
    )  # nothing charged, nothing refunded
    assert sent == [(jobs.SCORE_NEXT, (benchmark.hardware_class_id, 0))]
    assert set(flags.values_list("resolution", flat=True)) == {CalibrationFlag.RESCORED}
    assert AuditEvent.objects.filter(action="submission.rescore", actor=charlie).count() == 1
    event = AuditEvent.objects.get(action="host.calibration_flag.rescore")
    assert event.actor == charlie and event.reason == "host alpha ran slow"
    assert sorted(event.details["flags"]) == sorted(flags.values_list("pk", flat=True))
