"""Scoring-host test fixtures: hosts with a machine's facts, waiting submissions, staff.

- ``charlie``: staff, a member of the "contest staff" group (holds ``hosts.manage_host``);
- ``rita``: staff who may look at the hosts list but not move a host.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.utils import timezone

from portal.contests.hardware import hardware_class_row
from portal.contests.models import Benchmark
from portal.hosts.models import ScoringHost
from portal.submissions.models import Submission
from tests import factories
from tests.api.conftest import anon, client_for

__all__ = ["anon", "client_for"]

FACTS: dict[str, Any] = {
    "architecture": "x86_64",
    "cpu_model": "AMD EPYC 9654 96-Core Processor",
    "cpu_cores": 32,
    "memory_bytes": 64 << 30,
    "gpus": [],
    "docker_version": "27.3.1",
    "kernel_version": "6.8.0-45-generic",
    "supervisor_sha256": "a" * 64,
}


@pytest.fixture
def make_host(db: Any) -> Callable[..., ScoringHost]:
    """A registered host; its heartbeat is now unless ``heartbeat_at`` says otherwise."""

    def make(
        name: str,
        *,
        hardware_class: str = "cpu-x86_64",
        status: str = ScoringHost.ACTIVE,
        heartbeat_at: dt.datetime | None = None,
        **facts: Any,
    ) -> ScoringHost:
        now = timezone.now()
        return ScoringHost.objects.create(
            name=name,
            hardware_class=hardware_class_row(hardware_class),
            status=status,
            registered_at=now,
            last_heartbeat_at=heartbeat_at or now,
            **{**FACTS, **facts},
        )

    return make


@pytest.fixture
def waiting(db: Any) -> Callable[..., Submission]:
    """A submission of ``entrant`` to ``benchmark`` in ``status`` (no files, no broker)."""

    def make(
        entrant: Any,
        benchmark: Benchmark,
        status: str = Submission.QUEUED,
        kind: str = Submission.OFFICIAL,
    ) -> Submission:
        environment = factories.EnvironmentFactory(owner=entrant, benchmark=benchmark)
        return Submission.objects.create(
            entrant=entrant,
            benchmark=benchmark,
            environment=environment,
            kind=kind,
            status=status,
            submitted_at=timezone.now(),
            source_name="source.tar.gz",
            source_format="tar.gz",
            source_sha256="0" * 64,
            source_bytes=1,
        )

    return make


@pytest.fixture
def charlie(db: Any) -> Any:
    user = factories.UserFactory(username="charlie", is_staff=True)
    user.groups.add(Group.objects.get(name="contest staff"))
    return user


@pytest.fixture
def rita(db: Any) -> Any:
    user = factories.UserFactory(username="rita", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="hosts", codename="view_scoringhost")
    )
    return user
