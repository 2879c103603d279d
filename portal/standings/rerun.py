"""The final rerun (docs/rules.md, "Final standings"): after the close, staff start it;
each counted submission (``nominations.counted_for``) gets ``final_runs`` runs of purpose
``final`` on the final cohort, or on the official one when staff confirm that choice
(``portal.submissions.final``: queued, claimed and scored as any run, under the same
gates). When every queued run is settled, ``rules.decide`` says which close neighbours
get their extra runs (queued once); after those the result is complete, its prize
positions enter review (``prizes``) and publishing takes it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.contests.models import Benchmark, Cohort
from portal.core import errors
from portal.hosts.selectors import noise_band_percent
from portal.standings import rules
from portal.standings.models import FinalEntry, FinalRerun, Standings
from portal.standings.nominations import (
    counted_for,
    final_settings_for,
    identity_key,
    nomination_deadline,
)
from portal.standings.prizes import prize_reviews_open
from portal.submissions.final import final_runs_queue
from portal.submissions.models import Run
from portal.teams.selectors import teams_by_member

PUBLISH = "standings.publish_standings"
_OPEN = (Run.QUEUED, Run.STAGING, Run.RUNNING)
# What staff type to rerun on the official cohort when there is no final one.
OFFICIAL_COHORT_CONFIRMATION = "rerun on the official cohort"


def final_cohort(benchmark: Benchmark) -> Cohort:
    """The cohort of the final rerun: the benchmark's ``final`` cohort, else its
    official one (``no_cohort`` without either; staff must confirm the official one,
    :data:`OFFICIAL_COHORT_CONFIRMATION`, since its images are not fresh)."""
    cohorts = {c.kind: c for c in Cohort.objects.filter(benchmark=benchmark)}
    cohort = cohorts.get(Cohort.FINAL) or cohorts.get(Cohort.OFFICIAL)
    if cohort is None:
        raise errors.NoCohort("This benchmark has no official cohort to run the final rerun on.")
    return cohort


def final_rerun_start(
    *,
    benchmark: Benchmark,
    actor: Any,
    reason: str,
    confirm_official_cohort: str = "",
    origin: Origin = NOWHERE,
    now: dt.datetime | None = None,
) -> FinalRerun:
    """Staff (``standings.publish_standings``): start the final rerun, audited.

    Refused (``invalid_parameter``) before the close or the nomination deadline, once
    started, once standings are published, and, on a benchmark without a ``final``
    cohort, unless ``confirm_official_cohort`` is :data:`OFFICIAL_COHORT_CONFIRMATION`
    (the rerun is then on the official cohort, whose images are not fresh);
    ``no_cohort`` without a cohort. Queues ``final_runs`` runs of each counted
    submission in this transaction.
    """
    errors.staff_permission_check(actor, PUBLISH)
    now = now or timezone.now()
    if now < benchmark.closes_at:
        raise errors.InvalidParameter("The final rerun starts after the benchmark closes.")
    if now < nomination_deadline(benchmark):
        raise errors.InvalidParameter("The final rerun starts after the nomination deadline.")
    if not reason.strip():
        raise errors.InvalidParameter("Give a reason; it is recorded in the audit trail.")
    settings = final_settings_for(benchmark)
    with transaction.atomic():
        list(
            Benchmark.objects.select_for_update(no_key=True)
            .filter(pk=benchmark.pk)
            .values_list("pk", flat=True)
        )
        if FinalRerun.objects.filter(benchmark=benchmark).exists():
            raise errors.InvalidParameter("The final rerun of this benchmark has already started.")
        if Standings.objects.filter(benchmark=benchmark).exists():
            raise errors.InvalidParameter("Final standings are published; correct them instead.")
        cohort = final_cohort(benchmark)
        confirmed = confirm_official_cohort.strip() == OFFICIAL_COHORT_CONFIRMATION
        if cohort.kind != Cohort.FINAL and not confirmed:
            raise errors.InvalidParameter(
                "This benchmark has no final cohort, so the final rerun would run on the "
                "official cohort, whose images every official run has seen: not fresh. "
                "Import a final cohort first (manage.py import_cohort --benchmark "
                f"{benchmark.slug} --kind final --images DIR --answers FILE), or confirm "
                f'the choice with confirm_official_cohort "{OFFICIAL_COHORT_CONFIRMATION}".'
            )
        rerun = FinalRerun.objects.create(
            benchmark=benchmark,
            cohort=cohort,
            final_runs=settings.final_runs,
            extra_runs=settings.extra_runs,
            started_at=now,
            started_by=actor if actor is not None and actor.is_authenticated else None,
        )
        submission_ids = sorted(sid for ids in counted_for(benchmark).values() for sid in ids)
        FinalEntry.objects.bulk_create(
            FinalEntry(rerun=rerun, submission_id=sid) for sid in submission_ids
        )
        queued = final_runs_queue(
            submission_ids=submission_ids, cohort_id=int(cohort.pk), count=rerun.final_runs
        )
        audit_record(
            actor=actor,
            action="standings.final_rerun_started",
            target=f"benchmark:{benchmark.slug}",
            origin=origin,
            reason=reason,
            details={
                "cohort": cohort.kind,
                "fresh": cohort.kind == Cohort.FINAL,
                "submissions": submission_ids,
                "runs_queued": queued,
                "final_runs": rerun.final_runs,
            },
        )
    return rerun


def _scored(rerun: FinalRerun) -> list[rules.Scored]:
    """Each entry of the rerun with its final runs so far (three queries). A team
    member's entry competes as the team (its name, one key per team: ``identity_key``),
    so the team ranks once, with the better of its at most two counted submissions."""
    entries = list(FinalEntry.objects.filter(rerun=rerun).select_related("submission__entrant"))
    teams = teams_by_member(rerun.benchmark_id)
    runs: dict[int, list[tuple[str, bool | None, int | None, str]]] = {}
    for row in (
        Run.objects.filter(
            submission_id__in=[entry.submission_id for entry in entries],
            purpose=Run.FINAL,
            cohort_id=rerun.cohort_id,
        )
        .order_by("try_number")
        .values_list("submission_id", "status", "passed", "wall_time_ns", "verdict_reason")
    ):
        runs.setdefault(row[0], []).append(row[1:])
    scored = []
    for entry in entries:
        submission = entry.submission
        mine = runs.get(int(submission.pk), [])
        failure = next(
            (
                reason or "a final run did not pass"
                for status, passed, _, reason in mine
                if status == Run.FINISHED and not passed
            ),
            "",
        )
        if submission.disqualified_at is not None:
            failure = "disqualified"
        team = teams.get(submission.entrant_id)
        scored.append(
            rules.Scored(
                submission_id=int(submission.pk),
                entrant_id=identity_key(
                    None if team is None else int(team.pk), submission.entrant_id
                ),
                entrant=team.name if team else submission.entrant.get_username(),
                submitted_at=submission.submitted_at,
                walls_ns=tuple(
                    int(wall)
                    for status, passed, wall, _ in mine
                    if status == Run.FINISHED and passed and wall is not None
                ),
                failure=failure,
                pending=sum(1 for status, *_ in mine if status in _OPEN),
                extra_done=entry.extra_requested or rerun.extra_runs == 0,
            )
        )
    return scored


def final_rerun_decision(benchmark: Benchmark) -> rules.Decision | None:
    """What the final runs so far decide (``rules.decide`` with the class's noise band),
    or None when no final rerun was started."""
    rerun = FinalRerun.objects.filter(benchmark=benchmark).first()
    if rerun is None:
        return None
    return rules.decide(_scored(rerun), band_pct=noise_band_percent(benchmark.hardware_class_id))


def final_rerun_advance(benchmark_id: int) -> list[int]:
    """Once no final run of the benchmark is open: queue the extra runs that close
    neighbours need (each entry at most once). Idempotent; holds the rerun's row lock.
    Once the result is complete, each row in a prize position enters provenance review
    (``prizes.prize_reviews_open``, after the lock). Returns the submissions given extra
    runs."""
    with transaction.atomic():
        rerun = (
            FinalRerun.objects.select_for_update()
            .select_related("benchmark")
            .filter(benchmark_id=benchmark_id)
            .first()
        )
        if rerun is None:
            return []
        scored = _scored(rerun)
        decision = rules.decide(
            scored, band_pct=noise_band_percent(rerun.benchmark.hardware_class_id)
        )
        wanting: list[int] = []
        if not any(item.pending for item in scored) and decision.extra_runs:
            wanting = list(
                FinalEntry.objects.filter(
                    rerun=rerun, submission_id__in=decision.extra_runs, extra_requested=False
                ).values_list("submission_id", flat=True)
            )
            FinalEntry.objects.filter(rerun=rerun, submission_id__in=wanting).update(
                extra_requested=True
            )
            final_runs_queue(
                submission_ids=wanting, cohort_id=rerun.cohort_id, count=rerun.extra_runs
            )
    if decision.complete:
        prize_reviews_open(rerun.benchmark, decision.rows, now=timezone.now())
    return sorted(wanting)


def final_rerun_after_run(benchmark_id: int) -> None:
    """``hooks.final_run_settled``: advance the rerun after the verdict commits."""
    transaction.on_commit(lambda: final_rerun_advance(benchmark_id), robust=True)
