"""The "contest staff" group: the staff actions' permissions and the admin views they need.

Permissions are normally created after every migration (post_migrate), too late for a
group made here on a fresh database, so the rows are created now (get_or_create: the
later pass finds them). The list is frozen in this migration; a later change of the
group is a new migration.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from portal.core.migration_grants import permission_rows

GROUP = "contest staff"

# (app label, model): [(codename, name)]
PERMISSIONS = {
    ("submissions", "submission"): [
        ("download_source", "Can download an entrant's source archive (audited)"),
        ("requeue_submission", "Can requeue a submission"),
        ("rescore_submission", "Can rescore a submission"),
        ("cancel_submission", "Can cancel a submission (refunds)"),
        ("disqualify_submission", "Can disqualify a submission"),
        ("view_submission", "Can view submission"),
    ],
    ("submissions", "run"): [
        ("download_evidence", "Can download a run's evidence bundle (audited)"),
        ("view_run", "Can view run"),
    ],
    ("submissions", "submissionevent"): [("view_submissionevent", "Can view submission event")],
    ("submissions", "attemptledger"): [("view_attemptledger", "Can view attempt ledger")],
    ("contests", "cohort"): [
        ("export_cohort_members", "Can export a cohort's member list (audited)"),
        ("export_cohort_answers", "Can export a cohort's reference answers (audited)"),
        ("view_cohort", "Can view cohort"),
    ],
}


def create_group(apps: Any, schema_editor: Any) -> None:
    alias = schema_editor.connection.alias
    groups = apps.get_model("auth", "Group").objects.db_manager(alias)
    group, _ = groups.get_or_create(name=GROUP)
    group.permissions.set(permission_rows(apps, alias, PERMISSIONS))


def remove_group(apps: Any, schema_editor: Any) -> None:
    groups = apps.get_model("auth", "Group").objects.db_manager(schema_editor.connection.alias)
    groups.filter(name=GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("contests", "0005_cohort_permissions"),
        ("submissions", "0003_staff_permissions"),
    ]

    operations = [migrations.RunPython(create_group, remove_group)]
