"""Publishing final standings and correcting them (docs/rules.md, "Final standings").

Publishing freezes the rows (``StandingRow``: names and ids copied) with the SHA-256 of
their canonical CSV (``rules.digest_of``); nothing that happens to runs or the board
afterwards reaches them. A later change is a :class:`Correction`: staff give a reason,
the rows are computed again from the same source, the new digest replaces the old and
the old one is kept on the correction. Both are audited in the same transaction. Both
wait for the provenance review of each row in a prize position (``prizes``): the reviews
missing are opened (and kept) before the step is refused.

What is ranked, frozen and reviewed depends on the benchmark's kind (a
:class:`StandingsKind`): timed benchmarks' (:data:`TIMED`) is here; an app above that
ranks another kind (metered estimation) registers its own with :func:`register_kind`
from its ``AppConfig.ready()``. The steps, their checks, the digest, corrections and
the audit trail are the same for every kind.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from typing import Any, Protocol

from django.db import transaction
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.contests.models import Benchmark
from portal.contests.selectors import leaderboard_rows
from portal.core import errors
from portal.standings import rules
from portal.standings.models import Correction, FinalRerun, StandingRow, Standings
from portal.standings.nominations import final_settings_for
from portal.standings.prizes import prize_gate, prize_reviews_open
from portal.standings.rerun import PUBLISH, final_rerun_decision


def standings_source(benchmark: Benchmark) -> tuple[str, list[rules.Row]]:
    """What publishing would freeze now: the final rerun's result when one was started
    (refused, ``invalid_parameter``, while it is not complete), else the board."""
    if FinalRerun.objects.filter(benchmark=benchmark).exists():
        decision = final_rerun_decision(benchmark)
        if decision is None or not decision.complete:
            raise errors.InvalidParameter(
                "The final rerun is still running; publish once its runs are settled."
            )
        return Standings.FINAL_RERUN, decision.rows
    rows = [
        rules.Row(
            rank=row.rank,
            entrant_id=0,
            entrant=row.entrant,
            submission_id=row.submission_id,
            wall_time_ns=row.wall_time_ns,
            runs=1,
            tied=False,
        )
        for row in leaderboard_rows(benchmark)
    ]
    return Standings.BOARD, rows


class StandingsKind(Protocol):
    """What publishing needs of one kind of benchmark's standings; ``rows`` are the kind's
    own ranked rows, each with a ``rank``. Every method is read-only except
    :meth:`open_reviews` (each review commits on its own) and :meth:`freeze`."""

    def compute(self, benchmark: Benchmark) -> tuple[str, Sequence[Any]]:
        """The source (a ``Standings.source``) and the rows publishing would freeze now;
        refused (``invalid_parameter``) while they are not settled."""
        ...

    def open_reviews(
        self,
        benchmark: Benchmark,
        rows: Sequence[Any],
        *,
        now: dt.datetime,
        settled: Collection[int],
    ) -> int:
        """Open the missing review of each prize row not in ``settled``; how many."""
        ...

    def gate(self, benchmark: Benchmark, rows: Sequence[Any], *, settled: Collection[int]) -> None:
        """Refuse (``invalid_parameter``) while a prize row not in ``settled`` is not cleared."""
        ...

    def digest(self, rows: Sequence[Any]) -> str:
        """``sha256:<hex>`` of the rows' canonical CSV."""
        ...

    def is_digest_of(self, rows: Sequence[Any], digest: str) -> bool:
        """Whether ``digest`` is of these rows (a correction would change nothing)."""
        ...

    def freeze(self, standings: Standings, rows: Sequence[Any]) -> None:
        """Replace the standings' frozen rows with ``rows``."""
        ...

    def prized(self, benchmark: Benchmark) -> set[int]:
        """The ids (what a review is of) in a prize position of the published standings."""
        ...


class TimedStandings:
    """Timed benchmarks' standings (leaderboards and campaigns): the final rerun's result,
    else the board; frozen as :class:`StandingRow`; the prize rows' provenance reviews."""

    def compute(self, benchmark: Benchmark) -> tuple[str, list[rules.Row]]:
        return standings_source(benchmark)

    def open_reviews(
        self,
        benchmark: Benchmark,
        rows: Sequence[rules.Row],
        *,
        now: dt.datetime,
        settled: Collection[int],
    ) -> int:
        return prize_reviews_open(benchmark, rows, now=now, settled=settled)

    def gate(
        self, benchmark: Benchmark, rows: Sequence[rules.Row], *, settled: Collection[int]
    ) -> None:
        prize_gate(benchmark, rows, settled=settled)

    def digest(self, rows: Sequence[rules.Row]) -> str:
        return rules.digest_of(rows)

    def is_digest_of(self, rows: Sequence[rules.Row], digest: str) -> bool:
        return rules.is_digest_of(rows, digest)

    def freeze(self, standings: Standings, rows: Sequence[rules.Row]) -> None:
        _freeze(standings, rows)

    def prized(self, benchmark: Benchmark) -> set[int]:
        return _prized(benchmark)


TIMED = TimedStandings()
_KINDS: dict[str, StandingsKind] = {}


def register_kind(benchmark_kind: str, kind: StandingsKind) -> None:
    """Rank benchmarks of ``benchmark_kind`` (a ``Benchmark.kind``) with ``kind``: called
    from the ``AppConfig.ready()`` of the app above that owns their rows."""
    _KINDS[benchmark_kind] = kind


def kind_of(benchmark: Benchmark) -> StandingsKind:
    """The benchmark's kind of standings: the one registered for it, else :data:`TIMED`."""
    return _KINDS.get(benchmark.kind, TIMED)


def _check(actor: Any, benchmark: Benchmark, reason: str, now: dt.datetime) -> None:
    errors.staff_permission_check(actor, PUBLISH)
    if now < benchmark.closes_at:
        raise errors.InvalidParameter("Final standings are published after the benchmark closes.")
    if not reason.strip():
        raise errors.InvalidParameter("Give a reason; it is recorded in the audit trail.")


def _prized(benchmark: Benchmark) -> set[int]:
    """The submissions in a prize position of the published standings (none before)."""
    positions = final_settings_for(benchmark).prize_positions
    return set(
        StandingRow.objects.filter(standings__benchmark=benchmark, rank__lte=positions).values_list(
            "submission_id", flat=True
        )
    )


def _freeze(standings: Standings, rows: Sequence[rules.Row]) -> None:
    StandingRow.objects.filter(standings=standings).delete()
    StandingRow.objects.bulk_create(
        StandingRow(
            standings=standings,
            position=position,
            rank=row.rank,
            entrant=row.entrant,
            submission_id=row.submission_id,
            wall_time_ns=row.wall_time_ns,
            runs=row.runs,
            tied=row.tied,
        )
        for position, row in enumerate(rows, start=1)
    )


def standings_publish(
    *,
    benchmark: Benchmark,
    actor: Any,
    reason: str,
    origin: Origin = NOWHERE,
    now: dt.datetime | None = None,
) -> Standings:
    """Staff (``standings.publish_standings``): publish the benchmark's final standings
    once, audited (``standings.published``). Refused (``invalid_parameter``) before the
    close, without a reason, while the final rerun runs, while a prize position is not
    cleared by review (``prizes.prize_gate``, or the kind's own gate), and once published
    (correct them instead)."""
    now = now or timezone.now()
    kind = kind_of(benchmark)
    _check(actor, benchmark, reason, now)
    if not Standings.objects.filter(benchmark=benchmark).exists():
        kind.open_reviews(benchmark, kind.compute(benchmark)[1], now=now, settled=())
    with transaction.atomic():
        list(
            Benchmark.objects.select_for_update(no_key=True)
            .filter(pk=benchmark.pk)
            .values_list("pk", flat=True)
        )
        if Standings.objects.filter(benchmark=benchmark).exists():
            raise errors.InvalidParameter(
                "Final standings are already published; a change is a correction."
            )
        source, rows = kind.compute(benchmark)
        kind.gate(benchmark, rows, settled=())
        digest = kind.digest(rows)
        standings = Standings.objects.create(
            benchmark=benchmark,
            source=source,
            published_at=now,
            published_by=actor if actor is not None and actor.is_authenticated else None,
            reason=reason,
            digest=digest,
        )
        kind.freeze(standings, rows)
        audit_record(
            actor=actor,
            action="standings.published",
            target=f"benchmark:{benchmark.slug}",
            origin=origin,
            reason=reason,
            details={"digest": digest, "source": source, "rows": len(rows)},
        )
    return standings


def standings_correct(
    *,
    benchmark: Benchmark,
    actor: Any,
    reason: str,
    origin: Origin = NOWHERE,
    now: dt.datetime | None = None,
) -> Correction:
    """Staff (``standings.publish_standings``): compute the published standings again
    from their source (a disqualification since, say) and freeze the result, audited
    (``standings.corrected``) with both digests. Refused (``not_found``) before
    publishing, (``invalid_parameter``) without a reason, when nothing would change, and
    while a submission (or entry) new to a prize position is not cleared by review."""
    now = now or timezone.now()
    kind = kind_of(benchmark)
    _check(actor, benchmark, reason, now)
    if Standings.objects.filter(benchmark=benchmark).exists():
        kind.open_reviews(
            benchmark, kind.compute(benchmark)[1], now=now, settled=kind.prized(benchmark)
        )
    with transaction.atomic():
        standings = Standings.objects.select_for_update().filter(benchmark=benchmark).first()
        if standings is None:
            raise errors.NotFound("No final standings are published for this benchmark.")
        _, rows = kind.compute(benchmark)
        kind.gate(benchmark, rows, settled=kind.prized(benchmark))
        if kind.is_digest_of(rows, standings.digest):
            raise errors.InvalidParameter(
                "Nothing would change: the standings computed now are the published ones."
            )
        digest = kind.digest(rows)
        correction = Correction.objects.create(
            standings=standings,
            at=now,
            by=actor if actor is not None and actor.is_authenticated else None,
            reason=reason,
            previous_digest=standings.digest,
            digest=digest,
        )
        standings.digest = digest
        standings.save(update_fields=["digest"])
        kind.freeze(standings, rows)
        audit_record(
            actor=actor,
            action="standings.corrected",
            target=f"benchmark:{benchmark.slug}",
            origin=origin,
            reason=reason,
            details={"previous_digest": correction.previous_digest, "digest": digest},
        )
    return correction
