"""HardwareClass moved to the contests app, beside the benchmarks that name it: the model
leaves this app's state; its table (hosts_hardwareclass) and rows stay where they are
(contests 0015 takes the model over)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("hosts", "0008_machinelease"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="HardwareClass")],
            database_operations=[],
        ),
    ]
