"""The "contest staff" group may decide provenance reviews and view them in the admin, as
0014 let it view verification sets; nothing else of the group changes."""

from typing import Any

from django.db import migrations

GROUP = "contest staff"
CODENAMES = {
    "decide_review": "Can clear or disqualify a submission under review",
    "view_provenancereview": "Can view provenance review",
}


def _permissions(apps: Any, alias: str) -> list[Any]:
    content_types = apps.get_model("contenttypes", "ContentType").objects.db_manager(alias)
    permissions = apps.get_model("auth", "Permission").objects.db_manager(alias)
    content_type, _ = content_types.get_or_create(
        app_label="submissions", model="provenancereview"
    )
    return [
        permissions.get_or_create(
            content_type=content_type, codename=codename, defaults={"name": name}
        )[0]
        for codename, name in CODENAMES.items()
    ]


def grant(apps: Any, schema_editor: Any) -> None:
    alias = schema_editor.connection.alias
    group, _ = apps.get_model("auth", "Group").objects.db_manager(alias).get_or_create(name=GROUP)
    group.permissions.add(*_permissions(apps, alias))


def revoke(apps: Any, schema_editor: Any) -> None:
    alias = schema_editor.connection.alias
    group = apps.get_model("auth", "Group").objects.db_manager(alias).filter(name=GROUP).first()
    if group is not None:
        group.permissions.remove(*_permissions(apps, alias))


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("submissions", "0016_provenance_review"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
