"""The host's own speed, probed before and after each run (scoring/host/speed.py), and the
free rescore of a run during which it changed (portal/hosts/speed.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from django.urls import reverse

from portal.audit.models import AuditEvent
from portal.contests.models import LeaderboardEntry
from portal.hosts import speed as host_speed
from portal.submissions.models import AttemptLedger, Run, Submission, SubmissionEvent
from scoring.host import speed
from scoring.run import runner
from tests.scoring.test_runner import FakeEngine, queued, the_run  # noqa: F401
from tests.web.boards import official_run

STEADY = {0: [10_000_000, 10_100_000, 10_050_000], 1: [10_000_000, 10_020_000, 10_010_000]}
SLOWED = {0: [12_000_000, 12_050_000, 12_010_000], 1: [10_000_000, 10_020_000, 10_030_000]}


# The judgement (pure) ---------------------------------------------------------------------


def test_a_steady_host_is_not_marked():
    judged = speed.judge(STEADY, STEADY, 2.0)
    assert (judged.change_pct, judged.changed) == (0.0, False)


def test_one_cpu_slower_after_the_run_beyond_the_band_marks_it():
    judged = speed.judge(STEADY, SLOWED, 2.0)
    assert judged.change_pct == pytest.approx(19.5, abs=0.05)  # CPU 0: 10.05 ms -> 12.01 ms
    assert judged.changed
    # Within a wider band it is not a change.
    assert not speed.judge(STEADY, SLOWED, 25.0).changed


def test_a_change_the_probe_cannot_tell_from_its_own_jitter_is_no_evidence():
    jittery = {0: [10_000_000, 13_000_000, 7_000_000]}  # ±30 % on its own
    after = {0: [11_000_000, 11_000_000, 11_000_000]}
    judged = speed.judge(jittery, after, 2.0)
    assert judged.noise_pct == pytest.approx(30.0)
    assert not judged.changed
    with pytest.raises(ValueError):
        speed.judge({0: [1]}, {1: [1]}, 2.0)


# The probe on this machine -----------------------------------------------------------------


def test_the_probe_is_short_and_puts_the_affinity_back():
    allowed = os.sched_getaffinity(0)
    started = time.monotonic()
    samples = speed.probe()
    assert time.monotonic() - started < 2  # about 0.15 s on 2 idle CPUs
    assert set(samples) <= allowed and len(samples) == min(len(allowed), speed.MAX_CPUS)
    assert all(len(values) == speed.SAMPLES and min(values) > 0 for values in samples.values())
    assert os.sched_getaffinity(0) == allowed


@pytest.mark.serial  # another test process would load the probed CPU too
def test_a_core_taken_during_the_run_marks_it():
    cpu = min(os.sched_getaffinity(0))
    before = speed.probe([cpu])
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(process.pid, {cpu})
        time.sleep(0.2)
        after = speed.probe([cpu])
    finally:
        process.kill()
        process.wait()
    judged = speed.judge(before, after, 2.0)
    # Sharing its CPU with a spinning process, the loop takes about twice as long.
    assert judged.change_pct > 30 and judged.changed, judged


# The run and its free rescore ------------------------------------------------------------


@pytest.fixture
def probed(settings, monkeypatch) -> list[dict[int, list[int]]]:
    """The probe turned on, answering from a list: before, after (per run)."""
    settings.PODIUM_HOST_SPEED_PROBE = True
    answers: list[dict[int, list[int]]] = []
    monkeypatch.setattr(speed, "probe", lambda cpus=None: answers.pop(0))
    return answers


def charges(submission: Submission) -> list[int]:
    return list(AttemptLedger.objects.filter(submission=submission).values_list("delta", flat=True))


def test_a_run_on_a_steady_host_is_kept_and_not_rescored(queued, monkeypatch, sent, probed):  # noqa: F811
    FakeEngine().install(monkeypatch)
    probed += [STEADY, STEADY]

    runner.score_submission(queued.pk)

    run = the_run(queued)
    queued.refresh_from_db()
    assert queued.status == Submission.PASSED
    assert run.host_speed_changed is False
    assert run.host_speed["change_pct"] == 0.0 and run.host_speed["before_ns"]["0"] == 10_050_000
    assert run.overhead_ms["host_speed"] > 0


def test_a_run_during_which_the_host_slowed_is_marked_and_rescored_free(
    queued,  # noqa: F811
    monkeypatch,
    sent,
    probed,
    django_capture_on_commit_callbacks,
):
    FakeEngine().install(monkeypatch)
    probed += [STEADY, SLOWED]
    before = charges(queued)

    with django_capture_on_commit_callbacks(execute=True):
        runner.score_submission(queued.pk)

    run = the_run(queued)
    queued.refresh_from_db()
    assert run.verdict == "passed" and run.host_speed_changed is True
    assert run.host_speed["changed"] is True and run.host_speed["band_pct"] == 3.0
    # Its time still ranks (the board keeps the best run); a free rescore is queued.
    assert LeaderboardEntry.objects.filter(run=run).exists()
    assert queued.status == Submission.QUEUED
    assert charges(queued) == before
    note = SubmissionEvent.objects.filter(submission=queued).latest("at", "id").note
    assert note.startswith("free rescore: the scoring host's own speed changed by +19.5 %")
    rescore = AuditEvent.objects.get(action="submission.rescore", target__endswith=str(queued.pk))
    assert rescore.actor is None  # the platform's own

    # The rescore runs; the host slows again: marked for staff, not rescored a second time.
    probed += [STEADY, SLOWED]
    runner.score_submission(queued.pk)
    second = the_run(queued)
    queued.refresh_from_db()
    assert second.pk != run.pk and second.host_speed_changed is True
    assert queued.status == Submission.PASSED
    assert Run.objects.filter(submission=queued, host_speed_changed=True).count() == 2
    assert AuditEvent.objects.filter(action="submission.rescore").count() == 1


def test_a_wrong_answer_is_not_rescored_for_the_hosts_speed(queued, monkeypatch, sent, probed):  # noqa: F811
    FakeEngine(answer=b"\x03\0\0\0").install(monkeypatch)  # every answer wrong
    probed += [STEADY, SLOWED]

    runner.score_submission(queued.pk)

    run = the_run(queued)
    queued.refresh_from_db()
    assert run.verdict == "failed" and run.host_speed_changed is True  # marked for staff
    assert queued.status == Submission.FAILED  # its time did not decide it: no rescore


def test_a_run_killed_at_the_limit_on_a_slowed_host_is_rescored(queued, monkeypatch, sent, probed):  # noqa: F811
    FakeEngine(wait_result=None).install(monkeypatch)
    probed += [STEADY, SLOWED]

    runner.score_submission(queued.pk)

    run = the_run(queued)
    queued.refresh_from_db()
    assert run.verdict == "errored" and run.killed and run.host_speed_changed
    assert queued.status == Submission.QUEUED


def test_staff_see_the_hosts_speed_on_the_run_and_the_submission(
    queued,  # noqa: F811
    monkeypatch,
    sent,
    probed,
    admin_client,
):
    FakeEngine().install(monkeypatch)
    probed += [STEADY, SLOWED]
    runner.score_submission(queued.pk)
    run = the_run(queued)

    page = admin_client.get(reverse("admin:submissions_run_change", args=[run.pk]))
    html = page.content.decode()
    assert "CHANGED beyond the band" in html
    assert "change 19.5 %, probe noise" in html and "band 3.0 %" in html
    listing = admin_client.get(
        reverse("admin:submissions_run_changelist") + "?host_speed_changed__exact=1"
    )
    assert f">{run.pk}<" in listing.content.decode()
    submission_page = admin_client.get(
        reverse("admin:submissions_submission_change", args=[queued.pk])
    )
    assert "host speed changed" in submission_page.content.decode().lower()


# What the free rescore leaves to staff -----------------------------------------------------


def marked_run(benchmark, entrant, **fields) -> Run:
    """A passing official run marked for the host's speed (as the worker records it)."""
    run = official_run(benchmark, entrant, 100_000_000)
    speed_fields = {"change_pct": 19.5, "band_pct": 3.0, "changed": True}
    Run.objects.filter(pk=run.pk).update(
        host_speed_changed=True, host_speed=speed_fields, try_number=1, **fields
    )
    return Run.objects.get(pk=run.pk)


def test_a_marked_verification_or_final_run_is_left_to_staff(benchmark, alice):
    for purpose in (Run.VERIFY, Run.FINAL):
        run = marked_run(benchmark, alice, purpose=purpose)

        assert host_speed.run_host_speed_rescore(run_id=run.pk) is False

        assert Run.objects.get(pk=run.pk).host_speed_changed is True  # still marked
        assert Submission.objects.get(pk=run.submission_id).status == Submission.PASSED
    assert not AuditEvent.objects.filter(action="submission.rescore").exists()


def test_a_marked_run_whose_submission_cannot_be_rescored_now_stays_marked(benchmark, alice):
    run = marked_run(benchmark, alice)
    Submission.objects.filter(pk=run.submission_id).update(status=Submission.VERIFYING)

    assert host_speed.run_host_speed_rescore(run_id=run.pk) is False

    assert Run.objects.get(pk=run.pk).host_speed_changed is True
    assert Submission.objects.get(pk=run.submission_id).status == Submission.VERIFYING
    assert not AuditEvent.objects.filter(action="submission.rescore").exists()
