"""Security tests: the staff-tool fixtures, and staff accounts with and without the group.

- ``plain_staff``: ``is_staff`` and nothing else (no group, no permission);
- ``reviewer``: ``is_staff`` with the view permissions the staff admin pages need, but
  none of the actions' permissions (the admin shows them the pages, not the actions);
- ``contest_staff``: ``is_staff`` and a member of the "contest staff" group.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission

from tests import factories
from tests.api.conftest import accepted, anon, client_for, make_archive, ready_environment
from tests.staff.conftest import official, scored, submission

__all__ = [
    "accepted",
    "anon",
    "client_for",
    "make_archive",
    "official",
    "ready_environment",
    "scored",
    "submission",
]

CONTEST_STAFF = "contest staff"
REVIEWER_VIEWS = [
    ("submissions", "view_submission"),
    ("submissions", "view_run"),
    ("submissions", "view_submissionevent"),
    ("submissions", "view_attemptledger"),
    ("contests", "view_cohort"),
]


@pytest.fixture
def plain_staff(db: Any) -> Any:
    return factories.UserFactory(username="pat", is_staff=True)


@pytest.fixture
def reviewer(db: Any) -> Any:
    user = factories.UserFactory(username="rita", is_staff=True)
    for app_label, codename in REVIEWER_VIEWS:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return user


@pytest.fixture
def contest_staff(db: Any) -> Any:
    user = factories.UserFactory(username="charlie", is_staff=True)
    user.groups.add(Group.objects.get(name=CONTEST_STAFF))
    return user
