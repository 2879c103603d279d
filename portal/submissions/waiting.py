"""The waiting submissions in the database: the fair order (``dispatch``'s rule) asked as
one query, the claim that locks the next one, the wake-ups in flight and the classes
Celery beat's minute sweep wakes again, so that a lost message stalls no class.

:func:`waiting_in_fair_order`, :func:`next_waiting_id` and :func:`lock_next_waiting` give
what ``dispatch.fair_order`` gives on the same rows (``tests/submissions/test_dispatch.py``
holds them equal).

Cost (``bench/claim.py``: 10,000 waiting from 1,000 entrants, 20,000 runs started in two
days, PostgreSQL): the ranking is one statement, one pass over the window's runs (an
index-only range of ``run_started_idx``: each run carries its entrant) and one over the
waiting rows. Joining each run of the window to its submission for the entrant instead
took twice as long, and a correlated count per waiting row seconds.
"""

from __future__ import annotations

import datetime as dt

from django.core.cache import cache
from django.db import connection
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from portal.contests.models import Benchmark
from portal.submissions import pool
from portal.submissions.dispatch import WINDOW, Tier
from portal.submissions.models import Run, Submission

# How many of the first in the fair order lock_next_waiting reads in one go before
# locking them one by one (more than hosts claiming at the same moment, so one read
# almost always suffices).
_CANDIDATES = 16


def _ranking_sql(*, hardware_class: str | None, limit: int | None) -> str:
    """One statement: the ids of the waiting submissions in the fair order.

    The window's counts are one aggregate (runs started since ``now - 24 h``, read from
    ``run_started_idx`` alone: the run carries its entrant) joined to the
    waiting rows (the partial ``submission_waiting_idx``, and the ``passed`` ones with a
    queued final run through ``run_queued_idx``, in a union so that neither hides the
    other's index) by entrant: one pass over each, where a correlated count per waiting
    row would look up its entrant's whole history. With a ``LIMIT`` the sort keeps only
    the first rows (a top-N sort). Plain SQL that PostgreSQL and SQLite both read; the ORM
    cannot join an aggregate.
    """

    quote = connection.ops.quote_name
    submission = quote(Submission._meta.db_table)
    run = quote(Run._meta.db_table)
    benchmark = quote(Benchmark._meta.db_table)
    hardware = (
        f"INNER JOIN {benchmark} b ON b.id = w.benchmark_id AND b.hardware_class = %(hardware)s"
        if hardware_class is not None
        else ""
    )
    return f"""
        SELECT w.id
        FROM (
            SELECT * FROM {submission} s WHERE s.status IN (%(queued)s, %(verifying)s)
            UNION ALL
            SELECT * FROM {submission} s
            WHERE s.status = %(passed)s AND s.id IN (
                SELECT f.submission_id FROM {run} f
                WHERE f.status = %(queued)s AND f.purpose = %(final)s
            )
        ) w
        {hardware}
        LEFT JOIN (
            SELECT r.entrant_id AS entrant_id, COUNT(*) AS started
            FROM {run} r
            WHERE r.started_at >= %(since)s
            GROUP BY r.entrant_id
        ) recent ON recent.entrant_id = w.entrant_id
        WHERE (
            w.status IN (%(queued)s, %(verifying)s)
            AND (
              w.status = %(queued)s
              OR EXISTS (
                  SELECT 1 FROM {run} v
                  WHERE v.submission_id = w.id AND v.status = %(queued)s
                    AND v.purpose = %(verify)s
              )
            )
          ) OR (
            w.status = %(passed)s
            AND w.id IN (
                SELECT f.submission_id FROM {run} f
                WHERE f.status = %(queued)s AND f.purpose = %(final)s
            )
            AND NOT EXISTS (
                SELECT 1 FROM {run} a
                WHERE a.submission_id = w.id AND a.status IN (%(staging)s, %(running)s)
            )
          )
        ORDER BY
            CASE
                WHEN w.status = %(passed)s THEN {int(Tier.FINAL)}
                WHEN w.status = %(verifying)s THEN {int(Tier.VERIFICATION)}
                WHEN w.kind = %(practice)s THEN {int(Tier.PRACTICE)}
                ELSE {int(Tier.OFFICIAL)}
            END,
            COALESCE(recent.started, 0),
            COALESCE(w.queued_at, w.submitted_at),
            w.id
        {"" if limit is None else "LIMIT %(limit)s"}
    """  # noqa: S608 (table names from the models; every value a parameter)


def waiting_in_fair_order(
    *, hardware_class: str | None = None, now: dt.datetime | None = None, limit: int | None = None
) -> list[int]:
    """The waiting submissions' ids, first to be claimed first (the first ``limit``).

    Reads, locks nothing: what :func:`lock_next_waiting` would take in turn were no
    other host claiming. ``hardware_class``: only benchmarks of that class.
    """

    now = now or timezone.now()
    params = {
        "since": connection.ops.adapt_datetimefield_value(now - WINDOW),
        "queued": Submission.QUEUED,
        "verifying": Submission.VERIFYING,
        "practice": Submission.PRACTICE,
        "verify": Run.VERIFY,
        "passed": Submission.PASSED,
        "final": Run.FINAL,
        "staging": Run.STAGING,
        "running": Run.RUNNING,
        "hardware": hardware_class,
        "limit": limit,
    }
    sql = _ranking_sql(hardware_class=hardware_class, limit=limit)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [int(row[0]) for row in cursor.fetchall()]


def next_waiting_id(
    *, hardware_class: str | None = None, now: dt.datetime | None = None
) -> int | None:
    """The id of the submission the rule claims next, or None; reads, locks nothing."""
    first = waiting_in_fair_order(hardware_class=hardware_class, now=now, limit=1)
    return first[0] if first else None


def lock_next_waiting(
    *, hardware_class: str | None = None, now: dt.datetime | None = None
) -> Submission | None:
    """Lock and return the next waiting submission in the fair order, or None.

    Call inside ``transaction.atomic()`` and claim it there (``runs.run_claim``,
    which takes the same lock); the row stays locked until that transaction ends.
    Rows another transaction holds are skipped, so hosts claiming at once each get a
    different one. (Asked twice in one transaction, it names the same row again: a
    transaction does not skip its own locks.)

    First the few first ids in the fair order (:func:`waiting_in_fair_order`: read
    without locks, so that its sort keeps only those), then, in that order, ``SELECT
    ... FOR UPDATE OF submission SKIP LOCKED`` of each until one is taken; when every
    one is held or gone (as many hosts claiming at once), it asks for more. A queued
    submission claimed and committed meanwhile fails PostgreSQL's recheck of
    ``status``; a verifying one is not updated by its claim (its verification run is),
    so its queued verification run is looked for once it is locked, and it is stepped
    over without one. Each candidate is tried once per call. On SQLite the lock is a
    no-op: its IMMEDIATE transactions already run one writer at a time.
    """

    still_waiting = Submission.objects.filter(
        status__in=[*Submission.WAITING_FOR_SCORE, Submission.PASSED]
    ).select_for_update(skip_locked=True, of=("self",))
    tried: set[int] = set()
    limit = _CANDIDATES
    while True:
        ranked = waiting_in_fair_order(hardware_class=hardware_class, now=now, limit=limit)
        for submission_id in ranked:
            if submission_id in tried:
                continue
            tried.add(submission_id)
            submission = still_waiting.filter(pk=submission_id).first()
            if submission is None:
                continue  # held by another host, or claimed since
            if submission.status == Submission.QUEUED:
                return submission
            if submission.status == Submission.PASSED:
                runs = Run.objects.filter(submission=submission)
                if runs.filter(purpose=Run.FINAL, status=Run.QUEUED).exists() and not (
                    runs.filter(status__in=[Run.STAGING, Run.RUNNING]).exists()
                ):
                    return submission
                continue
            cohort_id = (
                Run.objects.filter(submission=submission, purpose=Run.VERIFY, status=Run.QUEUED)
                .values_list("cohort_id", flat=True)
                .first()
            )
            if cohort_id is None:
                continue
            if pool.ready_exists(cohort_id):
                return submission
            # No prepared set is ready: this host goes on with the next waiting one and the
            # verification keeps its place; a set that becomes ready wakes the class.
            pool.request_fill(cohort_id)
        if len(ranked) < limit:
            return None  # every waiting one is held by another host
        limit *= 4


# Wake-ups in flight, and the classes the minute sweep wakes again ----------------------
#
# A wake-up can be lost (a broker restart, a worker that acknowledged it and then failed
# before claiming). Celery beat's minute sweep (``wakeups.score_sweep``) wakes a class
# again when something of it has waited longer than ``SWEEP_MIN_WAIT`` and no wake-up of
# the class is known to be in flight. "In flight" is a marker in the shared cache (the
# one every process already counts throttles in; no table, no broker inspection): set
# when a wake-up is sent (``wakeups.score_wake``), expiring ``WAKE_GRACE_S`` after the
# message is due (its countdown, for a machine that was not ready), and cleared when a
# host of the class takes a wake-up. So the sweep adds nothing while a delayed wake-up
# (a machine's backoff) is pending, which would otherwise multiply into chains of
# reschedules, and a lost one is replaced within about a minute. A wake-up that is not
# needed after all (one the sweep sent while the class's messages sat behind a long run,
# or while no host of the class was up) costs the host one query:
# ``scoring.worker.score_next`` returns at once when nothing waits. A cache that lost the
# marker only makes the sweep wake a class once more.

SWEEP_MIN_WAIT = dt.timedelta(minutes=1)
WAKE_GRACE_S = 60.0


def _wake_key(hardware_class: str) -> str:
    return f"podium:score-wake:{hardware_class}"


def wake_sent(hardware_class: str, *, countdown: float | None = None) -> None:
    """Note that a wake-up of ``hardware_class`` was sent, due in ``countdown`` seconds.

    The marker holds its own deadline (read against the clock by :func:`wake_in_flight`);
    the cache's expiry, a minute later, only clears it away."""

    grace = (countdown or 0.0) + WAKE_GRACE_S
    deadline = timezone.now().timestamp() + grace
    cache.set(_wake_key(hardware_class), deadline, timeout=grace + WAKE_GRACE_S)


def wake_taken(hardware_class: str) -> None:
    """Note that a host of ``hardware_class`` took a wake-up (none is known in flight)."""

    cache.delete(_wake_key(hardware_class))


def wake_in_flight(hardware_class: str) -> bool:
    """Whether a wake-up of ``hardware_class`` was sent, not yet taken and not overdue by
    more than ``WAKE_GRACE_S``."""

    deadline = cache.get(_wake_key(hardware_class))
    return isinstance(deadline, float) and deadline > timezone.now().timestamp()


def classes_waiting(*, now: dt.datetime | None = None) -> list[str]:
    """The hardware classes with something waiting (a ``queued`` submission, a
    ``verifying`` one with a queued verification run, or a ``passed`` one with a queued
    final run) for longer than
    ``SWEEP_MIN_WAIT``, in name order."""

    now = now or timezone.now()
    verification_queued = Run.objects.filter(
        submission=OuterRef("pk"), purpose=Run.VERIFY, status=Run.QUEUED
    )
    final_queued = Run.objects.filter(
        submission=OuterRef("pk"), purpose=Run.FINAL, status=Run.QUEUED
    )
    waiting = (
        Submission.objects.filter(
            Q(status=Submission.QUEUED)
            | Q(status=Submission.VERIFYING) & Exists(verification_queued)
            | Q(status=Submission.PASSED) & Exists(final_queued)
        )
        .annotate(since=Coalesce("queued_at", "submitted_at"))
        .filter(since__lte=now - SWEEP_MIN_WAIT)
    )
    classes = waiting.values_list("benchmark__hardware_class__name", flat=True).distinct()
    return sorted(set(classes))
