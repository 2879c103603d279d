"""Anomalies for staff: the rules at their boundaries, the scan after a verdict, the admin.

The rules are pure and tested with plain values; the scan is driven through the
submission services as the scoring worker drives them (claim, mark running, record), so
the hook that runs it after the verdict commits is exercised too.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import pytest
from django.contrib import admin as django_admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command
from django.urls import reverse

from portal.audit.models import AuditEvent
from portal.contests.models import Cohort
from portal.core import errors
from portal.submissions import anomalies
from portal.submissions.anomalies import OtherRun
from portal.submissions.models import Anomaly, Run, Submission
from portal.submissions.runs import run_record_verdict
from portal.submissions.verification import run_record_verification
from tests import factories
from tests.submissions.test_verification import SECOND, claimed, queued

SHA_A = "a" * 64
SHA_B = "b" * 64

# The rules (pure) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wall_ns", "fires"),
    [
        (SECOND - 1, True),  # just under half of the best other's 2 s
        (SECOND, False),  # exactly half: not flagged
        (int(1.5 * SECOND), False),
    ],
)
def test_much_faster_fires_strictly_under_half_the_best_other_entrant(wall_ns, fires):
    found = anomalies.much_faster(
        passed=True, wall_time_ns=wall_ns, best_other_ns=2 * SECOND, best_other_run_id=7
    )

    assert (found is not None) is fires
    if found:
        assert found.kind == Anomaly.MUCH_FASTER
        assert "1.000 s" in found.reason and "2.000 s" in found.reason and "run 7" in found.reason
        assert found.details["other_run_id"] == 7


@pytest.mark.parametrize(
    ("passed", "wall_ns", "best_ns"),
    [
        (True, SECOND, None),  # no other entrant ranks
        (False, SECOND, 10 * SECOND),  # did not pass
        (True, None, 10 * SECOND),  # no wall time
    ],
)
def test_much_faster_needs_a_passing_run_and_another_entrants_row(passed, wall_ns, best_ns):
    assert anomalies.much_faster(passed=passed, wall_time_ns=wall_ns, best_other_ns=best_ns) is None


def test_identical_output_names_the_other_entrants_earliest_run():
    others = [
        OtherRun(run_id=9, entrant_id=2, output_sha256=SHA_A),
        OtherRun(run_id=4, entrant_id=3, output_sha256=SHA_A),
        OtherRun(run_id=3, entrant_id=1, output_sha256=SHA_A),  # the entrant's own: skipped
        OtherRun(run_id=2, entrant_id=2, output_sha256=SHA_B),  # different bytes
    ]

    found = anomalies.identical_output(output_sha256=SHA_A, entrant_id=1, others=others)

    assert found is not None and found.kind == Anomaly.IDENTICAL_OUTPUT
    assert found.details["other_run_id"] == 4
    assert found.details["other_run_ids"] == [4, 9]
    assert "run 4 of entrant 3 and 1 more" in found.reason


def test_identical_output_needs_another_entrant_and_a_digest():
    own = [OtherRun(run_id=3, entrant_id=1, output_sha256=SHA_A)]
    different = [OtherRun(run_id=4, entrant_id=2, output_sha256=SHA_B)]
    empty = [OtherRun(run_id=5, entrant_id=2, output_sha256="")]

    assert anomalies.identical_output(output_sha256=SHA_A, entrant_id=1, others=own) is None
    assert anomalies.identical_output(output_sha256=SHA_A, entrant_id=1, others=different) is None
    assert anomalies.identical_output(output_sha256="", entrant_id=1, others=empty) is None


def meter(user_s: Any, system_s: Any) -> dict[str, Any]:
    return {
        "cpu_user_s": user_s,
        "cpu_system_s": system_s,
        "cpu_per_wall": None,
        "memory_peak_bytes": 50_000_000,
        "pids_peak": 3,
        "io_read_bytes": 0,
        "io_write_bytes": 4096,
        "oom_events": 0,
    }


@pytest.mark.parametrize(
    ("user_s", "system_s", "fires"),
    [
        (0.25, 0.24, True),  # 4.9% of 10 s
        (0.25, 0.25, False),  # exactly 5%: not flagged
        (9.0, 0.5, False),  # a busy core
        (0.0, 0.0, True),
    ],
)
def test_idle_cpu_fires_strictly_under_five_percent_of_the_wall_time(user_s, system_s, fires):
    found = anomalies.idle_cpu(
        passed=True, wall_time_ns=10 * SECOND, resources=meter(user_s, system_s)
    )

    assert (found is not None) is fires
    if found:
        assert found.kind == Anomaly.IDLE_CPU
        assert "10.000 s" in found.reason


@pytest.mark.parametrize(
    ("passed", "resources"),
    [
        (False, meter(0.0, 0.0)),  # failed: nothing to explain
        (True, {}),  # the meter did not run
        (True, meter(None, 0.0)),  # a reading the kernel did not offer
        (True, meter(0.01, None)),
        (True, meter("0.01", 0.0)),  # an odd value decides nothing
    ],
)
def test_idle_cpu_needs_a_passing_run_and_both_readings(passed, resources):
    assert anomalies.idle_cpu(passed=passed, wall_time_ns=10 * SECOND, resources=resources) is None


def gpu_run(energy_per_image_j: Any, util: Any = 91.5) -> dict[str, Any]:
    """A GPU class's resources: a busy CPU, and the GPU meter's figures."""
    return {
        **meter(9.0, 0.5),
        "gpu": {"energy_per_image_j": energy_per_image_j, "gpu_util_mean_pct": util},
    }


@pytest.mark.parametrize(
    ("energy_j", "fires"),
    [
        (0.4999, True),  # just under 25% of the reference's 2 J
        (0.5, False),  # exactly 25%: not flagged
        (1.9, False),
        (0.0, True),
    ],
)
def test_low_energy_fires_strictly_under_the_floor_of_the_reference(energy_j, fires):
    found = anomalies.low_energy(
        passed=True, resources=gpu_run(energy_j), reference_j=2.0, floor_pct=25
    )

    assert (found is not None) is fires
    if found:
        assert found.kind == Anomaly.LOW_ENERGY
        assert "of the reference kit's 2 J; under 25%" in found.reason
        assert found.details["reference_energy_per_image_j"] == 2.0
        assert found.details["gpu_util_mean_pct"] == 91.5


@pytest.mark.parametrize(
    ("passed", "resources", "reference_j", "floor_pct"),
    [
        (False, gpu_run(0.01), 2.0, 25),  # failed: nothing to explain
        (True, gpu_run(0.01), None, 25),  # no reference set
        (True, gpu_run(0.01), 0.0, 25),
        (True, gpu_run(0.01), 2.0, 0),  # the floor is off
        (True, meter(9.0, 0.5), 2.0, 25),  # a CPU class: no GPU meter
        (True, gpu_run(None, None), 2.0, 25),  # NVML gave no reading
        (True, gpu_run("0.01"), 2.0, 25),  # an odd value decides nothing
    ],
)
def test_low_energy_needs_a_pass_a_reference_a_floor_and_the_meters_figure(
    passed, resources, reference_j, floor_pct
):
    found = anomalies.low_energy(
        passed=passed, resources=resources, reference_j=reference_j, floor_pct=floor_pct
    )

    assert found is None


def test_failed_verification_is_recorded_on_a_rejected_verification_run_only():
    found = anomalies.failed_verification(
        purpose=Run.VERIFY,
        submission_status=Submission.REJECTED_VERIFICATION,
        official_run_id=12,
        problem="Verification failed: took 1.300 s against the official 1.000 s.",
    )

    assert found is not None and found.details == {"official_run_id": 12}
    assert "official run 12" in found.reason and "1.300 s" in found.reason
    for purpose, status in [
        (Run.SCORE, Submission.REJECTED_VERIFICATION),
        (Run.VERIFY, Submission.PASSED),
    ]:
        assert (
            anomalies.failed_verification(
                purpose=purpose, submission_status=status, official_run_id=12
            )
            is None
        )


# The scan on real rows ------------------------------------------------------------------


@pytest.fixture
def contest(db: Any) -> Any:
    benchmark = factories.BenchmarkFactory(attempts_per_day=10)
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.PRACTICE)
    return benchmark


@pytest.fixture
def carol(db: Any) -> Any:
    return factories.UserFactory(username="carol")


def verified(official: Run, *, wall_s: float) -> Run:
    """The official run's verification, passing in ``wall_s`` seconds."""
    verify = claimed(official.submission)
    assert run_record_verification(
        run_id=verify.pk,
        status=Submission.PASSED,
        reason="100 of 100 matched.",
        wall_time_ns=int(wall_s * SECOND),
        resources=meter(wall_s * 0.9, 0.05),
    )
    return verify


def scored(
    benchmark: Any,
    entrant: Any,
    tmp_path: Path,
    *,
    wall_s: float,
    status: str = Submission.PASSED,
    kind: str = Submission.OFFICIAL,
    output_sha256: str = "",
    resources: dict[str, Any] | None = None,
) -> Run:
    """A run recorded through the services, as the scoring worker records it."""
    run = claimed(queued(benchmark, entrant, tmp_path, kind=kind))
    assert run_record_verdict(
        run_id=run.pk,
        status=status,
        reason="100 of 100 matched." if status == Submission.PASSED else "3 of 100 matched.",
        wall_time_ns=int(wall_s * SECOND),
        matches=100 if status == Submission.PASSED else 3,
        total=100,
        output_sha256=output_sha256,
        resources=resources if resources is not None else meter(wall_s * 0.9, wall_s * 0.05),
    )
    run.refresh_from_db()
    return run


def kinds(run: Run) -> list[str]:
    return sorted(run.anomalies.values_list("kind", flat=True))


def test_a_run_twice_as_fast_as_every_rival_is_flagged_after_its_verdict(
    contest, alice, bob, tmp_path, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        rival = scored(contest, bob, tmp_path, wall_s=2.0)
    with django_capture_on_commit_callbacks(execute=True):
        fast = scored(contest, alice, tmp_path, wall_s=0.9)

    assert kinds(rival) == []  # nobody else ranked when Bob's run finished
    anomaly = Anomaly.objects.get(run=fast)
    assert anomaly.kind == Anomaly.MUCH_FASTER
    assert anomaly.details["other_run_id"] == rival.pk
    assert "0.900 s" in anomaly.reason and "2.000 s" in anomaly.reason
    assert anomaly.reviewed_at is None and anomaly.detected_at is not None


def test_half_the_rivals_time_or_beating_only_oneself_is_not_flagged(
    contest, alice, bob, tmp_path, sent
):
    rival = scored(contest, bob, tmp_path, wall_s=2.0)
    half = scored(contest, alice, tmp_path, wall_s=1.0)
    own_record = scored(contest, bob, tmp_path, wall_s=0.5)  # 4x Bob's own, 2x Alice's

    assert anomalies.anomaly_scan(half.pk) == []
    assert anomalies.anomaly_scan(own_record.pk) == []
    assert anomalies.anomaly_scan(rival.pk) == []
    assert not Anomaly.objects.exists()


def test_byte_identical_predictions_of_another_entrant_are_flagged(
    contest, alice, bob, carol, tmp_path, sent, django_capture_on_commit_callbacks
):
    runs = []
    for entrant, wall_s, sha in [
        (bob, 1.0, SHA_A),
        (bob, 1.1, SHA_A),
        (carol, 1.2, SHA_B),
        (alice, 1.05, SHA_A),
    ]:
        with django_capture_on_commit_callbacks(execute=True):  # one commit per verdict
            runs.append(scored(contest, entrant, tmp_path, wall_s=wall_s, output_sha256=sha))
    original, again, other, copy = runs

    assert kinds(original) == kinds(again) == kinds(other) == []  # Bob may repeat himself
    anomaly = Anomaly.objects.get(run=copy)
    assert anomaly.kind == Anomaly.IDENTICAL_OUTPUT
    assert anomaly.details["other_run_id"] == original.pk
    assert anomaly.details["other_run_ids"] == [original.pk, again.pk]


def test_identical_output_on_another_cohort_is_not_compared(contest, alice, bob, tmp_path, sent):
    practice = scored(
        contest, bob, tmp_path, wall_s=1.0, kind=Submission.PRACTICE, output_sha256=SHA_A
    )
    official = scored(contest, alice, tmp_path, wall_s=1.0, output_sha256=SHA_A)

    assert anomalies.anomaly_scan(official.pk) == []
    assert anomalies.anomaly_scan(practice.pk) == []  # practice runs are not scanned


def test_a_pass_with_an_idle_cpu_is_flagged(
    contest, alice, tmp_path, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        idle = scored(contest, alice, tmp_path, wall_s=4.0, resources=meter(0.1, 0.06))
        busy = scored(contest, alice, tmp_path, wall_s=4.0, resources=meter(0.15, 0.05))
        unmetered = scored(contest, alice, tmp_path, wall_s=4.0, resources={})
        failed = scored(
            contest,
            alice,
            tmp_path,
            wall_s=4.0,
            status=Submission.FAILED,
            resources=meter(0.0, 0.0),
        )

    anomaly = Anomaly.objects.get(run=idle)
    assert anomaly.kind == Anomaly.IDLE_CPU
    assert "0.160 s of CPU" in anomaly.reason and "4.0%" in anomaly.reason
    assert kinds(busy) == kinds(unmetered) == kinds(failed) == []  # busy: exactly 5%


def test_a_rejected_verification_is_flagged_on_the_verification_run(
    contest, alice, tmp_path, sent, django_capture_on_commit_callbacks
):
    contest.verify_top = 20
    contest.verify_tolerance_pct = 10
    contest.save()
    with django_capture_on_commit_callbacks(execute=True):
        official = scored(contest, alice, tmp_path, wall_s=1.0)
        # A timing miss is measured three times: the third miss rejects.
        misses = [verified(official, wall_s=wall) for wall in (1.3, 1.35, 1.4)]
        verify = misses[-1]

    official.submission.refresh_from_db()
    assert official.submission.status == Submission.REJECTED_VERIFICATION
    assert kinds(official) == kinds(misses[0]) == kinds(misses[1]) == []
    anomaly = Anomaly.objects.get(run=verify)
    assert anomaly.kind == Anomaly.FAILED_VERIFICATION
    assert anomaly.details == {"official_run_id": official.pk}
    assert "more than 10% slower" in anomaly.reason


def test_a_verification_that_holds_is_not_flagged(
    contest, alice, tmp_path, sent, django_capture_on_commit_callbacks
):
    contest.verify_top = 20
    contest.save()
    with django_capture_on_commit_callbacks(execute=True):
        official = scored(contest, alice, tmp_path, wall_s=1.0)
        verified(official, wall_s=1.02)

    assert not Anomaly.objects.exists()


def test_a_scan_is_idempotent_and_keeps_a_review(contest, alice, bob, staff, tmp_path, sent):
    scored(contest, bob, tmp_path, wall_s=3.0, output_sha256=SHA_A)
    run = scored(contest, alice, tmp_path, wall_s=1.0, output_sha256=SHA_A, resources={})

    first = anomalies.anomaly_scan(run.pk)
    detected = {anomaly.kind: anomaly.detected_at for anomaly in first}
    anomalies.anomaly_review(anomaly=first[0], actor=staff, note="same weights as Bob's")
    second = anomalies.anomaly_scan(run.pk)

    assert sorted(detected) == [Anomaly.IDENTICAL_OUTPUT, Anomaly.MUCH_FASTER]
    assert sorted(anomaly.pk for anomaly in second) == sorted(anomaly.pk for anomaly in first)
    assert Anomaly.objects.count() == 2
    assert {anomaly.kind: anomaly.detected_at for anomaly in second} == detected
    reviewed = Anomaly.objects.get(pk=first[0].pk)
    assert (reviewed.reviewed_by, reviewed.review_note) == (staff, "same weights as Bob's")


def test_an_unfinished_run_finds_nothing(contest, alice, tmp_path, sent):
    run = claimed(queued(contest, alice, tmp_path))
    Run.objects.filter(pk=run.pk).update(wall_time_ns=1, passed=True, resources=meter(0, 0))

    assert anomalies.anomaly_scan(run.pk) == []
    assert anomalies.anomaly_scan(run.pk + 1000) == []


def test_a_failing_scan_never_breaks_the_verdict(
    contest, alice, tmp_path, sent, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    def broken(run_id: int) -> list[Anomaly]:
        raise RuntimeError("database went away")

    monkeypatch.setattr(anomalies, "anomaly_scan", broken)
    with (
        caplog.at_level(logging.ERROR, logger="portal.submissions.anomalies"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        run = scored(contest, alice, tmp_path, wall_s=1.0, resources=meter(0.0, 0.0))

    run.submission.refresh_from_db()
    assert run.submission.status == Submission.PASSED
    assert f"anomaly scan of run {run.pk} failed" in caplog.text
    assert not Anomaly.objects.exists()


def test_a_pass_on_implausibly_little_gpu_energy_is_flagged(
    contest, alice, tmp_path, sent, django_capture_on_commit_callbacks
):
    contest.reference_energy_per_image_j = 2.0
    contest.save()
    with django_capture_on_commit_callbacks(execute=True):
        low = scored(contest, alice, tmp_path, wall_s=4.0, resources=gpu_run(0.3))
        fair = scored(contest, alice, tmp_path, wall_s=4.0, resources=gpu_run(0.5))
        failed = scored(
            contest,
            alice,
            tmp_path,
            wall_s=4.0,
            status=Submission.FAILED,
            resources=gpu_run(0.01),
        )
        unmetered = scored(contest, alice, tmp_path, wall_s=4.0, resources=gpu_run(None))

    anomaly = Anomaly.objects.get(run=low)
    assert anomaly.kind == Anomaly.LOW_ENERGY
    assert "0.3 J of GPU energy per image, 15.0% of the reference kit's 2 J" in anomaly.reason
    assert kinds(fair) == kinds(failed) == kinds(unmetered) == []  # fair: exactly 25%


def test_no_reference_no_low_energy_finding(contest, alice, tmp_path, sent):
    run = scored(contest, alice, tmp_path, wall_s=4.0, resources=gpu_run(0.0001))

    assert contest.reference_energy_per_image_j is None
    assert anomalies.anomaly_scan(run.pk) == []


def test_the_reference_is_set_from_a_run_of_the_reference_kit_audited(
    contest, alice, staff, tmp_path, sent
):
    kit = scored(
        contest, staff, tmp_path, wall_s=4.0, kind=Submission.PRACTICE, resources=gpu_run(1.625)
    )
    out = io.StringIO()

    call_command("set_reference_energy", contest.slug, str(kit.pk), stdout=out)

    contest.refresh_from_db()
    assert contest.reference_energy_per_image_j == 1.625
    assert "1.625 J per image" in out.getvalue() and "under 25%" in out.getvalue()
    event = AuditEvent.objects.get(action="benchmark.rules.change")
    assert event.target == f"benchmark:{contest.slug}"
    assert event.details == {"changes": {"reference_energy_per_image_j": [None, 1.625]}}


def test_the_reference_needs_a_passing_metered_run_of_the_benchmark(contest, alice, tmp_path, sent):
    cpu = scored(contest, alice, tmp_path, wall_s=4.0)
    failed = scored(
        contest, alice, tmp_path, wall_s=4.0, status=Submission.FAILED, resources=gpu_run(1.0)
    )
    elsewhere = factories.BenchmarkFactory(attempts_per_day=10)
    Cohort.objects.create(benchmark=elsewhere, kind=Cohort.OFFICIAL)
    other = scored(elsewhere, alice, tmp_path, wall_s=4.0, resources=gpu_run(1.0))

    for run, problem in [
        (cpu, "has no GPU energy per image"),
        (failed, "did not pass"),
        (other, f"is not a run of {contest.slug}"),
    ]:
        with pytest.raises(CommandError, match=problem):
            call_command("set_reference_energy", contest.slug, str(run.pk))
    contest.refresh_from_db()
    assert contest.reference_energy_per_image_j is None
    assert not AuditEvent.objects.filter(action="benchmark.rules.change").exists()


# The admin --------------------------------------------------------------------------------

CHANGELIST = "admin:submissions_anomaly_changelist"


@pytest.fixture
def charlie(db: Any) -> Any:
    """Contest staff: the group, with the permissions migration 0006 gave it."""
    user = factories.UserFactory(username="charlie", is_staff=True)
    user.groups.add(Group.objects.get(name="contest staff"))
    return user


@pytest.fixture
def rita(db: Any) -> Any:
    """Staff who may look at anomalies but not mark them reviewed."""
    user = factories.UserFactory(username="rita", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="submissions", codename="view_anomaly")
    )
    return user


@pytest.fixture
def flagged(contest, alice, bob, tmp_path, sent) -> list[Anomaly]:
    """Alice's run: twice as fast as Bob's, with an idle CPU."""
    scored(contest, bob, tmp_path, wall_s=3.0)
    run = scored(contest, alice, tmp_path, wall_s=1.0, resources=meter(0.01, 0.01))
    found = anomalies.anomaly_scan(run.pk)
    assert sorted(anomaly.kind for anomaly in found) == [Anomaly.IDLE_CPU, Anomaly.MUCH_FASTER]
    return found


def _review(client: Any, found: list[Anomaly], note: str | None = None) -> Any:
    data: dict[str, Any] = {
        "action": "mark_reviewed",
        ACTION_CHECKBOX_NAME: [anomaly.pk for anomaly in found],
    }
    if note is not None:
        data.update({"apply": "yes", "reason": note})
    return client.post(reverse(CHANGELIST), data)


def _reviews(found: list[Anomaly]) -> list[tuple[Any, ...]]:
    return list(
        Anomaly.objects.filter(pk__in=[anomaly.pk for anomaly in found])
        .order_by("pk")
        .values_list("reviewed_at", "reviewed_by", "review_note")
    )


def test_the_contest_staff_group_may_view_and_review_anomalies(charlie):
    assert charlie.has_perms(["submissions.view_anomaly", anomalies.REVIEW_ANOMALY])


def test_contest_staff_see_the_anomalies_list(client, charlie, flagged):
    client.force_login(charlie)

    page = client.get(reverse(CHANGELIST))
    unreviewed = client.get(reverse(CHANGELIST), {"reviewed": "no", "kind": Anomaly.IDLE_CPU})

    html = page.content.decode()
    assert page.status_code == 200
    run_id = flagged[0].run_id
    assert reverse("admin:submissions_run_change", args=[run_id]) in html
    assert "alice" in html and str(flagged[0].run.submission.benchmark) in html
    assert all(anomaly.reason[:40] in html for anomaly in flagged)
    assert 'value="mark_reviewed"' in html
    assert unreviewed.status_code == 200
    assert "of CPU" in unreviewed.content.decode()
    assert "best other entrant" not in unreviewed.content.decode()


def test_an_anomaly_page_shows_its_details(client, charlie, flagged):
    client.force_login(charlie)

    page = client.get(reverse("admin:submissions_anomaly_change", args=[flagged[0].pk]))

    assert page.status_code == 200
    assert "wall_time_ns" in page.content.decode()


def test_marking_reviewed_asks_for_a_note_then_records_it_on_each_anomaly(client, charlie, flagged):
    client.force_login(charlie)

    asked = client.post(
        reverse(CHANGELIST),
        {"action": "mark_reviewed", ACTION_CHECKBOX_NAME: [a.pk for a in flagged]},
    )
    blank = _review(client, flagged, note="   ")
    assert _reviews(flagged) == [(None, None, ""), (None, None, "")]
    done = _review(client, flagged, note="Checked the source: ships a tuned ONNX model.")

    assert asked.status_code == blank.status_code == 200
    assert 'name="reason"' in asked.content.decode()
    assert done.status_code == 302
    reviews = _reviews(flagged)
    assert all(at is not None for at, _, _ in reviews)
    assert {(by, note) for _, by, note in reviews} == {
        (charlie.pk, "Checked the source: ships a tuned ONNX model.")
    }
    events = list(AuditEvent.objects.order_by("target"))
    assert [event.target for event in events] == sorted(f"anomaly:{a.pk}" for a in flagged)
    for event in events:
        assert (event.action, event.actor, event.reason) == (
            "anomaly.review",
            charlie,
            "Checked the source: ships a tuned ONNX model.",
        )
        assert event.details["run"] == flagged[0].run_id


def test_a_second_review_is_refused_and_records_nothing_more(client, charlie, flagged):
    client.force_login(charlie)
    _review(client, flagged[:1], note="first look")

    _review(client, flagged, note="second look")

    notes = sorted(note for _, _, note in _reviews(flagged))
    assert notes == ["first look", "second look"]  # the first kept its own note
    assert AuditEvent.objects.count() == 2
    with pytest.raises(errors.InvalidParameter, match="already reviewed"):
        anomalies.anomaly_review(anomaly=flagged[0], actor=charlie, note="third")


def test_staff_without_the_review_permission_are_refused(client, rita, flagged):
    client.force_login(rita)

    listing = client.get(reverse(CHANGELIST))
    _review(client, flagged, note="looks fine to me")

    assert listing.status_code == 200  # may look
    assert 'value="mark_reviewed"' not in listing.content.decode()
    assert _reviews(flagged) == [(None, None, ""), (None, None, "")]
    assert not AuditEvent.objects.exists()


def test_staff_without_any_permission_cannot_see_the_list(client, flagged):
    pat = factories.UserFactory(username="pat", is_staff=True)
    client.force_login(pat)

    assert client.get(reverse(CHANGELIST)).status_code == 403
    _review(client, flagged, note="curious")
    assert _reviews(flagged) == [(None, None, ""), (None, None, "")]
    assert not AuditEvent.objects.exists()


def test_the_action_itself_refuses_staff_without_the_permission(rf, rita, flagged):
    model_admin = django_admin.site._registry[Anomaly]
    request = rf.post("/", {"apply": "yes", "reason": "bypassing the changelist"})
    request.user = rita

    with pytest.raises(PermissionDenied):
        model_admin.mark_reviewed(request, Anomaly.objects.all())
    assert _reviews(flagged) == [(None, None, ""), (None, None, "")]
