"""ApiToken moved to the accounts app: the model leaves this app's state; its table
(api_apitoken) and rows stay where they are (accounts 0001 takes the model over)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ApiToken")],
            database_operations=[],
        ),
    ]
