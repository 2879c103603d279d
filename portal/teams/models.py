"""Teams: entrants who compete on one benchmark as one identity (docs/rules.md, "Teams").

An entrant in no team is a team of one and has no row here. A member row carries its
team's benchmark, so that one constraint keeps an entrant in at most one team per
benchmark.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower


class Team(models.Model):
    benchmark = models.ForeignKey(
        "contests.Benchmark", on_delete=models.CASCADE, related_name="teams"
    )
    name = models.CharField(max_length=100)
    # The captain: who created the team (or, once they left, its longest-standing member);
    # only the captain removes members.
    captain = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["benchmark", "name"]
        constraints = [
            models.UniqueConstraint("benchmark", Lower("name"), name="one_team_name_per_benchmark")
        ]

    def __str__(self) -> str:
        return f"{self.benchmark_id}: {self.name}"


class TeamMember(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="members")
    benchmark = models.ForeignKey("contests.Benchmark", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships"
    )
    joined_at = models.DateTimeField()

    class Meta:
        ordering = ["joined_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["benchmark", "user"], name="one_team_per_benchmark")
        ]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.team_id}"


class TeamInvitation(models.Model):
    PENDING = "pending"
    ACCEPTED = "accepted"
    DECLINED = "declined"
    WITHDRAWN = "withdrawn"  # the team went away, or its invitee joined another team
    STATES = [(s, s) for s in (PENDING, ACCEPTED, DECLINED, WITHDRAWN)]

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    invitee = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_invitations"
    )
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    state = models.CharField(max_length=16, choices=STATES, default=PENDING)
    created_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "invitee"],
                condition=models.Q(state="pending"),
                name="one_pending_invitation",
            )
        ]

    def __str__(self) -> str:
        return f"{self.invitee_id} to {self.team_id}: {self.state}"
