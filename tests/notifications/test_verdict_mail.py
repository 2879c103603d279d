"""Verdict mail: one mail to the entrant per verdict, the opt-out, EMAIL_URL, a real SMTP server.

The services are driven as the scoring worker drives them (accept, build, claim, mark
running, record); each verdict queues one mail task, which :func:`deliver` runs as the
builds worker would. Mail goes to Django's locmem outbox, except in the end-to-end test,
which sends through the SMTP backend to an SMTP server started here (and the pipeline's
end-to-end test, tests/e2e, through real workers).
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.db import transaction

from portal.contests.models import Cohort, CohortItem, LeaderboardEntry
from portal.core import jobs, storage
from portal.notifications.mailconfig import email_url_settings
from portal.notifications.models import NotificationPreference
from portal.notifications.services import notification_preference_set
from portal.notifications.tasks import send_verdict_mail
from portal.submissions import staff
from portal.submissions.builds import submission_build_finished
from portal.submissions.intake import submission_accept
from portal.submissions.models import Run, Submission
from portal.submissions.runs import (
    run_claim,
    run_mark_running,
    run_record_infra_failure,
    run_record_verdict,
)
from portal.submissions.services import submission_transition
from portal.submissions.verification import run_record_verification
from tests import factories, smtp

SITE = "https://podium.example.org"
LEASE_S = 600
SECOND = 1_000_000_000
WALL_NS = 1_234_567_000  # shown as "1,234.567 ms"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def site(settings: Any) -> None:
    settings.PODIUM_SITE_URL = SITE


@pytest.fixture
def contest(db: Any) -> Any:
    benchmark = factories.BenchmarkFactory(slug="mnist-speed", title="MNIST speed")
    official = Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.PRACTICE)
    # The answers an entrant must never be mailed.
    for position in range(3):
        CohortItem.objects.create(
            cohort=official,
            position=position,
            canonical_name=f"secret-image-{position}.png",
            sha256=f"{position:064d}",
            reference_class=700 + position,
        )
    return benchmark


def source_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = b"#!/bin/sh\nexit 0\n"
        info = tarfile.TarInfo("run")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def accepted(benchmark: Any, entrant: Any, tmp_path: Path, kind: str) -> Submission:
    environment = factories.EnvironmentFactory(owner=entrant, benchmark=benchmark)
    archive = tmp_path / f"{uuid.uuid4().hex}.tar.gz"
    archive.write_bytes(source_archive())
    submission = submission_accept(
        entrant=entrant,
        benchmark=benchmark,
        environment=environment,
        source_file=archive,
        source_name="source.tar.gz",
        kind=kind,
    )
    assert submission_transition(submission.pk, frm=[Submission.ACCEPTED], to=Submission.BUILDING)
    return submission


def running(benchmark: Any, entrant: Any, tmp_path: Path, kind: str = Submission.OFFICIAL) -> Run:
    submission = accepted(benchmark, entrant, tmp_path, kind)
    assert submission_build_finished(submission_id=submission.pk, ok=True, image_tag="x:1")
    run = run_claim(submission.pk, lease_s=LEASE_S)
    assert run is not None
    assert run_mark_running(run_id=run.pk, lease_s=LEASE_S)
    return run


def verdict(run: Run, status: str = Submission.PASSED, matches: int = 3) -> bool:
    return run_record_verdict(
        run_id=run.pk,
        status=status,
        reason=f"{matches} of 3 predictions match the reference.",
        wall_time_ns=WALL_NS,
        matches=matches,
        total=3,
    )


def status_of(submission_id: int) -> str:
    return Submission.objects.values_list("status", flat=True).get(pk=submission_id)


def deliver(sent: list[tuple[str, tuple[Any, ...]]]) -> int:
    """Run the verdict mail tasks queued so far, as the builds worker would; how many."""
    mails = [args for name, args in sent if name == jobs.SEND_VERDICT_MAIL]
    sent[:] = [(name, args) for name, args in sent if name != jobs.SEND_VERDICT_MAIL]
    for args in mails:
        send_verdict_mail(*args)
    return len(mails)


def mails_to(address: str) -> list[Any]:
    return [message for message in mail.outbox if message.to == [address]]


# Each way a submission reaches a verdict, by the service that reaches it.


def passes(contest: Any, alice: Any, tmp_path: Path) -> int:
    run = running(contest, alice, tmp_path)
    assert verdict(run)
    return int(run.submission_id)


def fails(contest: Any, alice: Any, tmp_path: Path) -> int:
    run = running(contest, alice, tmp_path)
    assert verdict(run, Submission.FAILED, matches=1)
    return int(run.submission_id)


def errs(contest: Any, alice: Any, tmp_path: Path) -> int:
    run = running(contest, alice, tmp_path)
    assert run_record_verdict(
        run_id=run.pk, status=Submission.ERRORED, reason="The program exited with code 3."
    )
    return int(run.submission_id)


def practice_passes(contest: Any, alice: Any, tmp_path: Path) -> int:
    run = running(contest, alice, tmp_path, kind=Submission.PRACTICE)
    assert verdict(run)
    return int(run.submission_id)


def build_fails(contest: Any, alice: Any, tmp_path: Path) -> int:
    submission = accepted(contest, alice, tmp_path, Submission.OFFICIAL)
    assert submission_build_finished(submission_id=submission.pk, ok=False, reason="exit 2")
    return int(submission.pk)


def refunded_after_two_platform_faults(contest: Any, alice: Any, tmp_path: Path) -> int:
    run = running(contest, alice, tmp_path)
    assert run_record_infra_failure(run_id=run.pk, reason="engine fell over")
    again = run_claim(run.submission_id, lease_s=LEASE_S)
    assert again is not None
    assert run_record_infra_failure(run_id=again.pk, reason="engine fell over again")
    return int(run.submission_id)


def cancelled_by_staff(contest: Any, alice: Any, tmp_path: Path) -> int:
    run = running(contest, alice, tmp_path)
    reviewer = factories.UserFactory(username="reviewer", is_staff=True, is_superuser=True)
    staff.submission_cancel(submission=run.submission, actor=reviewer, reason="host broken")
    return int(run.submission_id)


def rejected_by_verification(contest: Any, alice: Any, tmp_path: Path) -> int:
    contest.verify_top = 20
    contest.save(update_fields=["verify_top"])
    run = running(contest, alice, tmp_path)
    assert verdict(run)
    assert status_of(run.submission_id) == Submission.VERIFYING
    for _ in range(3):  # a timing miss is measured three times before it rejects
        factories.ready_sets(run.cohort)  # each verification run's claim takes one
        check = run_claim(run.submission_id, lease_s=LEASE_S)
        assert check is not None and check.purpose == Run.VERIFY
        assert run_mark_running(run_id=check.pk, lease_s=LEASE_S)
        assert run_record_verification(
            run_id=check.pk, status=Submission.PASSED, reason="ok", wall_time_ns=3 * WALL_NS
        )
    return int(run.submission_id)


@pytest.mark.parametrize(
    ("reach", "status", "subject_words", "body_words"),
    [
        (passes, "passed", "passed", "Wall time:    1,234.567 ms"),
        (fails, "failed", "did not pass", "1 of 3 predictions match"),
        (errs, "errored", "gave no valid result", "exited with code 3"),
        (practice_passes, "passed", "passed", "Your practice run"),
        (build_fails, "build_failed", "failed to build", "exit 2"),
        (
            refunded_after_two_platform_faults,
            "infra_failed",
            "could not be scored (platform failure)",
            "was refunded",
        ),
        (cancelled_by_staff, "cancelled", "was cancelled by staff", "was refunded"),
        (rejected_by_verification, "rejected_verification", "failed its verification", "slower"),
    ],
)
def test_each_verdict_mails_its_entrant_once(
    contest,
    alice,
    bob,
    tmp_path,
    sent,
    django_capture_on_commit_callbacks,
    reach,
    status,
    subject_words,
    body_words,
):
    with django_capture_on_commit_callbacks(execute=True):
        submission_id = reach(contest, alice, tmp_path)

    assert status_of(submission_id) == status
    assert mail.outbox == []  # the scoring side only queues it
    assert deliver(sent) == 1
    (message,) = mails_to("alice@example.com")
    assert message.subject == f"[Podium] mnist-speed: submission {submission_id} {subject_words}"
    assert f"Status:       {status}\n" in message.body
    assert body_words in message.body
    assert f"{SITE}/submissions/{submission_id}/" in message.body
    assert mails_to("bob@example.com") == []


def test_the_mail_has_the_numbers_and_the_link_but_no_answers(
    contest, alice, tmp_path, sent, django_capture_on_commit_callbacks
):
    run = running(contest, alice, tmp_path)
    # What the run saw per image: its log and output (as the runner leaves them).
    storage.run_dir(run.pk).mkdir(parents=True, exist_ok=True)
    storage.run_log(run.pk).write_text("secret-image-1.png -> predicted 701\n")
    with django_capture_on_commit_callbacks(execute=True):
        assert verdict(run)
    deliver(sent)

    (message,) = mail.outbox
    body = message.body
    assert message.to == ["alice@example.com"]
    assert f"Submission:   {run.submission_id} (official)" in body
    assert "Benchmark:    MNIST speed (mnist-speed)" in body
    assert f"Wall time:    1,234.567 ms ({WALL_NS} ns)" in body
    assert "Agreement:    3 / 3 top-1 matches" in body
    assert f"Its page: {SITE}/submissions/{run.submission_id}/" in body
    assert f"{SITE}/account/" in body  # where to turn it off
    assert "secret-image" not in body and "predicted" not in body
    assert message.extra_headers["Auto-Submitted"] == "auto-generated"


def test_an_entrant_who_turned_verdict_mail_off_gets_none(
    contest, alice, bob, tmp_path, sent, django_capture_on_commit_callbacks
):
    notification_preference_set(user=alice, verdict_emails=False)
    with django_capture_on_commit_callbacks(execute=True):
        assert verdict(running(contest, alice, tmp_path))
        assert verdict(running(contest, bob, tmp_path))
    deliver(sent)

    assert [message.to for message in mail.outbox] == [["bob@example.com"]]


def test_a_redelivered_verdict_or_a_late_reaper_sends_no_second_mail(
    contest, alice, tmp_path, sent, django_capture_on_commit_callbacks
):
    run = running(contest, alice, tmp_path)
    with django_capture_on_commit_callbacks(execute=True):
        assert verdict(run)
    with django_capture_on_commit_callbacks(execute=True):
        assert not verdict(run)  # the task ran again (a retry, a redelivery)
        assert not run_record_infra_failure(run_id=run.pk, reason="lease expired")  # the reaper

    assert status_of(run.submission_id) == Submission.PASSED
    assert deliver(sent) == 1
    assert len(mail.outbox) == 1


def test_a_mail_about_a_status_the_submission_no_longer_has_is_not_sent(
    contest, alice, tmp_path, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        submission_id = passes(contest, alice, tmp_path)
    # Staff requeued it before the mail went: its next verdict will mail.
    Submission.objects.filter(pk=submission_id).update(status=Submission.QUEUED)

    assert deliver(sent) == 1
    assert mail.outbox == []
    # A stray message (another database's submission, a wrong status) mails nothing either.
    send_verdict_mail(submission_id + 1000, Submission.PASSED)
    assert mail.outbox == []


def test_a_verdict_that_rolls_back_sends_nothing(
    contest, alice, tmp_path, sent, django_capture_on_commit_callbacks
):
    run = running(contest, alice, tmp_path)
    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        assert verdict(run)
        raise RuntimeError("the worker failed before the commit")

    assert status_of(run.submission_id) == Submission.RUNNING
    assert deliver(sent) == 0
    # The retry that does commit mails once.
    with django_capture_on_commit_callbacks(execute=True):
        assert verdict(run)
    assert deliver(sent) == 1
    assert len(mail.outbox) == 1


def test_an_smtp_server_that_refuses_does_not_touch_the_verdict(
    contest, alice, tmp_path, sent, settings, caplog, django_capture_on_commit_callbacks
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", smtp.closed_port()
    settings.EMAIL_TIMEOUT = 5
    run = running(contest, alice, tmp_path)

    with django_capture_on_commit_callbacks(execute=True):
        assert verdict(run)
    deliver(sent)

    assert status_of(run.submission_id) == Submission.PASSED
    assert LeaderboardEntry.objects.filter(benchmark=contest, run=run).exists()
    failures = [r for r in caplog.records if r.name == "portal.notifications.services"]
    assert [r.getMessage() for r in failures] == [
        f"could not mail the verdict passed of submission {run.submission_id}"
    ]
    assert failures[0].exc_info is not None


def test_a_broker_that_refuses_the_mail_does_not_touch_the_verdict(
    contest, alice, tmp_path, sent, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    run = running(contest, alice, tmp_path)

    def refuse(name: str, args: Any = (), **options: Any) -> None:
        raise ConnectionError("the broker is down")

    monkeypatch.setattr(jobs.app, "send_task", refuse)
    with django_capture_on_commit_callbacks(execute=True):
        assert verdict(run)

    assert status_of(run.submission_id) == Submission.PASSED
    assert LeaderboardEntry.objects.filter(benchmark=contest, run=run).exists()
    assert "the broker is down" in caplog.text
    assert mail.outbox == []


# The preference on the account page ------------------------------------------------------


def checkbox(page: str) -> str:
    """The verdict mail checkbox's <input> tag on the account page."""
    (tag,) = re.findall(r"<input [^>]*name=\"verdict_emails\"[^>]*>", page)
    return tag


def test_the_account_page_turns_verdict_mail_off_and_on(client, alice):
    client.force_login(alice)
    page = client.get("/account/").content.decode()
    assert " checked" in checkbox(page)  # on unless turned off
    assert 'aria-describedby="id_verdict_emails_helptext"' in checkbox(page)
    assert '<label for="id_verdict_emails">Email me when a submission reaches a verdict' in page

    off = client.post("/account/", {}, follow=True)  # an unchecked box sends nothing

    assert off.redirect_chain == [("/account/", 302)]
    assert NotificationPreference.objects.get(user=alice).verdict_emails is False
    assert "Verdict emails are off." in off.content.decode()
    assert " checked" not in checkbox(off.content.decode())

    client.post("/account/", {"verdict_emails": "on"})
    assert NotificationPreference.objects.get(user=alice).verdict_emails is True
    assert " checked" in checkbox(client.get("/account/").content.decode())


def test_only_the_signed_in_entrant_changes_their_preference(client, alice):
    response = client.post("/account/", {})

    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert not NotificationPreference.objects.exists()


# EMAIL_URL --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "smtp://user:p%40ss@mail.example.org:587/?tls=True",
            {"EMAIL_HOST": "mail.example.org", "EMAIL_PORT": 587, "EMAIL_USE_TLS": True},
        ),
        ("smtp+ssl://u:p@mail.example.org:465", {"EMAIL_USE_SSL": True, "EMAIL_USE_TLS": False}),
        ("smtp://mail.example.org/?email_use_tls=False", {"EMAIL_USE_TLS": False}),
        ("smtp://mail.example.org/?timeout=3", {"EMAIL_TIMEOUT": 3.0, "EMAIL_PORT": 25}),
        (
            "consolemail://",
            {"EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend"},
        ),
    ],
)
def test_email_url_decides_the_mail_settings(url, expected):
    found = email_url_settings(url)
    assert {key: found[key] for key in expected} == expected


def settings_in_a_fresh_process(**env: str) -> dict[str, Any]:
    names = ["EMAIL_BACKEND", "EMAIL_HOST", "EMAIL_PORT", "EMAIL_HOST_USER"]
    names += ["EMAIL_HOST_PASSWORD", "EMAIL_USE_TLS", "EMAIL_TIMEOUT"]
    script = (
        "import json; from django.conf import settings; "
        f"print(json.dumps({{n: getattr(settings, n) for n in {names!r}}} | "
        "{'has_url': hasattr(settings, 'EMAIL_URL')}))"
    )
    environment = {key: value for key, value in os.environ.items() if not key.startswith("EMAIL")}
    environment |= {"DJANGO_SETTINGS_MODULE": "portal.settings", **env}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_settings_read_email_url_over_the_separate_variables(tmp_path):
    plain = settings_in_a_fresh_process()
    assert plain["EMAIL_BACKEND"] == "django.core.mail.backends.console.EmailBackend"

    found = settings_in_a_fresh_process(
        EMAIL_URL="smtp://mailer:p%40ss@mail.example.org:587/?tls=True",
        EMAIL_HOST="ignored.example.org",
        EMAIL_PORT="2525",
    )
    assert found == {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "mail.example.org",
        "EMAIL_PORT": 587,
        "EMAIL_HOST_USER": "mailer",
        "EMAIL_HOST_PASSWORD": "p@ss",
        "EMAIL_USE_TLS": True,
        "EMAIL_TIMEOUT": 10.0,
        "has_url": False,  # it holds the password: not kept as a setting
    }

    secret = tmp_path / "email_url"
    secret.write_text("smtp://mailer:from-a-file@mail.example.org:25\n")
    from_file = settings_in_a_fresh_process(EMAIL_URL_FILE=str(secret))
    assert from_file["EMAIL_HOST_PASSWORD"] == "from-a-file"
    # What compose mounts when no mail server is named: an empty secret, so the console.
    unset = settings_in_a_fresh_process(EMAIL_URL_FILE="/dev/null")
    assert unset["EMAIL_BACKEND"] == "django.core.mail.backends.console.EmailBackend"


# End to end: a real SMTP server ------------------------------------------------------------


@pytest.fixture
def collector() -> Iterator[smtp.Collector]:
    with smtp.smtp_server() as server:
        yield server


def test_a_verdict_reaches_a_real_smtp_server(
    transactional_db, collector, settings, tmp_path, sent
):
    for name, value in email_url_settings(f"smtp://127.0.0.1:{collector.port}").items():
        setattr(settings, name, value)
    benchmark = factories.BenchmarkFactory(slug="mnist-speed", title="MNIST speed")
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    alice = factories.UserFactory(username="alice")

    run = running(benchmark, alice, tmp_path)  # each step commits: nothing is mailed yet
    assert collector.messages == []
    assert verdict(run)  # commits; the mail is queued after the commit
    assert collector.messages == []
    assert deliver(sent) == 1  # as the builds worker runs it

    ((recipients, message),) = collector.messages
    assert recipients == ["alice@example.com"]
    assert message["Subject"] == f"[Podium] mnist-speed: submission {run.submission_id} passed"
    assert message["To"] == "alice@example.com"
    body = message.get_content()
    assert "Status:       passed" in body
    assert "Wall time:    1,234.567 ms" in body
    assert f"{SITE}/submissions/{run.submission_id}/" in body
    assert status_of(run.submission_id) == Submission.PASSED
