"""Reads that matter about builds: the build network as the last live checks found it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from portal.environments.models import BuildNetworkCheck

DEFAULT_STALE_S = 3600


@dataclass(frozen=True)
class BuildNetworkState:
    """The build network over every build host, from each host's latest check.

    ``enforced`` only when every host's latest check found every rule in place and none
    is older than ``PODIUM_BUILD_NETWORK_STALE_S``; ``checked_at`` is the most recent
    check; ``subnet`` comes from it. The lists are unions over the hosts, in first-seen
    order (most recent host first); ``problems`` are "host: problem" lines, stale hosts
    included.
    """

    enforced: bool
    stale: bool
    checked_at: dt.datetime
    subnet: str
    blocked: tuple[str, ...]
    dns: tuple[str, ...]
    allowed: tuple[str, ...]
    problems: tuple[str, ...]
    hosts: tuple[str, ...]

    @property
    def allowed_count(self) -> int:
        return len(self.allowed)


def stale_after() -> dt.timedelta:
    return dt.timedelta(seconds=getattr(settings, "PODIUM_BUILD_NETWORK_STALE_S", DEFAULT_STALE_S))


def build_network_state(*, now: dt.datetime | None = None) -> BuildNetworkState | None:
    """The build network as the latest check of every host found it; None if never checked.

    One query (a row per build host).
    """
    checks = list(BuildNetworkCheck.objects.order_by("-checked_at", "host"))
    if not checks:
        return None
    oldest_fresh = (now or timezone.now()) - stale_after()
    stale = [check for check in checks if check.checked_at < oldest_fresh]
    problems = [f"{check.host}: {problem}" for check in checks for problem in check.problem_lines()]
    problems += [f"{check.host}: no check since {check.checked_at.isoformat()}" for check in stale]
    latest = checks[0]
    return BuildNetworkState(
        enforced=not stale and all(check.enforced for check in checks),
        stale=bool(stale),
        checked_at=latest.checked_at,
        subnet=str(latest.policy.get("subnet", "")),
        blocked=_union(check.policy.get("blocked", ()) for check in checks),
        dns=_union(check.policy.get("dns", ()) for check in checks),
        allowed=_union(check.policy.get("allowed", ()) for check in checks),
        problems=tuple(problems),
        hosts=tuple(check.host for check in checks),
    )


def _union(lists: Iterable[Iterable[str]]) -> tuple[str, ...]:
    """Every entry once, in the order first seen."""
    return tuple(dict.fromkeys(str(entry) for entries in lists for entry in entries))
