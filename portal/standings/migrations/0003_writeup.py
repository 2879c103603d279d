"""Write-ups (one PDF per entrant per benchmark, tied to one graded official submission);
the "contest staff" group may read them (``view_writeup``; a private one is read with a
reason, audited), granted here as 0002 grants the standings' permissions."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from portal.core.migration_grants import group_permissions

GROUP = "contest staff"
PERMISSIONS = {("standings", "writeup"): [("view_writeup", "Can view write up")]}


class Migration(migrations.Migration):
    dependencies = [
        ("contests", "0019_cohort_final_kind"),
        ("standings", "0002_contest_staff_publish"),
        ("submissions", "0018_run_final_purpose"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.CreateModel(
            name="WriteUp",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("file_name", models.CharField(max_length=200)),
                ("size_bytes", models.PositiveIntegerField()),
                ("sha256", models.CharField(max_length=64)),
                ("public", models.BooleanField(default=False)),
                ("uploaded_at", models.DateTimeField()),
                (
                    "benchmark",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="writeups",
                        to="contests.benchmark",
                    ),
                ),
                (
                    "entrant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "submission",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="writeup",
                        to="submissions.submission",
                    ),
                ),
            ],
            options={
                "ordering": ["benchmark", "entrant"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("benchmark", "entrant"), name="one_writeup_per_entrant"
                    )
                ],
            },
        ),
        group_permissions(GROUP, PERMISSIONS),
    ]
