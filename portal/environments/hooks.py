"""What the environments floor asks of the apps above it, answered by what they register
from their ``AppConfig.ready()``; this floor never imports them.

An entrant's builds in flight on a benchmark are their environments' builds and whatever
else the apps above count (``portal.submissions``: its ``build.sh`` builds), and an
environment may be removed only while none of their unfinished work uses it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only
    from portal.environments.models import Environment


@dataclass(frozen=True)
class EnvironmentUsers:
    """``builds_in_flight(entrant_id, benchmark_id)``: the user's builds waiting for or
    holding a build slot; ``in_use(environment)``: whether unfinished work uses it."""

    builds_in_flight: Callable[[int, int], int]
    in_use: Callable[[Environment], bool]


_users: list[EnvironmentUsers] = []


def users_register(users: EnvironmentUsers) -> None:
    """Register an app's builds and uses of environments (once, from ``ready()``)."""
    if users not in _users:
        _users.append(users)


def other_builds_in_flight(*, entrant_id: int, benchmark_id: int) -> int:
    return sum(users.builds_in_flight(entrant_id, benchmark_id) for users in _users)


def in_use(environment: Environment) -> bool:
    return any(users.in_use(environment) for users in _users)
