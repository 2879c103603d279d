"""The "contest staff" group may view teams, their members and invitations in the admin
(read-only there; as in standings 0002, the permission rows are created here, since
post_migrate comes too late for the group)."""

from typing import Any

from django.db import migrations

GROUP = "contest staff"
PERMISSIONS = {
    ("teams", "team"): [("view_team", "Can view team")],
    ("teams", "teammember"): [("view_teammember", "Can view team member")],
    ("teams", "teaminvitation"): [("view_teaminvitation", "Can view team invitation")],
}


def _permissions(apps: Any, alias: str) -> list[Any]:
    content_types = apps.get_model("contenttypes", "ContentType").objects.db_manager(alias)
    permissions = apps.get_model("auth", "Permission").objects.db_manager(alias)
    found = []
    for (app_label, model), entries in PERMISSIONS.items():
        content_type, _ = content_types.get_or_create(app_label=app_label, model=model)
        for codename, name in entries:
            permission, _ = permissions.get_or_create(
                content_type=content_type, codename=codename, defaults={"name": name}
            )
            found.append(permission)
    return found


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
        ("teams", "0001_initial"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
