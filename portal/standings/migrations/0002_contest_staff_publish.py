"""The "contest staff" group may start the final rerun, publish and correct final
standings, and view them in the admin (as in submissions 0006: the permission rows are
created here, since post_migrate comes too late for the group)."""

from django.db import migrations

from portal.core.migration_grants import group_permissions

GROUP = "contest staff"
PERMISSIONS = {
    ("standings", "standings"): [
        (
            "publish_standings",
            "Can start the final rerun, publish and correct final standings (audited)",
        ),
        ("view_standings", "Can view standings"),
    ],
    ("standings", "finalsettings"): [
        ("view_finalsettings", "Can view final settings"),
        ("change_finalsettings", "Can change final settings"),
        ("add_finalsettings", "Can add final settings"),
    ],
}


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("standings", "0001_initial"),
    ]

    operations = [group_permissions(GROUP, PERMISSIONS)]
