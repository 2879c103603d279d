"""Where a scoring host's scored runs compute: its CPUs of their own and the rest, or why
it shares every CPU (portal/core/cpus.py). Hosts registered before report it at their next
registration; until then it is empty."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("hosts", "0004_host_tools")]

    operations = [
        migrations.AddField(
            model_name="scoringhost",
            name="cpu_isolation",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text='Where scored runs compute (portal/core/cpus.py): {"shared", "scoring_cpus", '
                '"other_cpus", "reason"}; both lists null when runs share every CPU, and the '
                "reason says why. Empty until the host registers with it.",
            ),
        ),
    ]
