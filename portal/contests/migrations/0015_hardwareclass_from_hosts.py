"""HardwareClass, moved here from the hosts app: the model joins this app's state over the
table it already has (``hosts_hardwareclass``, kept by ``db_table``); the table and its
rows stay. Its content type follows it, so the permissions and admin log entries that
name it still do."""

from django.db import migrations, models


def content_type_follows(apps, schema_editor, *, frm="hosts", to="contests"):
    content_type = apps.get_model("contenttypes", "ContentType")
    if not content_type.objects.filter(app_label=to, model="hardwareclass").exists():
        content_type.objects.filter(app_label=frm, model="hardwareclass").update(app_label=to)


def content_type_goes_back(apps, schema_editor):
    content_type_follows(apps, schema_editor, frm="contests", to="hosts")


class Migration(migrations.Migration):
    dependencies = [
        ("contests", "0014_cohort_public_seed"),
        ("hosts", "0009_hardwareclass_to_contests"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="HardwareClass",
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
                        ("name", models.CharField(max_length=64, unique=True)),
                        (
                            "platform",
                            models.CharField(
                                choices=[
                                    ("linux/amd64", "linux/amd64"),
                                    ("linux/arm64", "linux/arm64"),
                                ],
                                default="linux/amd64",
                                max_length=16,
                            ),
                        ),
                        ("description", models.CharField(blank=True, max_length=200)),
                        (
                            "gpus",
                            models.PositiveSmallIntegerField(
                                default=0,
                                help_text="GPUs each host of this class gives a scored container.",
                            ),
                        ),
                        (
                            "gpu_model",
                            models.CharField(
                                blank=True,
                                help_text='As nvidia-smi names it ("NVIDIA H200").',
                                max_length=100,
                            ),
                        ),
                        ("pin_gpu_driver", models.CharField(blank=True, max_length=32)),
                        ("pin_cuda", models.CharField(blank=True, max_length=16)),
                        (
                            "calibration_reference_ns",
                            models.PositiveBigIntegerField(
                                blank=True,
                                help_text="The calibration workload's reference median on "
                                "this class (ns); empty: the first good calibration of the "
                                "class sets it.",
                                null=True,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "hosts_hardwareclass",
                        "ordering": ["name"],
                        "verbose_name_plural": "hardware classes",
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_type_follows, content_type_goes_back),
    ]
