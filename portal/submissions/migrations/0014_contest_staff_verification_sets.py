"""The "contest staff" group may view the pool of prepared verification sets (read-only
in the admin), as 0006 let it view anomalies; nothing else of the group changes."""

from django.db import migrations

from portal.core.migration_grants import group_permissions

GROUP = "contest staff"
PERMISSIONS = {
    ("submissions", "verificationset"): [("view_verificationset", "Can view verification set")],
}


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("submissions", "0013_anomaly_low_energy"),
    ]

    operations = [group_permissions(GROUP, PERMISSIONS)]
