"""The "contest staff" group may decide the review before prizes of estimation entries
and view the reviews and the frozen rows in the admin (as standings 0002: the permission
rows are created here, since post_migrate comes too late for the group)."""

from django.db import migrations

from portal.core.migration_grants import group_permissions

GROUP = "contest staff"
PERMISSIONS = {
    ("estimation", "entryreview"): [
        ("decide_entry_review", "Can clear or disqualify an estimation entry under review"),
        ("view_entryreview", "Can view entry review"),
    ],
    ("estimation", "estimationstandingrow"): [
        ("view_estimationstandingrow", "Can view estimation standing row"),
    ],
}


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("estimation", "0002_entryreview_estimationstandingrow"),
    ]

    operations = [group_permissions(GROUP, PERMISSIONS)]
