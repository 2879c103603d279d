"""Nominations (docs/rules.md, "Final standings"): each entrant names up to two of their
passing official submissions for the final standings before the benchmark's nomination
deadline; without a nomination their two best count (``rules.counted_submissions``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Min
from django.utils import timezone

from portal import errors
from portal.contests.models import Benchmark
from portal.standings import rules
from portal.standings.models import FinalSettings, Nomination
from portal.submissions.models import Run, Submission


def final_settings_for(benchmark: Benchmark) -> FinalSettings:
    """The benchmark's final settings (an unsaved row of defaults when staff set none)."""
    found = FinalSettings.objects.filter(benchmark=benchmark).first()
    return found if found is not None else FinalSettings(benchmark=benchmark)


def nomination_deadline(benchmark: Benchmark) -> dt.datetime:
    """The first instant nominations are refused (default: the benchmark's close)."""
    return final_settings_for(benchmark).deadline(benchmark.closes_at)


def passing_official(benchmark: Benchmark, entrant_id: int | None = None) -> list[rules.Passing]:
    """Every ``passed``, not disqualified official submission (of one entrant, or all)
    with its best passing scored wall time. One query."""
    runs = Run.objects.filter(
        submission__benchmark=benchmark,
        submission__kind=Submission.OFFICIAL,
        submission__status=Submission.PASSED,
        submission__disqualified_at__isnull=True,
        purpose=Run.SCORE,
        status=Run.FINISHED,
        passed=True,
        wall_time_ns__isnull=False,
    )
    if entrant_id is not None:
        runs = runs.filter(submission__entrant_id=entrant_id)
    rows = runs.values("submission_id", "submission__entrant_id", "submission__submitted_at")
    return [
        rules.Passing(
            submission_id=row["submission_id"],
            entrant_id=row["submission__entrant_id"],
            best_wall_time_ns=int(row["best"]),
            submitted_at=row["submission__submitted_at"],
        )
        for row in rows.annotate(best=Min("wall_time_ns")).order_by("submission_id")
    ]


def nominated_ids(benchmark: Benchmark, entrant_id: int | None = None) -> dict[int, list[int]]:
    """The stored nominations, per entrant, in the order they were made."""
    rows = Nomination.objects.filter(benchmark=benchmark)
    if entrant_id is not None:
        rows = rows.filter(entrant_id=entrant_id)
    nominated: dict[int, list[int]] = {}
    for entrant, submission in rows.order_by("id").values_list("entrant_id", "submission_id"):
        nominated.setdefault(entrant, []).append(submission)
    return nominated


def counted_for(benchmark: Benchmark) -> dict[int, list[int]]:
    """Per entrant, the submissions the final standings take (nominated, else two best)."""
    return rules.counted_submissions(passing_official(benchmark), nominated_ids(benchmark))


@dataclass(frozen=True)
class NominationState:
    """An entrant's nominations as the page and the API show them."""

    deadline: dt.datetime
    open: bool
    nominated: list[int]  # what they named ([] : the default applies)
    counted: list[int]  # what counts now
    default: bool  # True while nothing is named and the two best count
    eligible: list[int]  # their passing official submissions, best first


def nominations_of(
    benchmark: Benchmark, entrant: Any, now: dt.datetime | None = None
) -> NominationState:
    """The entrant's nominations, what counts, and what they may name."""
    now = now or timezone.now()
    deadline = nomination_deadline(benchmark)
    passing = passing_official(benchmark, int(entrant.pk))
    nominated = nominated_ids(benchmark, int(entrant.pk)).get(int(entrant.pk), [])
    counted = rules.counted_submissions(passing, {int(entrant.pk): nominated})
    best_first = sorted(
        passing, key=lambda r: (r.best_wall_time_ns, r.submitted_at, r.submission_id)
    )
    return NominationState(
        deadline=deadline,
        open=now < deadline,
        nominated=nominated,
        counted=counted.get(int(entrant.pk), []),
        default=not nominated,
        eligible=[row.submission_id for row in best_first],
    )


def nominations_set(
    *, entrant: Any, benchmark: Benchmark, submission_ids: list[int], now: dt.datetime | None = None
) -> NominationState:
    """Replace the entrant's nominations on ``benchmark`` with ``submission_ids`` (an
    empty list: back to the default, the two best).

    Refuses, changing nothing: after the deadline (``window_closed``); more than
    :data:`rules.MAX_NOMINATIONS` or a repeated id (``invalid_parameter``); a submission
    that is not the entrant's on this benchmark (``not_found``: ids reveal nothing); a
    practice submission, or one that has not passed or was disqualified
    (``invalid_parameter``). Holds the entrant's user row lock, so two requests at once
    apply one after the other.
    """
    now = now or timezone.now()
    deadline = nomination_deadline(benchmark)
    if now >= deadline:
        raise errors.WindowClosed(
            f"Nominations closed at {deadline.isoformat()}; they can no longer change."
        )
    if len(submission_ids) > rules.MAX_NOMINATIONS:
        raise errors.InvalidParameter(
            f"Nominate at most {rules.MAX_NOMINATIONS} submissions; "
            f"{len(submission_ids)} were sent."
        )
    if len(set(submission_ids)) != len(submission_ids):
        raise errors.InvalidParameter("A submission was nominated twice; name each once.")
    with transaction.atomic():
        list(
            get_user_model()
            .objects.select_for_update(no_key=True)
            .filter(pk=entrant.pk)
            .values_list("pk", flat=True)
        )
        found = {
            int(submission.pk): submission
            for submission in Submission.objects.filter(
                pk__in=submission_ids, entrant=entrant, benchmark=benchmark
            )
        }
        for submission_id in submission_ids:
            submission = found.get(submission_id)
            if submission is None:
                raise errors.NotFound(f"You have no submission {submission_id} on this benchmark.")
            if submission.kind != Submission.OFFICIAL:
                raise errors.InvalidParameter(
                    f"Submission {submission_id} is a practice submission; "
                    "only official submissions can be nominated."
                )
            if submission.status != Submission.PASSED or submission.disqualified_at is not None:
                state = "disqualified" if submission.disqualified_at else submission.status
                raise errors.InvalidParameter(
                    f"Submission {submission_id} has not passed (it is {state}); "
                    "only passing official submissions can be nominated."
                )
        Nomination.objects.filter(benchmark=benchmark, entrant=entrant).delete()
        Nomination.objects.bulk_create(
            Nomination(benchmark=benchmark, entrant=entrant, submission_id=sid, nominated_at=now)
            for sid in submission_ids
        )
    return nominations_of(benchmark, entrant, now)
