"""The "contest staff" group may view the pool of prepared verification sets (read-only
in the admin), as 0006 let it view anomalies; nothing else of the group changes."""

from typing import Any

from django.db import migrations

GROUP = "contest staff"
CODENAME = "view_verificationset"


def _permission(apps: Any, alias: str) -> Any:
    content_types = apps.get_model("contenttypes", "ContentType").objects.db_manager(alias)
    permissions = apps.get_model("auth", "Permission").objects.db_manager(alias)
    content_type, _ = content_types.get_or_create(app_label="submissions", model="verificationset")
    permission, _ = permissions.get_or_create(
        content_type=content_type, codename=CODENAME, defaults={"name": "Can view verification set"}
    )
    return permission


def grant(apps: Any, schema_editor: Any) -> None:
    alias = schema_editor.connection.alias
    group, _ = apps.get_model("auth", "Group").objects.db_manager(alias).get_or_create(name=GROUP)
    group.permissions.add(_permission(apps, alias))


def revoke(apps: Any, schema_editor: Any) -> None:
    alias = schema_editor.connection.alias
    group = apps.get_model("auth", "Group").objects.db_manager(alias).filter(name=GROUP).first()
    if group is not None:
        group.permissions.remove(_permission(apps, alias))


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("submissions", "0013_anomaly_low_energy"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
