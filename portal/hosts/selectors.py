"""Reads of the scoring fleet: whether a host is online, how many of a class are, and the
fleet as the API and the staff tools show it.

*Online* is read from the heartbeat: a host whose last heartbeat is older than
``PODIUM_HOST_STALE_S`` is offline, whatever its status says.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Count

from portal.hosts.models import ScoringHost
from portal.submissions.models import Submission

ONLINE = "online"
DRAINING = "draining"
OFFLINE = "offline"
STATES = (ONLINE, DRAINING, OFFLINE)

# What waits for a scoring host: a scored run, or a verification run.
WAITING = (Submission.QUEUED, Submission.VERIFYING)


def stale_after() -> dt.timedelta:
    return dt.timedelta(seconds=settings.PODIUM_HOST_STALE_S)


def host_state(host: ScoringHost, now: dt.datetime) -> str:
    """``offline`` (retired, or no heartbeat within the stale time), else ``draining`` or
    ``online`` as its status says."""
    if host.status == ScoringHost.RETIRED or host.last_heartbeat_at < now - stale_after():
        return OFFLINE
    if host.status == ScoringHost.DRAINING:
        return DRAINING
    return ONLINE


def host_state_label(host: ScoringHost, now: dt.datetime) -> str:
    """For staff: :func:`host_state`, except that a retired host says ``retired``."""
    return ScoringHost.RETIRED if host.status == ScoringHost.RETIRED else host_state(host, now)


def hosts_online(hardware_class: str, now: dt.datetime) -> int:
    """How many ``active`` hosts of ``hardware_class`` heartbeat within the stale time
    (draining, retired and silent hosts do not count). One query."""
    return ScoringHost.objects.filter(
        hardware_class=hardware_class,
        status=ScoringHost.ACTIVE,
        last_heartbeat_at__gte=now - stale_after(),
    ).count()


def queue_lengths() -> dict[str, int]:
    """Per hardware class: official and practice submissions waiting for a scoring host
    (``queued``, or ``verifying``), by their benchmark's class. One query for all classes;
    a class with nothing waiting is absent."""
    rows = (
        Submission.objects.filter(
            status__in=WAITING, kind__in=(Submission.OFFICIAL, Submission.PRACTICE)
        )
        .values("benchmark__hardware_class")
        .annotate(waiting=Count("id"))
        .order_by()
    )
    return {str(row["benchmark__hardware_class"]): int(row["waiting"]) for row in rows}


@dataclass(frozen=True)
class HostRow:
    """One host as ``GET /api/v1/hosts/`` shows it: its machine and how busy its class is,
    never what it runs or for whom."""

    name: str
    hardware_class: str
    architecture: str
    gpus: list[str]
    cpu_cores: int
    memory_bytes: int
    state: str
    last_heartbeat_at: dt.datetime
    queue_length: int


def gpu_names(gpus: Any) -> list[str]:
    """The GPU models of a host's ``gpus`` facts, one entry per GPU (no serials or UUIDs)."""
    if not isinstance(gpus, list):
        return []
    return [str(gpu.get("name", "")) if isinstance(gpu, dict) else str(gpu) for gpu in gpus]


def host_rows(now: dt.datetime) -> list[HostRow]:
    """Every host that is not retired, by class then name, with its state and the length
    of its class's queue. Two queries, however many hosts and classes."""
    waiting = queue_lengths()
    hosts = ScoringHost.objects.exclude(status=ScoringHost.RETIRED).order_by(
        "hardware_class", "name"
    )
    return [
        HostRow(
            name=host.name,
            hardware_class=host.hardware_class,
            architecture=host.architecture,
            gpus=gpu_names(host.gpus),
            cpu_cores=host.cpu_cores,
            memory_bytes=host.memory_bytes,
            state=host_state(host, now),
            last_heartbeat_at=host.last_heartbeat_at,
            queue_length=waiting.get(host.hardware_class, 0),
        )
        for host in hosts
    ]


def memory_text(memory_bytes: int) -> str:
    """Memory for people: ``62.8 GiB``."""
    return f"{memory_bytes / 2**30:.1f} GiB"
