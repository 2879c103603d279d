"""No prize before review (docs/rules.md, "Final standings").

On a benchmark that states a validation-data boundary, each row of the final standings
in a prize position (ranks 1 to ``FinalSettings.prize_positions``; tied rows share a
rank) enters provenance review (``portal.submissions.review``, the same review as the
board's apparent winners) when the final rerun settles, or when staff first try to
publish. Publishing, and a correction that brings a submission into a prize position,
is refused until each such row's review is cleared; a disqualified submission leaves
the standings computed again, so the next row moves up and is reviewed in its turn. A
benchmark without a boundary reviews nothing, and nothing waits.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from portal.contests.models import Benchmark
from portal.core import errors
from portal.standings import rules
from portal.standings.nominations import final_settings_for
from portal.submissions.models import ProvenanceReview, Submission
from portal.submissions.review import review_open

NOT_REVIEWED = "not reviewed"


def prize_rows(rows: Sequence[rules.Row], positions: int) -> list[rules.Row]:
    """The rows in a prize position: ranks 1 to ``positions`` (tied rows share a rank)."""
    return [row for row in rows if row.rank <= positions]


@dataclass(frozen=True)
class Waiting:
    """A row in a prize position whose review is not cleared: ``review`` is the review's
    state (``under_review``) or :data:`NOT_REVIEWED`."""

    row: rules.Row
    review: str

    def __str__(self) -> str:
        return (
            f"rank {self.row.rank}, {self.row.entrant}, submission {self.row.submission_id} "
            f"({self.review})"
        )


def reviewed_positions(benchmark: Benchmark) -> int:
    """How many ranks are prize positions reviewed before publishing: the final settings'
    ``prize_positions``, or 0 without a validation-data boundary (nothing to review)."""
    if not benchmark.validation_boundary:
        return 0
    return final_settings_for(benchmark).prize_positions


def _reviewed_rows(
    benchmark: Benchmark, rows: Sequence[rules.Row], settled: Collection[int]
) -> list[rules.Row]:
    """The prize rows that need a cleared review (:func:`reviewed_positions`); never those
    of ``settled`` (submissions already in a prize position of the published standings)."""
    positions = reviewed_positions(benchmark)
    return [row for row in prize_rows(rows, positions) if row.submission_id not in settled]


def prize_reviews_open(
    benchmark: Benchmark,
    rows: Sequence[rules.Row],
    *,
    now: dt.datetime,
    settled: Collection[int] = (),
) -> int:
    """Open the review of each prize row's submission that has none (each commits on its
    own, so a refused publication keeps them); how many were opened."""
    wanted = _reviewed_rows(benchmark, rows, settled)
    found = Submission.objects.select_related("benchmark").in_bulk(
        [row.submission_id for row in wanted]
    )
    return sum(
        review_open(
            submission=found[row.submission_id],
            because=f"rank {row.rank} of the final standings (a prize position)",
            now=now,
        )
        for row in wanted
        if row.submission_id in found
    )


def prize_reviews_waiting(
    benchmark: Benchmark, rows: Sequence[rules.Row], *, settled: Collection[int] = ()
) -> list[Waiting]:
    """The prize rows whose review is not cleared, in rank order (one query)."""
    wanted = _reviewed_rows(benchmark, rows, settled)
    states = review_states([row.submission_id for row in wanted])
    return [
        Waiting(row=row, review=states.get(row.submission_id, NOT_REVIEWED))
        for row in wanted
        if states.get(row.submission_id) != ProvenanceReview.CLEARED
    ]


def prize_gate(
    benchmark: Benchmark, rows: Sequence[rules.Row], *, settled: Collection[int] = ()
) -> None:
    """Refuse (``invalid_parameter``), naming each row, while a prize row is not cleared."""
    waiting = prize_reviews_waiting(benchmark, rows, settled=settled)
    if waiting:
        positions = final_settings_for(benchmark).prize_positions
        raise errors.InvalidParameter(
            f"A prize position (ranks 1 to {positions}) is not cleared by provenance "
            f"review: {'; '.join(str(item) for item in waiting)}. Each must be cleared, or "
            "its submission disqualified (the next row then moves up and is reviewed), first."
        )


def review_states(submission_ids: Collection[int]) -> dict[int, str]:
    """Each reviewed submission's review state, for marking rows (one query)."""
    return dict(
        ProvenanceReview.objects.filter(submission_id__in=list(submission_ids)).values_list(
            "submission_id", "status"
        )
    )
