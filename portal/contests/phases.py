"""Reads of contests: their phases in order with each one's schedule, the hub's entries
(contests, and benchmarks that belong to none) and the latest announcements.

A benchmark with no contest is a contest of one: the hub lists it as it always did.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import Prefetch, QuerySet

from portal.contests.models import Announcement, Benchmark, Contest
from portal.contests.selectors import Schedule, schedule_at

# Open first, then upcoming, then closed (as the hub has always sorted benchmarks).
STATUS_ORDER = {"open": 0, "upcoming": 1, "closed": 2}
HUB_ANNOUNCEMENTS = 5
PAGE_ANNOUNCEMENTS = 20


@dataclass(frozen=True)
class Phase:
    """One phase of a contest: its benchmark and where its window stands at ``now``."""

    benchmark: Benchmark
    schedule: Schedule

    @property
    def label(self) -> str:
        return self.benchmark.phase_label


@dataclass(frozen=True)
class ContestView:
    """A contest with its phases in order and where it stands at ``now``.

    ``status``: ``open`` while a phase is open, ``upcoming`` until the first opens (or
    between phases, when one is still to come), ``closed`` once the last has closed.
    ``current`` is the phase the hub's countdown follows: the open one, else the next to
    open, else the last.
    """

    contest: Contest
    phases: tuple[Phase, ...]

    @property
    def status(self) -> str:
        statuses = {phase.schedule.status for phase in self.phases}
        for status in ("open", "upcoming"):
            if status in statuses:
                return status
        return "closed"

    @property
    def current(self) -> Phase | None:
        for status in ("open", "upcoming"):
            for phase in self.phases:
                if phase.schedule.status == status:
                    return phase
        return self.phases[-1] if self.phases else None

    @property
    def opens_at(self) -> dt.datetime | None:
        return min((phase.benchmark.opens_at for phase in self.phases), default=None)

    @property
    def closes_at(self) -> dt.datetime | None:
        return max((phase.benchmark.closes_at for phase in self.phases), default=None)


def phases_in_order() -> QuerySet[Benchmark]:
    """Benchmarks in their contest's order (phase_order, then opening, then slug)."""
    return Benchmark.objects.order_by("phase_order", "opens_at", "slug")


def contest_view(contest: Contest, now: dt.datetime) -> ContestView:
    """The contest's phases in order with their schedules. One query (none when the
    phases were prefetched by :func:`hub_entries`)."""
    cached = getattr(contest, "_prefetched_objects_cache", {}).get("phases")
    benchmarks = (
        list(cached) if cached is not None else list(phases_in_order().filter(contest=contest))
    )
    phases = tuple(Phase(benchmark, schedule_at(benchmark, now)) for benchmark in benchmarks)
    return ContestView(contest, phases)


@dataclass(frozen=True)
class HubEntry:
    """One line of the hub: a contest (``contest`` set) or a lone benchmark."""

    status: str
    contest: ContestView | None = None
    benchmark: Benchmark | None = None
    schedule: Schedule | None = None


def hub_entries(now: dt.datetime) -> list[HubEntry]:
    """Every contest (with its phases) and every benchmark of no contest, open first,
    then upcoming, then closed. Two queries."""
    contests = Contest.objects.prefetch_related(Prefetch("phases", queryset=phases_in_order()))
    entries = [
        HubEntry(status=view.status, contest=view)
        for view in (contest_view(contest, now) for contest in contests)
    ]
    for benchmark in Benchmark.objects.filter(contest=None):
        schedule = schedule_at(benchmark, now)
        entries.append(HubEntry(status=schedule.status, benchmark=benchmark, schedule=schedule))
    return sorted(entries, key=lambda entry: STATUS_ORDER[entry.status])


def announcements_of(contest: Contest | None = None) -> QuerySet[Announcement]:
    """Announcements newest first (of one contest, or of all), with their contest."""
    announcements = Announcement.objects.select_related("contest").order_by("-posted_at", "-id")
    if contest is not None:
        announcements = announcements.filter(contest=contest)
    return announcements
