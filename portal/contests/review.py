"""Staff review of cohorts and benchmark rules, with the audit events it owes.

A cohort's summary (member count and digests) is free to read. Its member list and,
above all, its reference answers are read only through these functions, each of which
records an audit event first; so is every change of a benchmark's rules.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from portal.audit.services import NOWHERE, Origin, audit_record, field_changes
from portal.contests.models import Benchmark, Cohort, CohortItem
from portal.core import errors


@dataclass(frozen=True)
class CohortSummary:
    members: int
    members_sha256: str  # over "position<TAB>canonical name<TAB>member sha256" lines
    answers_sha256: str  # over "position<TAB>reference class" lines: proves, never shows


def cohort_summary(cohort: Cohort) -> CohortSummary:
    """Counts and digests that pin the frozen cohort without revealing its answers."""
    members = hashlib.sha256()
    answers = hashlib.sha256()
    count = 0
    rows = cohort.items.order_by("position").values_list(
        "position", "canonical_name", "sha256", "reference_class"
    )
    for position, name, sha256, reference in rows.iterator(chunk_size=2000):
        members.update(f"{position}\t{name}\t{sha256}\n".encode())
        answers.update(f"{position}\t{reference}\n".encode())
        count += 1
    return CohortSummary(count, members.hexdigest(), answers.hexdigest())


def _items(cohort: Cohort) -> list[CohortItem]:
    return list(cohort.items.order_by("position"))


def cohort_members_export(
    *, cohort: Cohort, actor: Any, reason: str, origin: Origin = NOWHERE
) -> str:
    """The member list as TSV (position, canonical name, sha256); audited first."""
    audit_record(
        actor=actor,
        action="cohort.members.export",
        target=f"cohort:{cohort.pk}",
        origin=origin,
        reason=reason,
        details={"benchmark": cohort.benchmark.slug, "kind": cohort.kind},
    )
    header = "position\tcanonical_name\tsha256\n"
    return header + "".join(
        f"{item.position}\t{item.canonical_name}\t{item.sha256}\n" for item in _items(cohort)
    )


def cohort_answers_export(
    *, cohort: Cohort, actor: Any, reason: str, origin: Origin = NOWHERE
) -> str:
    """The reference answers as TSV (position, canonical name, class); audited first.

    Needs a reason: reference answers are the contest's secret.
    """
    reason = reason.strip()
    if not reason:
        raise errors.InvalidParameter("Give the reason for reading the reference answers.")
    audit_record(
        actor=actor,
        action="cohort.answers.export",
        target=f"cohort:{cohort.pk}",
        origin=origin,
        reason=reason,
        details={"benchmark": cohort.benchmark.slug, "kind": cohort.kind},
    )
    header = "position\tcanonical_name\treference_class\n"
    return header + "".join(
        f"{item.position}\t{item.canonical_name}\t{item.reference_class}\n"
        for item in _items(cohort)
    )


def benchmark_save(
    *,
    benchmark: Benchmark,
    before: dict[str, Any] | None,
    actor: Any,
    origin: Origin = NOWHERE,
) -> Benchmark:
    """Save a benchmark created or edited by staff, recording its rules' change.

    ``before`` holds the stored values of the edited fields (None for a new
    benchmark). The event's details map each changed field to ``[old, new]``; saving
    with nothing changed records nothing.
    """
    with transaction.atomic():
        benchmark.save()
        if before is None:
            audit_record(
                actor=actor,
                action="benchmark.create",
                target=f"benchmark:{benchmark.slug}",
                origin=origin,
            )
            return benchmark
        changes = field_changes(benchmark, before)
        if changes:
            audit_record(
                actor=actor,
                action="benchmark.rules.change",
                target=f"benchmark:{benchmark.slug}",
                origin=origin,
                details={"changes": changes},
            )
    return benchmark
