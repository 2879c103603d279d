import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def charges_to_teams(apps, schema_editor):
    """The team each existing charge was made in, where the rows tell it: a member of a
    team now was in it for every charge of theirs since they joined (an entrant is in one
    team per benchmark); a refund's is its charge's. Earlier charges, and those of teams
    left since, stay without a team: they count against their uploader, as before."""
    AttemptLedger = apps.get_model("submissions", "AttemptLedger")
    TeamMember = apps.get_model("teams", "TeamMember")
    for member in TeamMember.objects.all():
        AttemptLedger.objects.filter(
            benchmark_id=member.benchmark_id,
            entrant_id=member.user_id,
            delta=1,
            at__gte=member.joined_at,
        ).update(team_id=member.team_id)
    charge = AttemptLedger.objects.filter(submission_id=OuterRef("submission_id"), delta=1)
    AttemptLedger.objects.filter(delta=-1).update(team_id=Subquery(charge.values("team_id")[:1]))


class Migration(migrations.Migration):
    dependencies = [
        ("submissions", "0018_run_final_purpose"),
        ("teams", "0002_contest_staff_view"),
    ]

    operations = [
        migrations.AddField(
            model_name="attemptledger",
            name="team",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="teams.team",
            ),
        ),
        migrations.RunPython(charges_to_teams, migrations.RunPython.noop),
    ]
