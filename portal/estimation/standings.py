"""A phase's published final standings and the review before prizes (docs/rules.md,
"Metered estimation").

The standings app publishes and corrects them (``portal.standings.publishing``: the
checks, the digest, the corrections and the audit trail are the timed benchmarks'); this
module is what it needs of an estimation phase (:class:`EstimationStandings`, registered
for ``Benchmark.ESTIMATION`` by ``portal/estimation/apps.py``): the rows of the final
rerun (``selectors.final_standings``), refused while the rerun is not settled; frozen as
:class:`EstimationStandingRow`; and the review of each entry in a prize position
(``FinalSettings.prize_positions``, ranks 1 to 3 by default): staff read the estimator's
source (:func:`entry_archive_review`, audited) and clear or disqualify it
(:func:`entry_review_decide`). Publishing waits for
each prize row to be cleared; a disqualified entry leaves the standings, so the next
team moves up and is reviewed in turn.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import IO, Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.contests.models import Benchmark
from portal.core import errors
from portal.estimation import rules, selectors, services
from portal.estimation.models import Entry, EntryReview, EstimationStandingRow, FinalScore
from portal.standings.models import Correction, Standings
from portal.standings.nominations import final_settings_for

DECIDE = "estimation.decide_entry_review"
NOT_REVIEWED = "not reviewed"


def _target(entry_id: int) -> str:
    return f"estimation_entry:{entry_id}"


def settled_rows(benchmark: Benchmark) -> list[rules.StandingScore]:
    """The final rerun's ranked rows, as publishing freezes them. Refused
    (``invalid_parameter``) when no final rerun was started and while any of its grades
    is queued or under way."""
    statuses = set(
        FinalScore.objects.filter(entry__benchmark=benchmark).values_list("status", flat=True)
    )
    if not statuses:
        raise errors.InvalidParameter(
            "No final rerun was started for this phase; start it (manage.py estimation_final) "
            "and publish once its grades are settled."
        )
    if statuses & {Entry.ACCEPTED, Entry.GRADING}:
        raise errors.InvalidParameter(
            "The final rerun is still grading; publish once every final score is settled."
        )
    return [
        rules.StandingScore(
            rank=row.rank,
            team=row.team,
            entrant=row.entrant,
            entry_id=row.entry_id,
            score=row.score,
        )
        for row in selectors.final_standings(benchmark)
        if row.rank is not None and row.score is not None
    ]


def _prize_rows(
    benchmark: Benchmark, rows: Sequence[rules.StandingScore], settled: Collection[int]
) -> list[rules.StandingScore]:
    positions = final_settings_for(benchmark).prize_positions
    return [row for row in rows if row.rank <= positions and row.entry_id not in settled]


def entry_review_open(*, entry_id: int, because: str, now: dt.datetime) -> bool:
    """Open the review of an entry (once; False when it had one), audited
    (``estimation.review.open``)."""
    if EntryReview.objects.filter(entry_id=entry_id).exists():
        return False
    try:
        with transaction.atomic():
            EntryReview.objects.create(entry_id=entry_id, opened_at=now, opened_because=because)
            audit_record(
                actor=None,
                action="estimation.review.open",
                target=_target(entry_id),
                reason=because,
            )
    except IntegrityError:
        return False  # opened at the same moment by another step
    return True


def entry_review_decide(
    *, review: EntryReview, actor: Any, decision: str, reason: str, origin: Origin = NOWHERE
) -> EntryReview:
    """Staff (``estimation.decide_entry_review``): ``cleared`` or ``disqualified`` (the
    entry leaves the final standings), with a reason, once; audited
    (``estimation.review.cleared`` or ``.disqualified``)."""
    errors.staff_permission_check(actor, DECIDE)
    reason = reason.strip()
    if decision not in (EntryReview.CLEARED, EntryReview.DISQUALIFIED):
        raise errors.InvalidParameter("decision must be 'cleared' or 'disqualified'.")
    if not reason:
        raise errors.InvalidParameter("Give the reason for the decision.")
    with transaction.atomic():
        done = EntryReview.objects.filter(pk=review.pk, status=EntryReview.UNDER_REVIEW).update(
            status=decision, decided_at=timezone.now(), decided_by=actor, decision_reason=reason
        )
        if not done:
            raise errors.InvalidParameter("This review has been decided already.")
        audit_record(
            actor=actor,
            action=f"estimation.review.{decision}",
            target=_target(review.entry_id),
            origin=origin,
            reason=reason,
        )
    review.refresh_from_db()
    return review


def entry_archive_review(
    *, entry: Entry, actor: Any, reason: str, origin: Origin = NOWHERE
) -> IO[bytes]:
    """Staff (``estimation.decide_entry_review``): open an entry's estimator archive (the
    tarball ``whest package`` made) to read its source for the review, audited
    (``estimation.source.download``, with the reason) before it is read. Refused
    (``invalid_parameter``) without a reason, (``not_found``) once the archive is gone."""
    errors.staff_permission_check(actor, DECIDE)
    reason = reason.strip()
    if not reason:
        raise errors.InvalidParameter("Give a reason to read an entrant's estimator.")
    path = services.archive_path(entry)
    if not path.is_file():
        raise errors.NotFound("This entry's archive is no longer kept.")
    audit_record(
        actor=actor,
        action="estimation.source.download",
        target=_target(entry.pk),
        origin=origin,
        reason=reason,
    )
    return path.open("rb")


def review_states(entry_ids: Collection[int]) -> dict[int, str]:
    """Each reviewed entry's review state, for marking rows (one query)."""
    return dict(
        EntryReview.objects.filter(entry_id__in=list(entry_ids)).values_list("entry_id", "status")
    )


class EstimationStandings:
    """What ``portal.standings.publishing`` needs of an estimation phase (the module doc)."""

    def compute(self, benchmark: Benchmark) -> tuple[str, list[rules.StandingScore]]:
        return Standings.ESTIMATION_FINAL, settled_rows(benchmark)

    def open_reviews(
        self,
        benchmark: Benchmark,
        rows: Sequence[rules.StandingScore],
        *,
        now: dt.datetime,
        settled: Collection[int],
    ) -> int:
        return sum(
            entry_review_open(
                entry_id=row.entry_id,
                because=f"rank {row.rank} of the final standings (a prize position)",
                now=now,
            )
            for row in _prize_rows(benchmark, rows, settled)
        )

    def gate(
        self, benchmark: Benchmark, rows: Sequence[rules.StandingScore], *, settled: Collection[int]
    ) -> None:
        wanted = _prize_rows(benchmark, rows, settled)
        states = review_states([row.entry_id for row in wanted])
        waiting = [
            f"rank {row.rank}, {row.team or row.entrant}, entry {row.entry_id} "
            f"({states.get(row.entry_id, NOT_REVIEWED)})"
            for row in wanted
            if states.get(row.entry_id) != EntryReview.CLEARED
        ]
        if waiting:
            positions = final_settings_for(benchmark).prize_positions
            raise errors.InvalidParameter(
                f"A prize position (ranks 1 to {positions}) is not cleared by review: "
                f"{'; '.join(waiting)}. Each entry must be cleared, or disqualified (the next "
                "team then moves up and is reviewed), first."
            )

    def digest(self, rows: Sequence[rules.StandingScore]) -> str:
        return rules.standings_digest(rows)

    def is_digest_of(self, rows: Sequence[rules.StandingScore], digest: str) -> bool:
        return rules.standings_digest(rows) == digest

    def freeze(self, standings: Standings, rows: Sequence[rules.StandingScore]) -> None:
        EstimationStandingRow.objects.filter(standings=standings).delete()
        EstimationStandingRow.objects.bulk_create(
            EstimationStandingRow(
                standings=standings,
                position=position,
                rank=row.rank,
                team=row.team,
                entrant=row.entrant,
                entry_id=row.entry_id,
                score=row.score,
            )
            for position, row in enumerate(rows, start=1)
        )

    def prized(self, benchmark: Benchmark) -> set[int]:
        positions = final_settings_for(benchmark).prize_positions
        return set(
            EstimationStandingRow.objects.filter(
                standings__benchmark=benchmark, rank__lte=positions
            ).values_list("entry_id", flat=True)
        )


@dataclass(frozen=True)
class PublishedScores:
    """A phase's published standings: the frozen rows, their corrections and each row's
    review state now (entry id to ``cleared`` or ``under_review``)."""

    standings: Standings
    rows: list[rules.StandingScore]
    corrections: list[Correction]
    reviews: dict[int, str]

    @property
    def marked(self) -> list[dict[str, object]]:
        """Each row's fields with ``review``: its entry's review state, None when never
        reviewed."""
        return [
            {
                "rank": row.rank,
                "team": row.team,
                "entrant": row.entrant,
                "entry_id": row.entry_id,
                "score": row.score,
                "review": self.reviews.get(row.entry_id),
            }
            for row in self.rows
        ]

    @property
    def csv(self) -> str:
        """The canonical CSV, whose SHA-256 is ``standings.digest``."""
        return rules.standings_csv(self.rows)


def published_scores(benchmark: Benchmark) -> PublishedScores | None:
    """The phase's published standings, None before. Four queries."""
    standings = Standings.objects.filter(benchmark=benchmark).first()
    if standings is None:
        return None
    rows = [
        rules.StandingScore(
            rank=row.rank,
            team=row.team,
            entrant=row.entrant,
            entry_id=row.entry_id,
            score=row.score,
        )
        for row in EstimationStandingRow.objects.filter(standings=standings).order_by("position")
    ]
    return PublishedScores(
        standings=standings,
        rows=rows,
        corrections=list(standings.corrections.all()),
        reviews=review_states([row.entry_id for row in rows]),
    )
