"""Nominations (docs/rules.md, "Final standings"): each team (an entrant on their own is a
team of one) names up to two of its members' passing official submissions for the final
standings before the benchmark's nomination deadline; any member may set them. Without a
nomination the team's two best count (``rules.counted_submissions``).

A submission counts for its uploader's team of now (as on the board): a member who leaves
takes their submissions out of the team's nominations, and an entrant who joins or
creates a team gives up their own (:func:`nominations_membership_changed`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Min
from django.utils import timezone

from portal.contests.kinds import timed_path_check
from portal.contests.models import Benchmark
from portal.core import errors
from portal.standings import rules
from portal.standings.models import FinalSettings, Nomination
from portal.submissions.models import Run, Submission
from portal.teams.locks import lock_identity
from portal.teams.models import Team
from portal.teams.selectors import member_ids, team_of, teams_by_member


def final_settings_for(benchmark: Benchmark) -> FinalSettings:
    """The benchmark's final settings (an unsaved row of defaults when staff set none)."""
    found = FinalSettings.objects.filter(benchmark=benchmark).first()
    return found if found is not None else FinalSettings(benchmark=benchmark)


def nomination_deadline(benchmark: Benchmark) -> dt.datetime:
    """The first instant nominations are refused (default: the benchmark's close)."""
    return final_settings_for(benchmark).deadline(benchmark.closes_at)


def identity_key(team_id: int | None, entrant_id: int) -> int:
    """The key an entrant competes under in the final standings: their team's (its negated
    id: never a user's id), else their own user id."""
    return -team_id if team_id is not None else entrant_id


def passing_official(
    benchmark: Benchmark, entrant_ids: Sequence[int] | None = None
) -> list[rules.Passing]:
    """Every ``passed``, not disqualified official submission (of ``entrant_ids``, or of
    everyone) with its best passing scored wall time, keyed by its uploader's user id.
    One query."""
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
    if entrant_ids is not None:
        runs = runs.filter(submission__entrant_id__in=list(entrant_ids))
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


def _rows_of(benchmark: Benchmark, team: Team | None, entrant_id: int) -> Any:
    """The stored nominations of one team (or of an entrant on their own)."""
    rows = Nomination.objects.filter(benchmark=benchmark)
    if team is not None:
        return rows.filter(team=team)
    return rows.filter(team__isnull=True, entrant_id=entrant_id)


def nominated_ids(benchmark: Benchmark) -> dict[int, list[int]]:
    """The stored nominations, per team (``identity_key``), in the order they were made."""
    nominated: dict[int, list[int]] = {}
    rows = Nomination.objects.filter(benchmark=benchmark).order_by("id")
    for team_id, entrant_id, submission_id in rows.values_list(
        "team_id", "entrant_id", "submission_id"
    ):
        nominated.setdefault(identity_key(team_id, entrant_id), []).append(submission_id)
    return nominated


def counted_for(benchmark: Benchmark) -> dict[int, list[int]]:
    """Per team (``identity_key``; an entrant on their own is a team of one), the at most
    two submissions the final standings take: its nomination, else its two best."""
    teams = teams_by_member(benchmark.pk)
    passing = [
        _as_team(row, teams[row.entrant_id].pk if row.entrant_id in teams else None)
        for row in passing_official(benchmark)
    ]
    return rules.counted_submissions(passing, nominated_ids(benchmark))


def _as_team(row: rules.Passing, team_id: int | None) -> rules.Passing:
    return rules.Passing(
        submission_id=row.submission_id,
        entrant_id=identity_key(team_id, row.entrant_id),
        best_wall_time_ns=row.best_wall_time_ns,
        submitted_at=row.submitted_at,
    )


@dataclass(frozen=True)
class NominationState:
    """A team's nominations as the page and the API show them (an entrant on their own is
    a team of one)."""

    deadline: dt.datetime
    open: bool
    team: str  # the team's name; "" for an entrant on their own
    nominated: list[int]  # what the team named ([] : the default applies)
    set_by: str  # the member who named them ("" while the default applies)
    set_at: dt.datetime | None
    counted: list[int]  # what counts now
    default: bool  # True while nothing is named and the two best count
    eligible: list[int]  # the members' passing official submissions, best first


def nominations_of(
    benchmark: Benchmark, entrant: Any, now: dt.datetime | None = None
) -> NominationState:
    """The nominations of the entrant's team (or their own), what counts, and what any
    member may name. A metered-estimation benchmark has none (``invalid_parameter``: its
    entries are nominated one by one, ``portal.estimation``)."""
    timed_path_check(benchmark, "nomination")
    now = now or timezone.now()
    team = team_of(benchmark.pk, int(entrant.pk))
    return _state(benchmark, team, int(entrant.pk), now)


def _state(
    benchmark: Benchmark, team: Team | None, entrant_id: int, now: dt.datetime
) -> NominationState:
    deadline = nomination_deadline(benchmark)
    members = [entrant_id] if team is None else member_ids(team)
    passing = passing_official(benchmark, members)
    rows = list(_rows_of(benchmark, team, entrant_id).select_related("entrant").order_by("id"))
    nominated = [row.submission_id for row in rows]
    counted = rules.counted_submissions(
        [_as_team(row, None if team is None else int(team.pk)) for row in passing],
        {identity_key(None if team is None else int(team.pk), entrant_id): nominated},
    )
    best_first = sorted(
        passing, key=lambda r: (r.best_wall_time_ns, r.submitted_at, r.submission_id)
    )
    return NominationState(
        deadline=deadline,
        open=now < deadline,
        team="" if team is None else team.name,
        nominated=nominated,
        set_by=rows[-1].entrant.get_username() if rows else "",
        set_at=rows[-1].nominated_at if rows else None,
        counted=next(iter(counted.values()), []),
        default=not nominated,
        eligible=[row.submission_id for row in best_first],
    )


def nominations_set(
    *, entrant: Any, benchmark: Benchmark, submission_ids: list[int], now: dt.datetime | None = None
) -> NominationState:
    """Replace the nominations of the entrant's team (or their own) on ``benchmark`` with
    ``submission_ids`` (an empty list: back to the default, the two best).

    Refuses, changing nothing: a metered-estimation benchmark (``invalid_parameter``, first);
    after the deadline (``window_closed``); more than
    :data:`rules.MAX_NOMINATIONS` or a repeated id (``invalid_parameter``); a submission
    that is not a member's on this benchmark (``not_found``: ids reveal nothing); a
    practice submission, or one that has not passed or was disqualified
    (``invalid_parameter``). Holds the entrant's user row lock, then their team's
    (``teams.locks.lock_identity``), so two members' requests apply one after the other
    and none interleaves with a change of membership.
    """
    timed_path_check(benchmark, "nomination")
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
        team = lock_identity(entrant_id=int(entrant.pk), benchmark=benchmark)
        members = [int(entrant.pk)] if team is None else member_ids(team)
        found = {
            int(submission.pk): submission
            for submission in Submission.objects.filter(
                pk__in=submission_ids, entrant_id__in=members, benchmark=benchmark
            )
        }
        whose = "You have" if team is None else "Your team has"
        for submission_id in submission_ids:
            submission = found.get(submission_id)
            if submission is None:
                raise errors.NotFound(f"{whose} no submission {submission_id} on this benchmark.")
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
        _rows_of(benchmark, team, int(entrant.pk)).delete()
        Nomination.objects.bulk_create(
            Nomination(
                benchmark=benchmark,
                team=team,
                entrant=entrant,
                submission_id=sid,
                nominated_at=now,
            )
            for sid in submission_ids
        )
    return _state(benchmark, team, int(entrant.pk), now)


def nominations_membership_changed(
    benchmark: Benchmark, team: Team | None, user_ids: Sequence[int]
) -> None:
    """After a change of membership (``portal.teams.hooks``, inside its transaction,
    holding the locks of ``user_ids`` and of the team): an entrant who joined or created
    ``team`` gives up their own nominations (the team's stand); one who left takes their
    submissions out of the team's (a deleted team's went with it)."""
    members = set() if team is None else set(member_ids(team))
    for user_id in user_ids:
        if user_id in members:
            Nomination.objects.filter(
                benchmark=benchmark, team__isnull=True, entrant_id=user_id
            ).delete()
        elif team is not None:
            Nomination.objects.filter(
                benchmark=benchmark, team=team, submission__entrant_id=user_id
            ).delete()
