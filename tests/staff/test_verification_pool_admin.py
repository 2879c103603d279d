"""The verification pool in the admin: staff see every prepared set, by status, and
cannot add, change or delete one (sets come and go with the pool's fill and sweep)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.submissions.models import VerificationSet

CHANGELIST = "admin:submissions_verificationset_changelist"


@pytest.fixture
def admin_client(client, staff):
    client.force_login(staff)
    return client


@pytest.fixture
def pool(official, scored) -> dict[str, VerificationSet]:
    """One set of the official cohort in each state; the taken one serves ``scored``."""
    now = timezone.now()
    return {
        "preparing": VerificationSet.objects.create(cohort=official, members=1),
        "ready": VerificationSet.objects.create(
            cohort=official,
            status=VerificationSet.READY,
            members=2,
            perturbed=2,
            prepare_ms=812.5,
            ready_at=now,
        ),
        "taken": VerificationSet.objects.create(
            cohort=official,
            status=VerificationSet.TAKEN,
            members=2,
            perturbed=1,
            prepare_ms=640.25,
            ready_at=now - dt.timedelta(minutes=3),
            taken_at=now,
            run=scored,
        ),
    }


def _row_ids(html: str) -> set[int]:
    return {
        s.pk
        for s in VerificationSet.objects.all()
        if reverse("admin:submissions_verificationset_change", args=[s.pk]) in html
    }


def test_staff_see_the_pool_with_each_sets_figures_and_run(admin_client, pool, scored, official):
    page = admin_client.get(reverse(CHANGELIST))

    html = page.content.decode()
    assert page.status_code == 200
    assert _row_ids(html) == {s.pk for s in pool.values()}
    for header in ("Cohort", "Status", "Members", "Perturbed", "Prepare ms", "Ready at"):
        assert header in html
    assert str(official) in html
    assert "812.5" in html and "640.25" in html
    assert reverse("admin:submissions_run_change", args=[scored.pk]) in html


def test_the_pool_is_filtered_by_status(admin_client, pool):
    page = admin_client.get(reverse(CHANGELIST), {"status__exact": VerificationSet.READY})

    assert _row_ids(page.content.decode()) == {pool["ready"].pk}


def test_staff_cannot_add_change_or_delete_a_set(admin_client, pool):
    ready = pool["ready"]
    change = reverse("admin:submissions_verificationset_change", args=[ready.pk])

    listing = admin_client.get(reverse(CHANGELIST)).content.decode()
    added = admin_client.get(reverse("admin:submissions_verificationset_add"))
    viewed = admin_client.get(change)
    changed = admin_client.post(change, {"status": VerificationSet.TAKEN, "members": 9})
    deleted = admin_client.post(
        reverse("admin:submissions_verificationset_delete", args=[ready.pk]), {"post": "yes"}
    )

    assert reverse("admin:submissions_verificationset_add") not in listing
    assert added.status_code == 403
    assert viewed.status_code == 200 and 'name="_save"' not in viewed.content.decode()
    assert changed.status_code == 403 and deleted.status_code == 403
    ready.refresh_from_db()
    assert (ready.status, ready.members) == (VerificationSet.READY, 2)
    assert VerificationSet.objects.count() == 3


def test_entrants_cannot_see_the_pool(client, alice, pool):
    client.force_login(alice)

    assert client.get(reverse(CHANGELIST)).status_code == 302  # to the admin's login
