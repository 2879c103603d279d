"""The "contest staff" group may decide provenance reviews and view them in the admin, as
0014 let it view verification sets; nothing else of the group changes."""

from django.db import migrations

from portal.core.migration_grants import group_permissions

GROUP = "contest staff"
PERMISSIONS = {
    ("submissions", "provenancereview"): [
        ("decide_review", "Can clear or disqualify a submission under review"),
        ("view_provenancereview", "Can view provenance review"),
    ],
}


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("submissions", "0016_provenance_review"),
    ]

    operations = [group_permissions(GROUP, PERMISSIONS)]
