"""The "contest staff" group may start, void and pause campaign rounds.

As in hosts 0001 and submissions 0004/0006, the permission rows are created here
(get_or_create: the post_migrate pass finds them), since the group needs them now. The
group (made by submissions 0004) gains the control permission and the admin lists' view
permissions; nothing else of it changes.
"""

from django.db import migrations

from portal.core.migration_grants import group_permissions

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


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("submissions", "0004_contest_staff_group"),
        ("campaigns", "0001_initial"),
    ]

    operations = [group_permissions(GROUP, PERMISSIONS)]
