"""Contest staff see teams in the admin, read-only."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from portal.teams import services
from portal.teams.models import Team
from tests import factories


def test_contest_staff_see_a_team_and_its_members_and_cannot_change_it(alice, bob, benchmark):
    team = services.team_create(user=alice, benchmark=benchmark, name="Fast Cats")
    invitation = services.team_invite(user=alice, benchmark=benchmark, username="bob")
    services.invitation_accept(user=bob, invitation_id=invitation.pk)
    staff = factories.UserFactory(username="referee", is_staff=True)
    staff.groups.add(Group.objects.get(name="contest staff"))
    client = Client()
    client.force_login(staff)

    listing = client.get(reverse("admin:teams_team_changelist"))
    page = client.get(reverse("admin:teams_team_change", args=[team.pk]))

    assert listing.status_code == 200 and "Fast Cats" in listing.content.decode()
    assert page.status_code == 200 and "bob" in page.content.decode()
    deleted = client.post(reverse("admin:teams_team_delete", args=[team.pk]), {"post": "yes"})
    assert deleted.status_code == 403
    assert Team.objects.filter(pk=team.pk).exists()
