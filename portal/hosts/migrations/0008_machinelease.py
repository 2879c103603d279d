"""MachineLease, moved here from the submissions app: the model joins this app's state over
the table it already has (``submissions_machinelease``, kept by ``db_table``); the table
and its rows stay. Its content type follows it, so the permissions and admin log entries
that name it still do."""

import django.db.models.deletion
from django.db import migrations, models


def content_type_follows(apps, schema_editor, *, frm="submissions", to="hosts"):
    content_type = apps.get_model("contenttypes", "ContentType")
    if not content_type.objects.filter(app_label=to, model="machinelease").exists():
        content_type.objects.filter(app_label=frm, model="machinelease").update(app_label=to)


def content_type_goes_back(apps, schema_editor):
    content_type_follows(apps, schema_editor, frm="hosts", to="submissions")


class Migration(migrations.Migration):
    dependencies = [
        ("hosts", "0007_host_disk"),
        ("submissions", "0015_machinelease_to_hosts"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="MachineLease",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("host", models.CharField(max_length=100, unique=True)),
                        ("holder", models.CharField(blank=True, max_length=200)),
                        ("acquired_at", models.DateTimeField(blank=True, null=True)),
                        ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                        ("expires_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "run",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="submissions.run",
                            ),
                        ),
                    ],
                    options={"db_table": "submissions_machinelease"},
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_type_follows, content_type_goes_back),
    ]
