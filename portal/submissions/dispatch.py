"""Fair dispatch: which waiting submission a scoring host claims next.

Many scoring hosts consume one Celery queue per hardware class. A message only wakes a
host; the host then claims the *run of record* from the database, here, so that two
hosts never claim one submission (``SELECT ... FOR UPDATE SKIP LOCKED``) and a lost or
duplicated message loses or doubles nothing.

The fair order (the rule), among the submissions *waiting*: ``queued`` for a score, or
``verifying`` with a queued verification run:

1. Tier: official scores, then verifications of passing official runs, then practice
   scores (the same order as ``portal.core.jobs``' message priorities), then the final
   rerun's runs of ``passed`` submissions (``final.py``), one at a time per submission.
2. Within a tier, the submission whose entrant has had the fewest runs *started* in the
   last 24 hours (``Run.started_at`` on or after ``now - 24 h``: any purpose and kind,
   on any benchmark, a run still under way included), so one entrant's queued attempts
   never starve another entrant's first.
3. Then the one waiting longest (``Submission.queued_at``: when it entered ``queued``
   or ``verifying``; ``submitted_at`` for a row that never recorded it), then the
   lowest submission id.

The window has no upper end: a run stamped a little ahead of ``now`` by a host whose
clock runs fast still counts against its entrant.

This module is the rule on plain values (:class:`Waiting`, :func:`fair_key`,
:func:`next_waiting`, :func:`started_counts`): pure, no Django (import-linter's contract
"Pure rules import no framework"), tested by property against a brute force.
``portal/submissions/waiting.py`` asks the database the same question, takes the claim's
lock, and keeps the wake-ups in flight.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

WINDOW = dt.timedelta(hours=24)


class Tier(enum.IntEnum):
    """Step 1 of the rule: lower goes first."""

    OFFICIAL = 0
    VERIFICATION = 1
    PRACTICE = 2
    # A run of the final rerun (after the close) of a passed submission: last, so that a
    # rescore or verification of the same class goes first.
    FINAL = 3


def tier_of(*, practice: bool, verification: bool) -> Tier:
    """The tier of a waiting score (``verification``: the re-run of a passed official run)."""
    if verification:
        return Tier.VERIFICATION
    return Tier.PRACTICE if practice else Tier.OFFICIAL


@dataclass(frozen=True)
class Waiting:
    """One waiting submission, as the rule sees it."""

    submission_id: int
    entrant_id: int
    tier: Tier
    since: dt.datetime  # when it entered the waiting state (aware)


FairKey = tuple[int, int, dt.datetime, int]


def in_window(started_at: dt.datetime | None, *, now: dt.datetime) -> bool:
    """Whether a run started at ``started_at`` counts at ``now`` (never-started ones don't)."""
    return started_at is not None and started_at >= now - WINDOW


def started_counts(
    starts: Iterable[tuple[int, dt.datetime | None]], *, now: dt.datetime
) -> dict[int, int]:
    """Runs started in the window per entrant, from ``(entrant_id, started_at)`` pairs."""
    counts: dict[int, int] = {}
    for entrant_id, started_at in starts:
        if in_window(started_at, now=now):
            counts[entrant_id] = counts.get(entrant_id, 0) + 1
    return counts


def fair_key(waiting: Waiting, started_counts: Mapping[int, int]) -> FairKey:
    """The sort key of the rule: tier, the entrant's runs started in the window (absent
    from ``started_counts``: none), when it started waiting, submission id."""
    return (
        int(waiting.tier),
        started_counts.get(waiting.entrant_id, 0),
        waiting.since,
        waiting.submission_id,
    )


def fair_order(waiting: Iterable[Waiting], started_counts: Mapping[int, int]) -> list[Waiting]:
    """Every waiting submission, first to be claimed first."""
    return sorted(waiting, key=lambda item: fair_key(item, started_counts))


def next_waiting(waiting: Iterable[Waiting], started_counts: Mapping[int, int]) -> Waiting | None:
    """The submission to claim next (None when nothing waits).

    A host that finds the first one locked by another host takes the next of the rest:
    the same rule over what remains.
    """
    return min(waiting, key=lambda item: fair_key(item, started_counts), default=None)


# The same question asked of the database ----------------------------------------------
