"""The contest rules as pure functions: the upload window, the attempt day, the quota,
the artifact retention, the pass gate, the ranking and the verification before ranking.

Nothing here touches Django or the database: every function takes plain values and
returns plain values, so services and selectors call them inside their own transactions
and the tests check them exhaustively without a database.

Time rules:

* Every datetime passed in must be timezone-aware (a naive one raises ``ValueError``);
  every datetime returned is aware and in UTC.
* Day arithmetic goes through :mod:`zoneinfo`, so days are the calendar days of the
  benchmark's ``attempt_timezone``: in Asia/Seoul a day runs 15:00-15:00 UTC, and in a
  zone with daylight saving time a day can last 23 or 25 hours.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from zoneinfo import ZoneInfo

WindowState = Literal["upcoming", "open", "closed"]

# The runtime ABI: what an entrant's build leaves in its image and the scorer runs.
RUN_ENTRYPOINT = "/submission/run"

_ONE_MICROSECOND = dt.timedelta(microseconds=1)


def _require_aware(**values: dt.datetime) -> None:
    for name, value in values.items():
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{name} must be a timezone-aware datetime, got {value!r}")


def window_state(now: dt.datetime, opens_at: dt.datetime, closes_at: dt.datetime) -> WindowState:
    """Where ``now`` falls in the upload window ``[opens_at, closes_at)``.

    ``opens_at`` itself is ``"open"`` and ``closes_at`` itself is ``"closed"``. All three
    datetimes must be aware (``ValueError`` otherwise); they may be in different zones.
    """
    _require_aware(now=now, opens_at=opens_at, closes_at=closes_at)
    if now < opens_at:
        return "upcoming"
    if now < closes_at:
        return "open"
    return "closed"


def attempt_day(now: dt.datetime, tz_name: str) -> dt.date:
    """The calendar day of ``now`` in the zone ``tz_name`` (the day its attempts count on).

    In Asia/Seoul the day turns at 15:00 UTC: 14:59:59.999999 UTC is still the earlier day.
    Raises ``ValueError`` for a naive ``now`` and ``zoneinfo.ZoneInfoNotFoundError`` (a
    ``KeyError``) for an unknown zone.
    """
    _require_aware(now=now)
    return now.astimezone(ZoneInfo(tz_name)).date()


def _local_date_of(instant: dt.datetime, zone: ZoneInfo) -> dt.date:
    return instant.astimezone(zone).date()


def _start_of_day(day: dt.date, zone: ZoneInfo) -> dt.datetime:
    """The first instant (aware, UTC) whose local date in ``zone`` is ``day`` or later."""
    naive_midnight = dt.datetime.combine(day, dt.time())
    # Both readings of local midnight (they differ only when midnight is ambiguous or
    # skipped); the earlier one is the start of the day when midnight exists.
    readings = [
        naive_midnight.replace(tzinfo=zone, fold=fold).astimezone(dt.UTC) for fold in (0, 1)
    ]
    start = min(readings)
    if start.astimezone(zone).replace(tzinfo=None) == naive_midnight:
        return start
    # Local midnight does not exist (a daylight-saving jump across 00:00): the day begins
    # at the transition. Search the microsecond at which the local date reaches `day`.
    low = start - dt.timedelta(days=2)  # local date before `day`
    high = start + dt.timedelta(days=2)  # local date at or after `day`
    while high - low > _ONE_MICROSECOND:
        middle = low + (high - low) / 2
        if _local_date_of(middle, zone) >= day:
            high = middle
        else:
            low = middle
    return high


def day_bounds(day: dt.date, tz_name: str) -> tuple[dt.datetime, dt.datetime]:
    """``[start, end)`` of the local calendar ``day`` in ``tz_name``, as aware UTC datetimes.

    The length follows the zone's clock changes: in America/New_York 2026-03-08 lasts
    23 hours and 2026-11-01 lasts 25 hours. ``start`` is local midnight (or, where a
    daylight-saving jump skips midnight, the first instant of the day).
    """
    zone = ZoneInfo(tz_name)
    return _start_of_day(day, zone), _start_of_day(day + dt.timedelta(days=1), zone)


def next_reset(now: dt.datetime, tz_name: str) -> dt.datetime:
    """The start of the next local day after ``now`` (aware, UTC): when the quota resets.

    Always strictly later than ``now``.
    """
    _require_aware(now=now)
    day = attempt_day(now, tz_name)
    reset = day_bounds(day, tz_name)[1]
    while reset <= now:  # only where a zone's clock runs back across midnight
        day += dt.timedelta(days=1)
        reset = day_bounds(day, tz_name)[1]
    return reset


def remaining_attempts(per_day: int, net_charged_today: int) -> int:
    """Attempts left today: ``max(0, per_day - net_charged_today)``.

    ``net_charged_today`` is the day's charges minus the refunds booked on the day. A
    refund is booked on the day it is given (see ``attempt_refund``), so a refund of an
    earlier day's attempt gives one back today: the net may then be negative and more
    than ``per_day`` be left, one more for each such refund. ``per_day`` must not be
    negative (``ValueError``).
    """
    if per_day < 0:
        raise ValueError(f"per_day must not be negative, got {per_day}")
    return max(0, per_day - net_charged_today)


def next_attempt_at(
    now: dt.datetime, tz_name: str, per_day: int, net_charged_today: int
) -> dt.datetime:
    """When the entrant may next upload: ``now`` while an attempt remains today, else the
    start of the next local day (see :func:`next_reset`)."""
    _require_aware(now=now)
    if remaining_attempts(per_day, net_charged_today) > 0:
        return now
    return next_reset(now, tz_name)


def purge_allowed_from(closes_at: dt.datetime, retention_days: int) -> dt.datetime:
    """The first instant (aware, UTC) at which a benchmark's artifacts may be purged:
    ``closes_at`` plus ``retention_days`` days of 24 hours.

    The instant itself is allowed. Raises ``ValueError`` for a naive ``closes_at`` or a
    negative ``retention_days``; zero days allows purging from the close.
    """
    _require_aware(closes_at=closes_at)
    if retention_days < 0:
        raise ValueError(f"retention_days must not be negative, got {retention_days}")
    return closes_at.astimezone(dt.UTC) + dt.timedelta(days=retention_days)


def pass_threshold(total: int, pass_min_matches: int, cohort_size: int) -> int:
    """Matches needed on a cohort of ``total`` items to pass.

    The benchmark's gate is ``pass_min_matches`` of ``cohort_size``; a cohort of another
    size needs the same ratio, rounded up: ``ceil(total * pass_min_matches / cohort_size)``,
    computed with exact integers (9,900 of 10,000 gives 990 of 1,000 and 1 of 1).
    Raises ``ValueError`` unless ``cohort_size > 0``, ``0 <= pass_min_matches <=
    cohort_size`` and ``total >= 0``.
    """
    if cohort_size <= 0:
        raise ValueError(f"cohort_size must be positive, got {cohort_size}")
    if not 0 <= pass_min_matches <= cohort_size:
        raise ValueError(
            f"pass_min_matches must be within [0, {cohort_size}], got {pass_min_matches}"
        )
    if total < 0:
        raise ValueError(f"total must not be negative, got {total}")
    return -(-(total * pass_min_matches) // cohort_size)


def passes(matches: int, total: int, pass_min_matches: int, cohort_size: int) -> bool:
    """Whether ``matches`` of ``total`` predictions pass the gate (see :func:`pass_threshold`).

    Raises ``ValueError`` when ``matches`` is outside ``[0, total]``.
    """
    if not 0 <= matches <= total:
        raise ValueError(f"matches must be within [0, {total}], got {matches}")
    return matches >= pass_threshold(total, pass_min_matches, cohort_size)


@dataclass(frozen=True)
class Candidate:
    """One passing official run eligible for the leaderboard."""

    entrant_id: int
    run_id: int
    submission_id: int
    wall_time_ns: int
    submitted_at: dt.datetime  # when the upload was accepted (aware)


def rank_key(c: Candidate) -> tuple[int, dt.datetime, int, int]:
    """Sort key of the leaderboard: fastest first; an exact tie goes to the earlier
    submission (acceptance time, then submission id), then the lower run id."""
    return (c.wall_time_ns, c.submitted_at, c.submission_id, c.run_id)


def best_per_entrant(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Each entrant's best candidate by :func:`rank_key`, the list sorted by :func:`rank_key`.

    The result does not depend on the order of ``candidates``. (Two entrants can only
    share a key if they share a run; the entrant id then decides, to stay deterministic.)
    """
    best: dict[int, Candidate] = {}
    for candidate in candidates:
        held = best.get(candidate.entrant_id)
        if held is None or rank_key(candidate) < rank_key(held):
            best[candidate.entrant_id] = candidate
    return sorted(best.values(), key=lambda c: (rank_key(c), c.entrant_id))


# Verification (docs/rules.md, "Verification before ranking") --------------------------


def needs_verification(
    candidate: Candidate, board: Iterable[Candidate], *, verify_top: int
) -> bool:
    """Whether a passing official run must be verified before it ranks.

    ``board`` is every entrant's current best (the stored leaderboard). The run is
    verified when it would become its entrant's best and would place among the first
    ``verify_top`` rows; a run that improves nothing, or ranks lower, is not (it changes
    no one's standing). ``verify_top`` 0 verifies none.
    """
    if verify_top <= 0:
        return False
    key = rank_key(candidate)
    ahead = 0
    for held in board:
        if held.run_id == candidate.run_id:
            continue
        if held.entrant_id == candidate.entrant_id:
            if rank_key(held) <= key:
                return False  # not a new best
        elif rank_key(held) < key:
            ahead += 1
    return ahead < verify_top


# The visual bound of a verification cohort: every re-encoded image decodes to within
# this PSNR (dB) of the original's pixels (``scoring.cohort.rewrite`` holds it; its tests check
# it on every JPEG shape they cover).
VERIFY_PSNR_FLOOR_DB = 45.0

# The share of a verification's and a final run's images that are canaries (images no
# public set holds, judged against the reference model's answers), in percent. An entry
# that answers the images it knows from a table at l seconds each and runs a model of m
# seconds an image on the rest has an official run of N*l; with a share f of canaries its
# verification takes N*((1-f)*l + f*m), which the timing rule rejects once f*(m-l) is more
# than the tolerance t times l, i.e. once the table makes it more than 1 + t/f times
# faster than it is. At 50% and the least tolerance (10%) that is 1.2: a table gains at
# most twice what noise is allowed anyway. A larger share needs a larger private pool and
# leaves fewer re-encoded cohort images to hold an entry to its own official answers.
CANARY_SHARE_PCT = 50


def canaries_wanted(members: int) -> int:
    """Canaries a verification or final run of ``members`` images carries with a large
    enough pool: ``CANARY_SHARE_PCT`` of them rounded up (what a pool must hold)."""
    if members < 0:
        raise ValueError("members must not be negative")
    return -(-members * CANARY_SHARE_PCT // 100)


def canary_count(members: int, pool: int) -> int:
    """Canaries among the ``members`` images of a verification or final run when the
    benchmark's canary pool holds ``pool``: :func:`canaries_wanted`, at most the pool (0
    without one)."""
    if pool < 0:
        raise ValueError("pool must not be negative")
    return min(pool, canaries_wanted(members))


CONFIRM = "confirm"
REMEASURE = "re-measure"
REJECT = "reject"


@dataclass(frozen=True)
class VerificationVerdict:
    """What one more verification run decides: ``action`` is :data:`CONFIRM` (the
    submission ranks with its official time), :data:`REMEASURE` (a timing miss with runs
    left: one more verification run) or :data:`REJECT`; ``reason`` says why (empty for a
    confirmation). ``run`` is how many verification runs were judged, of ``of`` at most;
    ``fastest_ns`` the fastest of them (None when the last did not pass),
    ``tolerance_pct`` the tolerance it was held to and ``slack_ns`` the least slowdown
    allowed whatever the percentage (0: none)."""

    action: str
    reason: str
    run: int
    of: int
    fastest_ns: int | None
    tolerance_pct: float
    slack_ns: int = 0

    @property
    def within(self) -> str:
        """The tolerance in words: "10%", or "10% (at least 100 ms)"."""
        shown = f"{_percent(self.tolerance_pct)}%"
        return f"{shown} (at least {self.slack_ns / 1e6:g} ms)" if self.slack_ns else shown


def verification_tolerance_pct(
    *,
    tolerance_pct: float,
    noise_band_pct: float | None,
    noise_factor: float,
    reference_spread_pct: float | None = None,
) -> float:
    """How much slower than the official run a verification may be, in percent: at least
    the benchmark's ``tolerance_pct``, and at least the reference kit's measured spread on
    the class and cohort size (``reference_spread_pct``, see
    ``portal.hosts.noise.spread_pct``). Where none was measured yet, at least
    ``noise_factor`` times the class's published noise band instead (none published
    either: the benchmark's tolerance alone). Rounded to hundredths, as it is shown."""
    if reference_spread_pct is not None:
        widened = reference_spread_pct
    else:
        widened = noise_factor * noise_band_pct if noise_band_pct is not None else 0.0
    return round(max(float(tolerance_pct), widened), 2)


def _percent(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def verification_decision(
    *,
    official_ns: int,
    status: str,
    reason: str,
    walls_ns: Sequence[int | None],
    tolerance_pct: float,
    noise_band_pct: float | None,
    noise_factor: float,
    max_runs: int,
    slack_ns: int = 0,
    reference_spread_pct: float | None = None,
) -> VerificationVerdict:
    """The decision after a verification run: confirm, re-measure or reject.

    ``walls_ns`` holds the wall time of every verification run judged for this official
    run so far, the latest last; ``status`` and ``reason`` are the latest one's verdict
    (the earlier ones all passed, or they would have rejected). The rule:

    - a latest run that did not pass the gate (or has no wall time) rejects at once:
      correctness is not a matter of noise;
    - timing is judged on the fastest run so far, against the larger of the benchmark's
      tolerance and the reference kit's measured spread on the class and this cohort's
      size (``reference_spread_pct``: how much slower one honest run of the same image
      was than another; where none was measured, ``noise_factor`` times the class's
      noise band) (:func:`verification_tolerance_pct`). An official run that was itself
      a fast outlier is noise of the same kind: its verification runs lie within the
      spread of it. Only a slower verification tells against
      the official time (answers replayed, or work done by something the shuffled,
      re-encoded input defeats); a faster one only shows that the official run, which is
      what ranks, was its image's first on a cold host;
    - whatever the percentage, a verification may be ``slack_ns`` slower: a fresh
      sandboxed process tree's start (interpreter, imports, workers) jitters by tens of
      milliseconds whatever the run's length, which on a short run is more than any
      percentage a cheat could be told from;
    - a timing miss with fewer than ``max_runs`` runs judged asks for one more run (a
      fresh permutation: each verification run is staged anew); only after ``max_runs``
      misses does timing reject, so no single noisy sample rejects.
    """
    if not walls_ns:
        raise ValueError("no verification run to judge")
    count = len(walls_ns)
    limit = max(1, max_runs)
    tolerance = verification_tolerance_pct(
        tolerance_pct=tolerance_pct,
        noise_band_pct=noise_band_pct,
        noise_factor=noise_factor,
        reference_spread_pct=reference_spread_pct,
    )
    latest = walls_ns[-1]
    slack = max(0, slack_ns)

    def verdict(action: str, why: str, fastest: int | None) -> VerificationVerdict:
        return VerificationVerdict(action, why, count, limit, fastest, tolerance, slack)

    if status != "passed":
        return verdict(
            REJECT, f"the verification run did not pass ({status}: {reason.rstrip('.')}).", None
        )
    if latest is None or official_ns <= 0:
        return verdict(REJECT, "the verification run has no wall time.", None)
    fastest = min(wall for wall in walls_ns if wall is not None)
    over_ns = fastest - official_ns
    if over_ns * 100 <= tolerance * official_ns or over_ns <= slack:
        return verdict(CONFIRM, "", fastest)
    runs = "the verification run" if count == 1 else f"the fastest of {count} verification runs"
    why = (
        f"{runs} took {fastest / 1e9:.3f} s against the official {official_ns / 1e9:.3f} s, "
        f"more than {_percent(tolerance)}% slower"
    )
    if slack:
        why += f" and more than {slack / 1e6:g} ms"
    if tolerance > tolerance_pct and reference_spread_pct is not None:
        why += " (the tolerance: the reference kit's measured spread on this class and cohort size)"
    elif tolerance > tolerance_pct:
        why += (
            f" (the tolerance: {_percent(noise_factor)} x the class's noise band of "
            f"{_percent(noise_band_pct or 0.0)}%)"
        )
    return verdict(REMEASURE if count < limit else REJECT, why + ".", fastest)


def final_run_problem(
    *,
    official_ns: int,
    final_ns: int,
    tolerance_pct: float,
    noise_band_pct: float | None,
    noise_factor: float,
    slack_ns: int = 0,
    reference_spread_pct: float | None = None,
) -> str:
    """Why a passing final run must not rank (empty when it may): it was faster than its
    submission's official run by more than a verification may be slower.

    :func:`verification_decision` with the roles turned: the final run stands where the
    official run stands there, and the official run is the one judged against it. A
    final run much faster than the official time is a program that behaves otherwise
    after the close (answers looked up once the cohort could be known); one slower than
    it only ranks with its slower time.
    """
    verdict = verification_decision(
        official_ns=final_ns,
        status="passed",
        reason="",
        walls_ns=[official_ns],
        tolerance_pct=tolerance_pct,
        noise_band_pct=noise_band_pct,
        noise_factor=noise_factor,
        max_runs=1,
        slack_ns=slack_ns,
        reference_spread_pct=reference_spread_pct,
    )
    if verdict.action == CONFIRM:
        return ""
    return (
        f"the final run took {final_ns / 1e9:.3f} s against the official {official_ns / 1e9:.3f}"
        f" s: the official run was more than {verdict.within} slower than it"
    )


def boundary_sha256(text: str) -> str:
    """The SHA-256 an official upload's confirmation of a validation-data boundary keeps:
    of the boundary's text as shown (surrounding blank space left out)."""
    return hashlib.sha256(text.strip().encode()).hexdigest()
