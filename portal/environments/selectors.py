"""Reads that matter about builds: the build network as the last live checks found it, and
which of an entrant's environments an upload may use (its benchmark's own, or one carried
over from an earlier phase of its contest)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from portal.contests.models import Benchmark
from portal.core import errors
from portal.environments.models import BuildNetworkCheck, Environment
from portal.teams.selectors import teammate_ids

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


# Which environment an upload may use -------------------------------------------------


def carries_over(built_for: Benchmark, used_on: Benchmark) -> bool:
    """Whether an environment built for ``built_for`` may be used on ``used_on``: the same
    benchmark, or an earlier phase of the same contest whose hardware class has the same
    platform and the same GPU type (none on a CPU class), so its image runs there."""
    if built_for.pk == used_on.pk:
        return True
    if built_for.contest_id is None or built_for.contest_id != used_on.contest_id:
        return False
    if built_for.phase_order >= used_on.phase_order:
        return False
    return carry_over_refusal(built_for, used_on) is None


def carry_over_refusal(built_for: Benchmark, used_on: Benchmark) -> str | None:
    """Why an environment of ``built_for`` cannot run on ``used_on``'s hardware, or None."""
    source, target = built_for.hardware_class, used_on.hardware_class
    source_platform = source.platform or settings.PODIUM_DOCKER_PLATFORM
    target_platform = target.platform or settings.PODIUM_DOCKER_PLATFORM
    if source_platform != target_platform:
        return (
            f"it was built for {built_for.phase_label}'s platform {source_platform or 'default'}"
            f" ({source.name}), and {used_on.phase_label} runs on {target_platform or 'default'}"
            f" ({target.name})"
        )
    if (source.gpus > 0, source.gpu_model) != (target.gpus > 0, target.gpu_model):
        return (
            f"it was built for {built_for.phase_label}'s GPU type "
            f"({source.gpu_model or 'no GPU'}), and {used_on.phase_label} runs on "
            f"{target.gpu_model or 'no GPU'}"
        )
    return None


def usable_environments(entrant: Any, benchmark: Benchmark) -> QuerySet[Environment]:
    """The ready environments an upload of ``entrant`` to ``benchmark`` may use: their
    own and their teammates' on it (the team on ``benchmark``), and those of earlier
    phases of its contest that carry over (:func:`carries_over`), in phase order then
    name. Three queries."""
    candidates = Environment.objects.filter(
        owner_id__in=teammate_ids(benchmark.pk, entrant.pk), status=Environment.READY
    )
    if benchmark.contest_id is None:
        return candidates.filter(benchmark=benchmark).order_by("name")
    earlier = Benchmark.objects.select_related("hardware_class").filter(
        contest_id=benchmark.contest_id, phase_order__lt=benchmark.phase_order
    )
    allowed = [benchmark.pk] + [phase.pk for phase in earlier if carries_over(phase, benchmark)]
    return (
        candidates.filter(benchmark_id__in=allowed)
        .select_related("benchmark")
        .order_by("-benchmark__phase_order", "name")
    )


def environment_usable_check(
    *, entrant: Any, benchmark: Benchmark, environment: Environment
) -> None:
    """Refuse an upload to ``benchmark`` with ``environment`` unless the entrant may use it.

    An environment of anyone but the entrant and their teammates on ``benchmark``, or one
    of a benchmark outside the contest (or of a later phase), is ``not_found``; one of an
    earlier phase whose hardware differs is ``invalid_parameter``, saying which platform
    or GPU type differs. Whether it is ready is the caller's check
    (``environment_not_ready``)."""
    if environment.owner_id not in teammate_ids(benchmark.pk, entrant.pk):
        raise errors.NotFound("No such environment.")
    if environment.benchmark_id == benchmark.pk:
        return
    built_for = environment.benchmark
    same_contest = built_for.contest_id is not None and built_for.contest_id == benchmark.contest_id
    if not same_contest or built_for.phase_order >= benchmark.phase_order:
        raise errors.NotFound("No such environment.")
    refusal = carry_over_refusal(built_for, benchmark)
    if refusal is not None:
        raise errors.InvalidParameter(
            f"Environment '{environment.name}' cannot be used here: {refusal}. Build an "
            f"environment on {benchmark.phase_label} instead; nothing was charged."
        )


def usable_environment(entrant: Any, benchmark: Benchmark, environment_id: int) -> Environment:
    """The environment ``environment_id`` for an upload of ``entrant`` to ``benchmark``,
    decided by :func:`environment_usable_check` (``not_found`` for no such row)."""
    environment = (
        Environment.objects.select_related("benchmark__hardware_class")
        .filter(pk=environment_id, owner_id__in=teammate_ids(benchmark.pk, entrant.pk))
        .first()
    )
    if environment is None:
        raise errors.NotFound("No such environment.")
    environment_usable_check(entrant=entrant, benchmark=benchmark, environment=environment)
    return environment
