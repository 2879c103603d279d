"""Staff tools in the Django admin: what staff see, and the audited actions and downloads."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from portal.audit.models import AuditEvent
from portal.contests import review
from portal.contests.models import Benchmark, Cohort
from portal.contests.review import cohort_summary
from portal.core import errors, storage
from portal.submissions import evidence
from portal.submissions.models import Submission
from tests.contests.test_admin_validation import form_data

BROWSER = "Mozilla/5.0 (Staff laptop)"


@pytest.fixture
def admin_client(client, staff):
    client.force_login(staff)
    return client


def _bundle(response) -> dict[str, bytes]:
    data = b"".join(response.streaming_content)
    with tarfile.open(fileobj=io.BytesIO(data)) as bundle:
        return {
            member.name: bundle.extractfile(member).read()
            for member in bundle.getmembers()
            if member.isfile()
        }


# Submissions and runs ---------------------------------------------------------------


def test_the_submission_page_shows_digests_logs_and_the_source_link(admin_client, scored):
    submission = scored.submission
    page = admin_client.get(reverse("admin:submissions_submission_change", args=[submission.pk]))

    html = page.content.decode()
    assert page.status_code == 200
    assert submission.source_sha256 in html
    assert "sha256:" + "5" * 64 in html
    assert "scored 2 rows" in html  # the latest run's log tail
    assert reverse("admin:submissions_submission_source", args=[submission.pk]) in html
    assert not AuditEvent.objects.exists()  # looking is not downloading


def test_the_run_page_shows_health_readings_and_the_evidence_link(admin_client, scored):
    page = admin_client.get(reverse("admin:submissions_run_change", args=[scored.pk]))

    html = page.content.decode()
    assert "temperature_c" in html and "0.97" in html
    assert reverse("admin:submissions_run_evidence", args=[scored.pk]) in html
    assert "CPU 1.50 s user + 0.25 s system (1.40 CPU-s per wall-s)" in html
    assert "peak memory 3.0 MiB · peak PIDs 9 · read 0 B, written 4.0 KiB" in html


def test_a_source_download_asks_why_then_is_audited(admin_client, submission, staff):
    url = reverse("admin:submissions_submission_source", args=[submission.pk])

    asked = admin_client.get(url)
    blank = admin_client.post(url, {"apply": "yes", "reason": "  "})
    served = admin_client.post(
        url,
        {"apply": "yes", "reason": "top-3 review"},
        REMOTE_ADDR="203.0.113.5",
        HTTP_USER_AGENT=BROWSER,
    )

    assert asked.status_code == blank.status_code == 200
    assert 'name="reason"' in asked.content.decode()
    assert b"".join(served.streaming_content)[:2] == b"\x1f\x8b"
    assert f"submission-{submission.pk}-source.tar.gz" in served["Content-Disposition"]
    event = AuditEvent.objects.get()
    assert (event.action, event.actor, event.reason) == ("source.download", staff, "top-3 review")
    assert (event.remote_addr, event.user_agent) == ("203.0.113.5", BROWSER)


def test_the_evidence_bundle_holds_the_run_record_and_the_kept_files(admin_client, scored, staff):
    url = reverse("admin:submissions_run_evidence", args=[scored.pk])

    asked = admin_client.get(url)
    served = admin_client.post(url, {"apply": "yes", "reason": "appeal by alice"})

    assert "names the cohort" in asked.content.decode()
    files = _bundle(served)
    prefix = f"run-{scored.pk}/"
    assert set(files) == {
        prefix + name
        for name in (
            "run.json",
            "manifest.tsv",
            "mapping.tsv",
            "output.bin",
            "supervisor.json",
            "run.log",
        )
    }
    record = json.loads(files[prefix + "run.json"])
    assert record["run"]["wall_time_ns"] == 1_234_567
    assert record["run"]["health_readings"] == {"cpu_idle": 0.97, "temperature_c": 41}
    assert record["digests"] == {
        "source": scored.submission.source_sha256,
        "environment_image": scored.submission.environment_image_digest,
        "submission_image": "sha256:" + "5" * 64,
        "output": "6" * 64,
        "supervisor": "7" * 64,
    }
    assert record["missing"] == ["build.log", "environment-build.log"]
    assert [row["status"] for row in record["submission"]["timeline"]] == ["accepted"]
    assert files[prefix + "mapping.tsv"].startswith(b"0\tr1\tx1.jpg\tcats/a.jpg\n")
    assert files[prefix + "output.bin"] == b"\x19\x01\x00\x00\xcf\x00\x00\x00"
    event = AuditEvent.objects.get()
    assert (event.action, event.target, event.reason, event.actor) == (
        "run.evidence.download",
        f"run:{scored.pk}",
        "appeal by alice",
        staff,
    )


def test_the_requeue_action_sends_an_accepted_submission_again(
    admin_client, submission, sent, django_capture_on_commit_callbacks
):
    sent.clear()
    url = reverse("admin:submissions_submission_changelist")
    chosen = {"action": "requeue", ACTION_CHECKBOX_NAME: [submission.pk]}

    asked = admin_client.post(url, chosen)
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(url, {**chosen, "apply": "yes", "reason": ""})

    assert "Requeue" in asked.content.decode()
    assert sent == [("scoring.build_submission", (submission.pk,))]
    assert AuditEvent.objects.get().action == "submission.requeue"


def test_a_rescore_is_labelled_in_the_timeline(admin_client, scored):
    url = reverse("admin:submissions_submission_changelist")

    admin_client.post(
        url,
        {
            "action": "rescore",
            ACTION_CHECKBOX_NAME: [scored.submission_id],
            "apply": "yes",
            "reason": "noisy machine",
        },
    )

    submission = Submission.objects.get(pk=scored.submission_id)
    assert submission.status == Submission.QUEUED
    assert submission.events.last().note == "rescore requested by staff: noisy machine"
    assert submission.ledger.count() == 1  # the original charge only


# Cohorts ----------------------------------------------------------------------------


def test_a_cohort_shows_counts_and_digests_but_not_answers(admin_client, official):
    listing = admin_client.get(reverse("admin:contests_cohort_changelist")).content.decode()
    page = admin_client.get(reverse("admin:contests_cohort_change", args=[official.pk]))

    summary = cohort_summary(official)
    html = page.content.decode()
    assert ">2<" in listing  # the member count
    assert summary.members_sha256 in html and summary.answers_sha256 in html
    assert "cats/a.jpg" not in html and "281" not in html
    assert not AuditEvent.objects.exists()


def test_the_digests_change_when_an_answer_changes(official):
    before = cohort_summary(official)
    official.items.filter(position=1).update(reference_class=208)

    after = cohort_summary(official)
    assert after.members_sha256 == before.members_sha256
    assert after.answers_sha256 != before.answers_sha256
    assert after.members == 2


def test_reference_answers_need_a_reason_and_are_audited(admin_client, official, staff):
    url = reverse("admin:contests_cohort_changelist")
    chosen = {"action": "export_answers", ACTION_CHECKBOX_NAME: [official.pk]}

    asked = admin_client.post(url, chosen)
    blank = admin_client.post(url, {**chosen, "apply": "yes", "reason": ""})
    assert not AuditEvent.objects.exists()
    served = admin_client.post(url, {**chosen, "apply": "yes", "reason": "dispute #4"})

    assert "required" in asked.content.decode() and "required" in blank.content.decode()
    assert served.content.decode().splitlines() == [
        "position\tcanonical_name\treference_class",
        "0\tcats/a.jpg\t281",
        "1\tdogs/b.jpg\t207",
    ]
    event = AuditEvent.objects.get()
    assert (event.action, event.target, event.reason, event.actor) == (
        "cohort.answers.export",
        f"cohort:{official.pk}",
        "dispute #4",
        staff,
    )
    assert event.details == {"benchmark": official.benchmark.slug, "kind": "official"}


def test_the_member_list_export_is_audited_and_holds_no_answers(admin_client, official):
    url = reverse("admin:contests_cohort_changelist")

    served = admin_client.post(
        url,
        {"action": "export_members", ACTION_CHECKBOX_NAME: [official.pk], "apply": "yes"},
    )

    text = served.content.decode()
    assert text.splitlines()[1] == "0\tcats/a.jpg\t" + "0" * 64
    assert "281" not in text
    assert AuditEvent.objects.get().action == "cohort.members.export"


# Benchmark rules --------------------------------------------------------------------


def test_a_rules_change_is_audited_with_old_and_new_values(admin_client, benchmark, staff):
    url = reverse("admin:contests_benchmark_change", args=[benchmark.pk])

    unchanged = admin_client.post(url, form_data(benchmark))
    assert not AuditEvent.objects.exists()
    changed = admin_client.post(
        url,
        form_data(benchmark, attempts_per_day=3, pass_min_matches=9950),
        HTTP_USER_AGENT=BROWSER,
    )

    assert unchanged.status_code == changed.status_code == 302
    event = AuditEvent.objects.get()
    assert (event.action, event.target, event.actor, event.user_agent) == (
        "benchmark.rules.change",
        f"benchmark:{benchmark.slug}",
        staff,
        BROWSER,
    )
    assert event.details == {
        "changes": {"attempts_per_day": [2, 3], "pass_min_matches": [9900, 9950]}
    }


def test_the_environment_page_shows_its_build_log(admin_client, submission):
    log = storage.ensure_dir(storage.environment_dir(submission.environment_id)) / "build.log"
    log.write_text("".join(f"step {n}\n" for n in range(300)))

    page = admin_client.get(
        reverse("admin:environments_environment_change", args=[submission.environment_id])
    )

    html = page.content.decode()
    assert "step 299" in html and "step 100" in html
    assert "step 99\n" not in html  # the last 200 lines only


@pytest.mark.parametrize("reason", ["", "   "])
def test_the_services_refuse_answers_and_evidence_without_a_reason(reason, scored, staff):
    with pytest.raises(errors.InvalidParameter, match="reason"):
        review.cohort_answers_export(cohort=scored.cohort, actor=staff, reason=reason)
    with pytest.raises(errors.InvalidParameter, match="reason"):
        evidence.run_evidence_review(run=scored, actor=staff, reason=reason)

    assert not AuditEvent.objects.exists()


def test_an_export_of_several_cohorts_at_once_is_refused(admin_client, official, benchmark):
    practice = Cohort.objects.create(benchmark=benchmark, kind=Cohort.PRACTICE)

    response = admin_client.post(
        reverse("admin:contests_cohort_changelist"),
        {
            "action": "export_answers",
            ACTION_CHECKBOX_NAME: [official.pk, practice.pk],
            "apply": "yes",
            "reason": "both",
        },
        follow=True,
    )

    assert "Choose exactly one cohort" in response.content.decode()
    assert not AuditEvent.objects.exists()


def test_creating_and_deleting_a_benchmark_are_audited(admin_client, benchmark, staff):
    data = {**form_data(benchmark), "slug": "second", "title": "Second"}
    admin_client.post(reverse("admin:contests_benchmark_add"), data)
    second = Benchmark.objects.get(slug="second")
    admin_client.post(reverse("admin:contests_benchmark_delete", args=[second.pk]), {"post": "yes"})

    events = list(AuditEvent.objects.order_by("id").values_list("action", "target", "actor"))
    assert events == [
        ("benchmark.create", "benchmark:second", staff.pk),
        ("benchmark.delete", "benchmark:second", staff.pk),
    ]
    assert not Benchmark.objects.filter(slug="second").exists()
