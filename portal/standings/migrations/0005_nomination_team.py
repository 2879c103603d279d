import django.db.models.deletion
from django.db import migrations, models


def nominations_to_teams(apps, schema_editor):
    """Nominations are a team's: a member's existing ones become their team's (the two
    named first count)."""
    Nomination = apps.get_model("standings", "Nomination")
    TeamMember = apps.get_model("teams", "TeamMember")
    for member in TeamMember.objects.all():
        Nomination.objects.filter(benchmark_id=member.benchmark_id, entrant_id=member.user_id).update(
            team_id=member.team_id
        )


class Migration(migrations.Migration):
    dependencies = [
        ("standings", "0004_final_settings_prize_positions"),
        ("teams", "0002_contest_staff_view"),
    ]

    operations = [
        migrations.AddField(
            model_name="nomination",
            name="team",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="teams.team",
            ),
        ),
        migrations.RunPython(nominations_to_teams, migrations.RunPython.noop),
    ]
