"""Permissions given to a group by a data migration, one way for every app.

The permission rows are created here (``get_or_create``: Django's own ``post_migrate``
pass then finds them), since that pass comes after the migrations and the group needs
them now. Only the models ``apps`` gives (the migration's historical ones) are used, so
a migration written with this does today what it did when it was written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import migrations

# (app label, model): [(codename, name)]
Permissions = Mapping[tuple[str, str], Sequence[tuple[str, str]]]


def group_permissions(group: str, permissions: Permissions) -> migrations.RunPython:
    """The operation that adds ``permissions`` to ``group`` (creating either when missing),
    and, migrated back, removes them from it again; nothing else of the group changes."""

    def grant(apps: Any, schema_editor: Any) -> None:
        alias = schema_editor.connection.alias
        found, _ = (
            apps.get_model("auth", "Group").objects.db_manager(alias).get_or_create(name=group)
        )
        found.permissions.add(*permission_rows(apps, alias, permissions))

    def revoke(apps: Any, schema_editor: Any) -> None:
        alias = schema_editor.connection.alias
        groups = apps.get_model("auth", "Group").objects.db_manager(alias)
        found = groups.filter(name=group).first()
        if found is not None:
            found.permissions.remove(*permission_rows(apps, alias, permissions))

    return migrations.RunPython(grant, revoke)


def permission_rows(apps: Any, alias: str, permissions: Permissions) -> list[Any]:
    """The rows of ``permissions`` in database ``alias``, created where missing."""
    content_types = apps.get_model("contenttypes", "ContentType").objects.db_manager(alias)
    rows = apps.get_model("auth", "Permission").objects.db_manager(alias)
    found = []
    for (app_label, model), entries in permissions.items():
        content_type, _ = content_types.get_or_create(app_label=app_label, model=model)
        for codename, name in entries:
            row, _ = rows.get_or_create(
                content_type=content_type, codename=codename, defaults={"name": name}
            )
            found.append(row)
    return found
