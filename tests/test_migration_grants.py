"""The data migrations' grants to a group: migrated forwards the group holds exactly the
permissions named (created when missing), migrated back it loses those and keeps the rest."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, Permission
from django.db import connection

from portal.core.migration_grants import group_permissions

PERMISSIONS = {
    ("teams", "team"): [("view_team", "Can view team")],
    ("teams", "grantprobe"): [("probe_grant", "Can probe a grant")],  # no such model yet
}
EDITOR = SimpleNamespace(connection=connection)


def codenames(group: Group) -> set[str]:
    return set(group.permissions.values_list("codename", flat=True))


@pytest.mark.django_db
def test_a_grant_adds_the_permissions_and_migrating_back_removes_only_those():
    group = Group.objects.create(name="probe staff")
    kept = Permission.objects.get(codename="view_teammember")
    group.permissions.add(kept)
    operation = group_permissions("probe staff", PERMISSIONS)

    operation.code(apps, EDITOR)
    operation.code(apps, EDITOR)  # twice: nothing more

    assert codenames(group) == {"view_team", "probe_grant", "view_teammember"}
    assert Permission.objects.filter(codename="probe_grant").count() == 1

    operation.reverse_code(apps, EDITOR)

    assert codenames(group) == {"view_teammember"}


@pytest.mark.django_db
def test_a_grant_makes_its_group_and_migrating_back_without_one_changes_nothing():
    operation = group_permissions("new staff", PERMISSIONS)

    operation.reverse_code(apps, EDITOR)  # no group yet
    assert not Group.objects.filter(name="new staff").exists()

    operation.code(apps, EDITOR)
    assert codenames(Group.objects.get(name="new staff")) == {"view_team", "probe_grant"}
