"""ApiToken, moved here from the api app: the model joins this app's state over the table
it already has (``api_apitoken``, kept by ``db_table``); the table and its rows stay. Its
content type follows it, so the permissions and admin log entries that name it still do."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import portal.accounts.models


def content_type_follows(apps, schema_editor, *, frm="api", to="accounts"):
    content_type = apps.get_model("contenttypes", "ContentType")
    if not content_type.objects.filter(app_label=to, model="apitoken").exists():
        content_type.objects.filter(app_label=frm, model="apitoken").update(app_label=to)


def content_type_goes_back(apps, schema_editor):
    content_type_follows(apps, schema_editor, frm="accounts", to="api")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("api", "0002_apitoken_to_accounts"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ApiToken",
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
                        (
                            "key",
                            models.CharField(
                                default=portal.accounts.models.new_token_key,
                                max_length=40,
                                unique=True,
                            ),
                        ),
                        ("label", models.CharField(blank=True, max_length=100)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="api_tokens",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={"ordering": ["-created_at"], "db_table": "api_apitoken"},
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_type_follows, content_type_goes_back),
    ]
