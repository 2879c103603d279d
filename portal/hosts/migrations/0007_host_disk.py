from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('hosts', '0006_host_tools_text'),
    ]

    operations = [
        migrations.AddField(
            model_name='scoringhost',
            name='disk',
            field=models.JSONField(blank=True, default=dict, help_text='The engine\'s disk use (docker system df) when last recorded: {"at", "images", "containers", "build_cache", "volumes"}, each but "at" a {"count", "bytes"}. Recorded at registration and every few minutes of heartbeats; empty until then.'),
        ),
    ]
