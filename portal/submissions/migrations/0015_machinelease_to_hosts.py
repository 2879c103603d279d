"""MachineLease moved to the hosts app: the model leaves this app's state; its table
(submissions_machinelease) and rows stay where they are (hosts 0008 takes the model over)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("submissions", "0014_contest_staff_verification_sets"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="MachineLease")],
            database_operations=[],
        ),
    ]
