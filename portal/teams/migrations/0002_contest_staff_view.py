"""The "contest staff" group may view teams, their members and invitations in the admin
(read-only there; as in standings 0002, the permission rows are created here, since
post_migrate comes too late for the group)."""

from django.db import migrations

from portal.core.migration_grants import group_permissions

GROUP = "contest staff"
PERMISSIONS = {
    ("teams", "team"): [("view_team", "Can view team")],
    ("teams", "teammember"): [("view_teammember", "Can view team member")],
    ("teams", "teaminvitation"): [("view_teaminvitation", "Can view team invitation")],
}


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("teams", "0001_initial"),
    ]

    operations = [group_permissions(GROUP, PERMISSIONS)]
