"""Staff's edits of a benchmark's final settings, audited (docs/rules.md, "Final
standings"): the numbers that decide the end of a contest change only on the record."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from portal.audit.services import (
    NOWHERE,
    Origin,
    audit_record,
    field_changes,
    plain,
    stored_value,
)
from portal.standings.models import FinalSettings


def _values(settings: FinalSettings) -> dict[str, Any]:
    names = [
        f.name for f in FinalSettings._meta.concrete_fields if f.name not in ("id", "benchmark")
    ]
    return {name: plain(stored_value(settings, name)) for name in names}


def _target(settings: FinalSettings) -> str:
    return f"benchmark:{settings.benchmark.slug}"


def final_settings_save(
    *, settings: FinalSettings, before: dict[str, Any] | None, actor: Any, origin: Origin = NOWHERE
) -> FinalSettings:
    """Save final settings created or edited by staff, audited in the same transaction.

    ``before``: the stored values of the edited fields (None for a new row). A new row is
    ``standings.settings.create`` with its values; an edit is ``standings.settings.change``
    whose details map each changed field to ``[old, new]``; nothing changed, nothing
    recorded."""
    with transaction.atomic():
        settings.save()
        if before is None:
            audit_record(
                actor=actor,
                action="standings.settings.create",
                target=_target(settings),
                origin=origin,
                details={"values": _values(settings)},
            )
            return settings
        changes = field_changes(settings, before)
        if changes:
            audit_record(
                actor=actor,
                action="standings.settings.change",
                target=_target(settings),
                origin=origin,
                details={"changes": changes},
            )
    return settings


def final_settings_delete(*, settings: FinalSettings, actor: Any, origin: Origin = NOWHERE) -> None:
    """Delete a benchmark's final settings (it has the defaults again), audited with the
    values it had (``standings.settings.delete``)."""
    with transaction.atomic():
        audit_record(
            actor=actor,
            action="standings.settings.delete",
            target=_target(settings),
            origin=origin,
            details={"values": _values(settings)},
        )
        settings.delete()
