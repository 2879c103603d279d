"""The audit trail for auditors: filtered, oldest first, as CSV or JSON lines.

Every export is itself an audit event, recorded before the first line is produced.

Exporting needs its own permission, :data:`EXPORT_PERMISSION` ("Can export the audit
trail"), not merely a staff account: the trail holds every staff member's addresses and
reasons. No group is given it by its migration, so by default only superusers hold it;
an administrator grants it to the auditors who need it.

CSV cells are neutralised for spreadsheets (:func:`csv_cell`): whatever an entrant or a
client put in a target, a reason or a user agent opens as text, never as a formula.
JSON lines are left exact: they are for programs, which run nothing.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from portal.audit.models import AuditEvent
from portal.audit.services import NOWHERE, Origin, audit_record
from portal.core import errors

FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}
EXPORT_PERMISSION = "audit.export_auditevent"
# What a spreadsheet reads as the start of a formula (OWASP's CSV injection list).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
COLUMNS = [
    "id",
    "at",
    "actor",
    "action",
    "target",
    "remote_addr",
    "user_agent",
    "reason",
    "details",
]


@dataclass(frozen=True)
class AuditFilter:
    """Which events to export: ``since <= at < until``, by actor usernames and actions."""

    since: dt.datetime | None = None
    until: dt.datetime | None = None
    actors: tuple[str, ...] = field(default_factory=tuple)
    actions: tuple[str, ...] = field(default_factory=tuple)

    def as_details(self) -> dict[str, Any]:
        values = asdict(self)
        for key in ("since", "until"):
            values[key] = values[key].isoformat() if values[key] else None
        values["actors"], values["actions"] = list(self.actors), list(self.actions)
        return values


def audit_export_check(user: Any) -> None:
    """Refuse ``user`` unless they hold :data:`EXPORT_PERMISSION`; call it before anything
    is read or recorded. Raises ``errors.PermissionDenied``."""
    if not user.has_perm(EXPORT_PERMISSION):
        raise errors.PermissionDenied(
            f"Your staff account lacks the {EXPORT_PERMISSION} permission "
            "(Can export the audit trail); ask an administrator to grant it."
        )


def csv_cell(value: Any) -> str:
    """``value`` as a CSV cell a spreadsheet shows as text: one that starts with ``=``,
    ``+``, ``-``, ``@``, a tab or a carriage return gets a single quote in front (the
    OWASP CSV injection rule), so ``=HYPERLINK(...)`` in a reason is never run."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _instant(name: str, raw: str, *, end_of_day: bool) -> dt.datetime:
    """An ISO 8601 date or date-time; a date means its start (``since``) or next day."""
    try:
        day = parse_date(raw)  # a date alone (a date-time does not parse as one)
        moment = None if day else parse_datetime(raw)
    except ValueError:  # well formed, but no such day or time
        day = moment = None
    if day is not None:
        moment = dt.datetime.combine(day + dt.timedelta(days=end_of_day), dt.time())
    if moment is None:
        raise errors.InvalidParameter(
            f"{name} must be an ISO 8601 date or date-time, such as 2026-12-01 "
            "or 2026-12-01T09:00:00+09:00."
        )
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=dt.UTC)
    return moment


def _names(raw: str) -> tuple[str, ...]:
    return tuple(sorted({name.strip() for name in raw.split(",") if name.strip()}))


def audit_filter_parse(params: Mapping[str, str]) -> AuditFilter:
    """Read ``since``, ``until`` (dates or date-times; naive ones are UTC; a date for
    ``until`` includes that whole day), ``actor`` and ``action`` (comma-separated).

    Raises ``InvalidParameter`` for a time that does not parse or a range that ends
    before it starts.
    """
    since = params.get("since", "").strip()
    until = params.get("until", "").strip()
    wanted = AuditFilter(
        since=_instant("since", since, end_of_day=False) if since else None,
        until=_instant("until", until, end_of_day=True) if until else None,
        actors=_names(params.get("actor", "")),
        actions=_names(params.get("action", "")),
    )
    if wanted.since and wanted.until and wanted.until <= wanted.since:
        raise errors.InvalidParameter("until must be later than since.")
    return wanted


def audit_events(wanted: AuditFilter) -> QuerySet[AuditEvent]:
    events = AuditEvent.objects.select_related("actor").order_by("at", "id")
    if wanted.since:
        events = events.filter(at__gte=wanted.since)
    if wanted.until:
        events = events.filter(at__lt=wanted.until)
    if wanted.actors:
        events = events.filter(actor__username__in=wanted.actors)
    if wanted.actions:
        events = events.filter(action__in=wanted.actions)
    return events


def _rows(events: QuerySet[AuditEvent]) -> Iterator[dict[str, Any]]:
    for event in events.iterator(chunk_size=1000):
        yield {
            "id": event.pk,
            "at": event.at.isoformat(),
            "actor": event.actor.get_username() if event.actor else None,
            "action": event.action,
            "target": event.target,
            "remote_addr": event.remote_addr,
            "user_agent": event.user_agent,
            "reason": event.reason,
            "details": event.details,
        }


def _csv_lines(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values: list[Any]) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(values)
        return buffer.getvalue()

    yield line(COLUMNS)
    for row in rows:
        row["details"] = json.dumps(row["details"], sort_keys=True)
        yield line([csv_cell(row[column]) for column in COLUMNS])


def audit_export(
    *, fmt: str, wanted: AuditFilter, actor: Any, origin: Origin = NOWHERE
) -> Iterator[str]:
    """The matching events as CSV (with a header row; cells neutralised, see
    :func:`csv_cell`) or JSON lines, streamed.

    Checks ``actor``'s :data:`EXPORT_PERMISSION` (:func:`audit_export_check`), then
    records an ``audit.export`` event (with the filter) first, so the export contains
    itself when its filter matches it.
    """
    audit_export_check(actor)
    if fmt not in FORMATS:
        raise errors.InvalidParameter("format must be 'csv' or 'jsonl'.")
    audit_record(
        actor=actor,
        action="audit.export",
        target="audit trail",
        origin=origin,
        details={"format": fmt, **wanted.as_details()},
    )
    rows = _rows(audit_events(wanted))
    if fmt == "jsonl":
        return (json.dumps(row, sort_keys=True) + "\n" for row in rows)
    return _csv_lines(rows)
