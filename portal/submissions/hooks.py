"""What the submissions floor asks of the apps above it. They answer by registering
functions from their ``AppConfig.ready()``; this floor never imports them.

- **By benchmark kind** (:class:`KindHooks`, keyed by ``Benchmark.kind``): where an
  official submission of a benchmark of that kind goes once it is built or put back in
  its queue, and what its disqualification does there. ``portal.campaigns`` registers the
  ``campaign`` kind; an official submission of a kind nobody registered is scored in the
  fair queue, as every practice submission is.
- **Entering a status** (:func:`status_entered`): called inside the transaction that moved
  a submission, once per move (``portal.notifications`` queues its verdict mail after the
  commit).
- **A final run settled** (:func:`final_run_settled`): called inside the transaction that
  wrote a final-rerun run's verdict or platform fault (``portal.standings`` asks for extra
  runs once the rerun's queued runs are done).
- **The fleet** (:func:`hosts_online`, :func:`noise_band_pct`,
  :func:`reference_spread_pct`): the live hosts of a hardware class, the class's timing
  noise and its reference kit's measured spread at a cohort size, answered by
  ``portal.hosts``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:  # types only: the models import nothing of this module either
    from portal.audit.services import Origin
    from portal.submissions.models import Submission


class EntryDisqualified(Protocol):
    def __call__(
        self, submission: Submission, *, actor: Any, reason: str, origin: Origin
    ) -> bool: ...


@dataclass(frozen=True)
class KindHooks:
    """What a benchmark kind does with its official submissions.

    ``entry_queued(submission)``: the submission was just moved to ``bench_queued`` (built,
    or put back by staff), inside that transaction; True when it stays queued.
    ``entry_disqualified(submission, actor=, reason=, origin=)``: staff disqualified it,
    inside that transaction.
    """

    entry_queued: Callable[[Submission], bool]
    entry_disqualified: EntryDisqualified


_kinds: dict[str, KindHooks] = {}


def kind_register(kind: str, hooks: KindHooks) -> None:
    """Register what benchmarks of ``kind`` do (once per kind, from ``ready()``)."""
    _kinds[kind] = hooks


def official_entry(submission: Submission) -> KindHooks | None:
    """The hooks of the submission's benchmark kind when it is an official submission of
    a kind that registered some (it waits there, not in the fair queue); else None."""
    if submission.kind != submission.OFFICIAL:
        return None
    return _kinds.get(submission.benchmark.kind)


# Entering a status ---------------------------------------------------------------------

StatusListener = Callable[[int, str], None]  # (submission_id, status)
_status_listeners: list[StatusListener] = []


def status_listen(listener: StatusListener) -> None:
    """Call ``listener(submission_id, status)`` on every move (from ``ready()``)."""
    if listener not in _status_listeners:
        _status_listeners.append(listener)


def status_entered(*, submission_id: int, status: str) -> None:
    for listener in _status_listeners:
        listener(submission_id, status)


# A final run settled ---------------------------------------------------------------------

FinalRunListener = Callable[[int], None]  # (benchmark_id)
_final_listeners: list[FinalRunListener] = []


def final_run_listen(listener: FinalRunListener) -> None:
    """Call ``listener(benchmark_id)`` when a final run is settled (from ``ready()``)."""
    if listener not in _final_listeners:
        _final_listeners.append(listener)


def final_run_settled(*, benchmark_id: int) -> None:
    for listener in _final_listeners:
        listener(benchmark_id)


# The fleet -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fleet:
    """``hosts_online(hardware_class, now)``: how many hosts of the class are live;
    ``noise_band_pct(hardware_class)``: its timing noise in percent, None before any;
    ``reference_spread_pct(hardware_class, cohort_size)``: how much its reference kit's
    runs at that cohort size spread, in percent, None before any measurement."""

    hosts_online: Callable[[str, dt.datetime], int]
    noise_band_pct: Callable[[str], float | None]
    reference_spread_pct: Callable[[str, int], float | None]


_fleet: list[Fleet] = []


def fleet_register(fleet: Fleet) -> None:
    _fleet[:] = [fleet]


def _the_fleet() -> Fleet:
    if not _fleet:
        raise ImproperlyConfigured("No fleet registered: portal.hosts is not installed.")
    return _fleet[0]


def hosts_online(hardware_class: str, now: dt.datetime) -> int:
    return _the_fleet().hosts_online(hardware_class, now)


def noise_band_pct(hardware_class: str) -> float | None:
    return _the_fleet().noise_band_pct(hardware_class)


def reference_spread_pct(hardware_class: str, cohort_size: int) -> float | None:
    return _the_fleet().reference_spread_pct(hardware_class, cohort_size)
