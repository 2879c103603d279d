"""The team page: create, invite, accept, leave, through the forms; a teammate's
submission on the pages, an outsider's 404."""

from __future__ import annotations

from pathlib import Path

from django.test import Client
from django.urls import reverse

from portal.audit.models import AuditEvent
from portal.submissions.intake import submission_accept
from portal.teams.models import TeamInvitation, TeamMember
from tests import factories
from tests.submissions.test_concurrent_charging import source_archive


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def members(benchmark) -> list[str]:
    return sorted(
        TeamMember.objects.filter(benchmark=benchmark).values_list("user__username", flat=True)
    )


def test_forming_a_team_through_the_page(alice, bob, benchmark):
    url = reverse("contests:team", kwargs={"slug": benchmark.slug})
    as_alice, as_bob = signed_in(alice), signed_in(bob)
    assert "You compete on your own" in as_alice.get(url).content.decode()

    as_alice.post(url, {"action": "create", "name": "Fast Cats"})
    as_alice.post(url, {"action": "invite", "username": "bob"})
    page = as_bob.get(url).content.decode()
    assert "Fast Cats, from alice" in page
    invitation = TeamInvitation.objects.get(invitee=bob)
    as_bob.post(url, {"action": "accept", "invitation": invitation.pk})

    assert members(benchmark) == ["alice", "bob"]
    page = as_bob.get(url).content.decode()
    assert "alice (captain)" in page and "bob (you)" in page
    as_bob.post(url, {"action": "leave"})
    assert members(benchmark) == ["alice"]
    assert AuditEvent.objects.filter(action__startswith="team.").count() == 4


def test_a_refusal_is_shown_and_changes_nothing(alice, bob, benchmark):
    url = reverse("contests:team", kwargs={"slug": benchmark.slug})
    client = signed_in(alice)

    response = client.post(url, {"action": "invite", "username": "bob"}, follow=True)

    assert "You are in no team on this benchmark." in response.content.decode()
    assert not TeamInvitation.objects.exists()


def test_a_teammates_submission_shows_and_an_outsiders_is_404(alice, bob, benchmark, tmp_path):
    carol = factories.UserFactory(username="carol")
    url = reverse("contests:team", kwargs={"slug": benchmark.slug})
    signed_in(alice).post(url, {"action": "create", "name": "Pair"})
    signed_in(alice).post(url, {"action": "invite", "username": "bob"})
    invitation = TeamInvitation.objects.get(invitee=bob)
    signed_in(bob).post(url, {"action": "accept", "invitation": invitation.pk})
    factories.cohorts(benchmark)
    archive = Path(tmp_path) / "kit.tar.gz"
    archive.write_bytes(source_archive())
    submission = submission_accept(
        entrant=alice,
        benchmark=benchmark,
        environment=factories.EnvironmentFactory(owner=alice, benchmark=benchmark),
        source_file=archive,
        source_name="kit.tar.gz",
    )
    detail = reverse("submissions:detail", kwargs={"pk": submission.pk})
    listing = reverse("submissions:list", kwargs={"slug": benchmark.slug})

    assert signed_in(bob).get(detail).status_code == 200
    assert "by alice" in signed_in(bob).get(listing).content.decode()
    assert signed_in(carol).get(detail).status_code == 404
    source = reverse("submissions:source", kwargs={"pk": submission.pk})
    assert signed_in(bob).get(source).status_code == 404
