"""The Django admin: every model is there for staff; records are read-only; reads are audited."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.contests.models import Cohort, CohortItem
from portal.submissions.models import Submission
from tests import factories

MODELS = [
    "contests.benchmark",
    "contests.cohort",
    "contests.cohortitem",
    "contests.leaderboardentry",
    "contests.contest",
    "contests.announcement",
    "environments.environment",
    "environments.environmentevent",
    "submissions.submission",
    "submissions.run",
    "submissions.attemptledger",
    "submissions.submissionevent",
    "audit.auditevent",
    "accounts.apitoken",
]


def test_every_model_is_registered():
    registered = {model._meta.label_lower for model in admin.site._registry}

    assert set(MODELS) <= registered


@pytest.mark.parametrize("label", MODELS)
def test_staff_can_list_each_model(client, staff, benchmark, label):
    client.force_login(staff)
    app_label, model = label.split(".")

    page = client.get(reverse(f"admin:{app_label}_{model}_changelist"))

    assert page.status_code == 200


def test_benchmark_admin_groups_the_rule_settings(client, staff, benchmark):
    client.force_login(staff)

    html = client.get(reverse("admin:contests_benchmark_change", args=[benchmark.pk])).content
    html = html.decode()

    for heading in ("Window", "Pass gate", "Attempts", "Environments and builds", "Scored run"):
        assert heading in html
    assert 'name="pass_min_matches"' in html


def test_benchmark_admin_sets_the_gpu_energy_floor(client, staff, benchmark):
    client.force_login(staff)

    html = client.get(reverse("admin:contests_benchmark_change", args=[benchmark.pk])).content
    html = html.decode()

    assert "GPU energy (the low_energy anomaly)" in html
    assert 'name="reference_energy_per_image_j"' in html
    assert 'name="energy_floor_pct" value="25"' in html


def test_entrants_cannot_reach_the_admin(client, alice):
    client.force_login(alice)

    assert client.get(reverse("admin:index")).status_code == 302


def test_audit_events_cannot_be_added_or_changed(client, staff):
    event = AuditEvent.objects.create(actor=staff, action="source.download", target="x")
    client.force_login(staff)

    assert client.get(reverse("admin:audit_auditevent_add")).status_code == 403
    page = client.post(
        reverse("admin:audit_auditevent_change", args=[event.pk]), {"action": "edited"}
    )
    event.refresh_from_db()
    assert page.status_code == 403
    assert event.action == "source.download"


def test_reading_cohort_items_is_audited(client, staff, benchmark):
    cohort = Cohort.objects.create(benchmark=benchmark, kind=Cohort.OFFICIAL)
    item = CohortItem.objects.create(
        cohort=cohort, position=0, canonical_name="n.jpg", sha256="0" * 64, reference_class=7
    )
    client.force_login(staff)

    listed = client.get(reverse("admin:contests_cohortitem_changelist")).content.decode()
    shown = client.get(reverse("admin:contests_cohortitem_change", args=[item.pk]))

    actions = list(AuditEvent.objects.order_by("id").values_list("action", "actor__username"))
    assert actions == [("cohort.members.view", "staff"), ("cohort.members.view", "staff")]
    assert "n.jpg" in listed
    # The reference answer is shown only by the audited export, never on these pages.
    assert "Reference class" not in listed + shown.content.decode()


def test_disqualify_action_needs_a_reason_then_records_it(client, staff, alice, benchmark):
    environment = factories.EnvironmentFactory(owner=alice, benchmark=benchmark)
    submission = Submission.objects.create(
        entrant=alice,
        benchmark=benchmark,
        environment=environment,
        status=Submission.PASSED,
        submitted_at=timezone.now(),
        source_name="a.tar.gz",
        source_format="tar.gz",
        source_sha256="1" * 64,
        source_bytes=1,
    )
    client.force_login(staff)
    url = reverse("admin:submissions_submission_changelist")
    chosen = {"action": "disqualify", ACTION_CHECKBOX_NAME: [submission.pk]}

    ask = client.post(url, chosen)
    submission.refresh_from_db()
    assert ask.status_code == 200
    assert "Reason" in ask.content.decode()
    assert submission.disqualified_at is None

    client.post(url, {**chosen, "apply": "yes", "reason": "copied another entrant's model"})
    submission.refresh_from_db()
    assert submission.disqualified_by == staff
    assert submission.disqualification_reason == "copied another entrant's model"
    assert AuditEvent.objects.filter(action="submission.disqualify").exists()
