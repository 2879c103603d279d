"""The "contest staff" group may start, void and pause campaign rounds.

As in hosts 0001 and submissions 0004/0006, the permission rows are created here
(get_or_create: the post_migrate pass finds them), since the group needs them now. The
group (made by submissions 0004) gains the control permission and the admin lists' view
permissions; nothing else of it changes.
"""

from typing import Any

from django.db import migrations

GROUP = "contest staff"

# (app label, model): [(codename, name)]
PERMISSIONS = {
    ("campaigns", "campaign"): [
        ("manage_campaign", "Can start, void and pause campaign rounds (audited)"),
        ("view_campaign", "Can view campaign"),
    ],
    ("campaigns", "round"): [("view_round", "Can view round")],
    ("campaigns", "crown"): [("view_crown", "Can view crown")],
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
    groups = apps.get_model("auth", "Group").objects.db_manager(alias)
    group, _ = groups.get_or_create(name=GROUP)
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
        ("submissions", "0004_contest_staff_group"),
        ("campaigns", "0001_initial"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
