"""The campaign rules as pure functions: when a round starts, who is in it, which requests
it runs, how each image is judged and scored, when a round is void, and who holds the crown.

No Django and no database: plain values in, plain values out (the round's runs arrive as
:mod:`portal.campaigns.outcomes` dataclasses). The campaign's write modules (``rounds``,
``recording``, ``crown``) call these inside their transactions;
``tests/campaigns/test_rules.py`` checks them against a brute force.

Definitions the rules text left open, fixed here:

* **Request draw.** ``seed = sha256(material || campaign id)``: the 64 hex characters of
  the material and the campaign id in decimal, both ASCII, concatenated. Every cohort
  position ``p`` is ranked by ``sha256(seed || p as 8 bytes big-endian)``; the request
  set is the ``round_size`` lowest, in that rank order. Anyone holding the material can
  redo the draw; no library's random generator is involved.
* **Slices.** The request set cut into ``slice_count`` contiguous slices whose sizes
  differ by at most one, the longer ones first; never an empty slice (fewer requests than
  slices gives one request per slice).
* **Drift.** ``|median over slices of (closing_i / opening_i) - 1|``: per-slice ratios
  cancel the slices' own differences; the median ignores one odd slice. The round is void
  when drift is *greater* than the ceiling.
* **Reproducibility.** An image's slice times ``(max - min) / median``; *greater* than
  the ceiling is infra_failed. It applies to the baseline too: a noisy baseline fails.
* **Startup death.** A slice that ends by the image's own doing (a non-zero exit, or a
  signal other than SIGKILL/SIGTERM) disqualifies a challenger, whether or not it wrote
  output first; the reason says which. Killed at the deadline, by SIGKILL, SIGTERM or the
  OOM killer is a kill from outside: infra_failed. On the leader (and the baseline) a
  self-exit is infra_failed too: that image already ran clean in an earlier round.
* **Correctness.** Agreement = matches / requests over the whole request set; below
  ``min_agreement``, or a slice that exited cleanly with invalid output (the pass may stop
  there), is failed_correctness.
  Correctness is judged before reproducibility: a wrong answer is the entrant's verdict
  even on a noisy run.
* **Under tolerance.** A slice whose own agreement (its matches / its requests) is below
  ``min_agreement`` earns nothing: it counts as ``min(speedup, 0)`` in the median (0 when
  it was faster, its loss when slower), so a few such slices pull the score down and
  never up. The entry still passes when its whole request set is over the gate.
* **Staff disqualification.** An entry whose submission staff disqualified while its
  round was open runs (the host already has the round), but its verdict is disqualified,
  it scores nothing and it cannot take the crown; a disqualified leader is no leader (the
  crown was vacated when staff disqualified it), so its own failure voids nothing.
* **Who caused a void.** Each void has one cause: ``host`` (the host's own void, another
  request set), ``baseline`` (the opening or closing baseline failed, or drifted),
  ``leader`` (the leader failed on infrastructure) or ``challengers`` (no challenger got a
  verdict). Its *own* doing, named in ``void_by``: the leader's own exit (remapped to
  infra_failed), its slice times over the reproducibility ceiling, or its kill at the
  deadline; for ``challengers``, each challenger that infra_failed by those same causes.
  A kill from outside, the OOM killer, a platform fault or a missing report is nobody's.
  A leader whose own entry voids ``leader_void_limit`` rounds in a row (only a scored
  round resets the count; voids of other causes neither count nor reset it) loses the
  crown (:func:`leader_void_streak`).
* **Crown.** Taking a vacant crown, or one the leader lost (failed correctness, or a score
  of 0 or less), needs a passing challenger scoring strictly above 0, the same bar as
  holding it. Ties between challengers go to the earlier entry (the older queued one).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import signal
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from portal.campaigns.outcomes import ImageRun, RoundOutcome, SliceRun

GENESIS = "0" * 64  # the material of a campaign's first round

PASSED = "passed"
FAILED_CORRECTNESS = "failed_correctness"
DISQUALIFIED = "disqualified"
INFRA_FAILED = "infra_failed"
NONE = "none"

# Why a round was void (module docstring, "Who caused a void").
VOID_HOST = "host"
VOID_BASELINE = "baseline"
VOID_LEADER = "leader"
VOID_CHALLENGERS = "challengers"
VOID_STAFF = "staff"
VOID_CAUSES = (VOID_HOST, VOID_BASELINE, VOID_LEADER, VOID_CHALLENGERS, VOID_STAFF)

UNDER_TOLERANCE = "under tolerance"  # how a report row that earned nothing begins
STAFF_DISQUALIFIED = "disqualified by staff while its round was open"

LEADER = "leader"
CHALLENGER = "challenger"

# A kill from outside the image (besides the deadline and the OOM killer, flagged apart).
OUTSIDE_SIGNALS = frozenset({int(signal.SIGKILL), int(signal.SIGTERM)})

CAPACITY_FIRST_WAIT = dt.timedelta(minutes=5)
CAPACITY_MAX_WAIT = dt.timedelta(hours=1)


# When a round starts ---------------------------------------------------------------------


@dataclass(frozen=True)
class Queued:
    """One submission waiting for a round: ``since`` its current queued event (the wait
    trigger), and its place in the queue (``place``: its first queued time, kept across
    requeues and voids; None means ``since``)."""

    submission_id: int
    since: dt.datetime
    place: dt.datetime | None = None

    @property
    def order(self) -> tuple[dt.datetime, int]:
        return (self.place or self.since, self.submission_id)


@dataclass(frozen=True)
class Trigger:
    """Whether a round starts now; if not, when the wait rule fires (None: nothing queued)."""

    start: bool
    reason: str
    due_at: dt.datetime | None


def trigger_decision(
    queued: Sequence[Queued], now: dt.datetime, *, count: int, wait: dt.timedelta
) -> Trigger:
    """A round starts when ``count`` are queued, or when the oldest queued event is at
    least ``wait`` old; never with nobody queued (a round needs one challenger).

    The caller passes only the submissions free to join (not in an open round, not the
    leader) and checks the rest (paused, baseline, an open round).
    """
    if not queued:
        return Trigger(False, "nothing is queued", None)
    oldest = min(item.since for item in queued)
    due_at = oldest + wait
    if len(queued) >= count:
        return Trigger(True, f"{len(queued)} queued (the trigger is {count})", now)
    if now >= due_at:
        return Trigger(True, f"the oldest queued entry has waited {now - oldest}", now)
    return Trigger(False, f"{len(queued)} of {count} queued; the oldest waits until", due_at)


@dataclass(frozen=True)
class Composition:
    """Who runs in a round, in run order: the leader first, then challengers oldest first."""

    leader_id: int | None
    challenger_ids: tuple[int, ...]

    @property
    def order(self) -> list[tuple[int, str]]:
        leader = [(self.leader_id, LEADER)] if self.leader_id is not None else []
        return leader + [(sid, CHALLENGER) for sid in self.challenger_ids]


def compose_round(
    leader_id: int | None, queued: Sequence[Queued], *, max_challengers: int
) -> Composition:
    """The leader (if any) plus up to ``max_challengers`` of ``queued``, by place in the
    queue (first queued time, then lowest id); the rest stay queued. The leader never
    challenges itself."""
    waiting = sorted(
        (item for item in queued if item.submission_id != leader_id),
        key=lambda item: item.order,
    )
    return Composition(leader_id, tuple(item.submission_id for item in waiting[:max_challengers]))


def capacity_backoff(tries: int) -> dt.timedelta:
    """How long a round waits after its ``tries``-th claim found no host: 5 minutes,
    doubling each time, at most an hour."""
    if tries < 1:
        return dt.timedelta(0)
    # int ** int is Any to mypy (a negative power is a float).
    doublings: int = 2 ** min(tries - 1, 16)
    return min(CAPACITY_FIRST_WAIT * doublings, CAPACITY_MAX_WAIT)


# Which requests --------------------------------------------------------------------------


def round_seed(material: str, campaign_id: int) -> bytes:
    """``sha256(material || campaign id)`` (see the module docstring)."""
    return hashlib.sha256(f"{material}{campaign_id}".encode("ascii")).digest()


def draw_requests(seed: bytes, pool: Sequence[int], size: int) -> list[int]:
    """``size`` distinct positions of ``pool`` (all of it when smaller), in draw order."""

    def rank(position: int) -> bytes:
        return hashlib.sha256(seed + position.to_bytes(8, "big")).digest()

    return sorted(set(pool), key=rank)[: max(size, 0)]


def request_digest(positions: Sequence[int]) -> str:
    """sha256 of the positions in order, one decimal per line (each line ends in a newline)."""
    text = "".join(f"{position}\n" for position in positions)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def slice_bounds(request_count: int, slice_count: int) -> list[tuple[int, int]]:
    """``[start, end)`` index ranges of the contiguous slices (module docstring)."""
    count = max(1, min(slice_count, request_count)) if request_count else 0
    bounds = []
    start = 0
    for index in range(count):
        size = request_count // count + (1 if index < request_count % count else 0)
        bounds.append((start, start + size))
        start += size
    return bounds


# Judging one image's run -----------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """The campaign's numbers that a round uses: the judgement's agreement, ceilings and
    moat, and the host's tries per slice."""

    min_agreement: float = 0.99
    reproducibility_ceiling: float = 0.335
    drift_ceiling: float = 0.05
    moat: float = 0.01
    # Supervised invocations per slice in every pass; the fastest clean one stands for
    # the slice (:func:`standing_slice`).
    slice_repeats: int = 1


@dataclass(frozen=True)
class Judgement:
    """One image's verdict before scoring; ``seconds`` per slice only when it ran them all."""

    verdict: str
    reason: str = ""
    agreement: float | None = None
    seconds: tuple[float, ...] | None = None
    spread: float | None = None
    # Per slice: whether its own agreement reached the gate (None until it ran them all).
    in_tolerance: tuple[bool, ...] | None = None
    # infra_failed by the image's own doing (module docstring, "Who caused a void").
    own: bool = False


def slice_fatal(run: SliceRun) -> bool:
    """Whether a slice ends its image's pass: it was stopped (deadline, host timer, OOM) or
    its process did not exit 0. Such a slice decides the image's verdict by itself
    (:func:`judge_run` looks no further); an output that is wrong or malformed does not,
    so the pass goes on and every slice's output is checked and counted."""
    return (
        run.wall_ns is None
        or run.killed
        or run.oom_killed
        or run.signal is not None
        or run.exit_code != 0
    )


def standing_slice(tries: Sequence[SliceRun]) -> SliceRun:
    """Which of one slice's repeated invocations stands for it in the pass.

    Any try that did not end cleanly with a well-formed output stands, the first such
    one: correctness and crashes are never noise, so a repeat cannot hide them. Else the
    fastest: a slice of an image ABI times the process tree from fork, so each
    invocation carries a start (interpreter, imports, workers) that only ever slows it,
    and the fastest of a few is the image's own time with the least of that noise.
    """
    if not tries:
        raise ValueError("a slice with no try")
    for one in tries:
        if slice_fatal(one) or not one.output_ok:
            return one
    return min(tries, key=lambda one: int(one.wall_ns or 0))


def relative_range(values: Sequence[float]) -> float:
    """``(max - min) / median`` (0 for a single value; infinite for a median of 0)."""
    middle = statistics.median(values)
    if middle <= 0:
        return float("inf")
    return (max(values) - min(values)) / middle


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def judge_run(
    run: ImageRun | None, *, slice_totals: Sequence[int], limits: Limits, incumbent: bool
) -> Judgement:
    """The verdict of one image's pass over the round's slices (module docstring).

    ``slice_totals``: how many requests each slice holds. ``incumbent``: the leader or a
    baseline, whose own exit is remapped to infra_failed. Checks, in order: a platform
    fault; each slice in order (kills, own exits, no trusted time, invalid output);
    missing slices or request counts other than the round's; agreement; reproducibility.
    """
    if run is None:
        return Judgement(INFRA_FAILED, "the host reported no run of this image")
    if run.infra_error:
        return Judgement(INFRA_FAILED, f"platform fault: {run.infra_error}")
    ordered = sorted(run.slices, key=lambda item: item.slice)
    for item in ordered:
        where = f"slice {item.slice}"
        if item.oom_killed:
            return Judgement(INFRA_FAILED, f"{where}: killed by the OOM killer")
        if item.killed:
            return Judgement(
                INFRA_FAILED, f"{where}: killed at the deadline or from outside", own=True
            )
        if item.signal is not None and item.signal in OUTSIDE_SIGNALS:
            return Judgement(INFRA_FAILED, f"{where}: killed by {_signal_name(item.signal)}")
        if item.signal is not None or (item.exit_code is not None and item.exit_code != 0):
            how = (
                f"died of {_signal_name(item.signal)}"
                if item.signal is not None
                else f"exited with status {item.exit_code}"
            )
            when = "after writing its output" if item.output_ok else "before producing output"
            if incumbent:
                return Judgement(
                    INFRA_FAILED, f"{where}: {how} {when} (on an image that ran before)", own=True
                )
            return Judgement(DISQUALIFIED, f"{where}: {how} {when}")
        if item.exit_code is None:
            return Judgement(INFRA_FAILED, f"{where}: no exit status was reported")
        if item.wall_ns is None or item.wall_ns <= 0:
            return Judgement(INFRA_FAILED, f"{where}: no trusted time was reported")
        if not item.output_ok:  # a clean exit with a wrong-sized or out-of-range output
            return Judgement(FAILED_CORRECTNESS, f"{where}: invalid output")
    if [item.slice for item in ordered] != list(range(len(slice_totals))):
        return Judgement(
            INFRA_FAILED, f"the host reported {len(ordered)} of {len(slice_totals)} slices"
        )
    if [item.total for item in ordered] != list(slice_totals):
        return Judgement(INFRA_FAILED, "the host ran other request counts than the round's")
    requests = sum(slice_totals)
    agreement = sum(item.matches for item in ordered) / requests if requests else 0.0
    seconds = tuple((item.wall_ns or 0) / 1e9 for item in ordered)
    in_tolerance = tuple(
        item.total > 0 and item.matches / item.total >= limits.min_agreement for item in ordered
    )
    if agreement < limits.min_agreement:
        return Judgement(
            FAILED_CORRECTNESS,
            f"agreement {agreement:.4f} is below the gate {limits.min_agreement:.4f}",
            agreement=agreement,
            seconds=seconds,
            in_tolerance=in_tolerance,
        )
    spread = relative_range(seconds)
    if spread > limits.reproducibility_ceiling:
        return Judgement(
            INFRA_FAILED,
            f"slice times vary too much to score: relative range {spread:.3f} "
            f"exceeds {limits.reproducibility_ceiling:.3f}",
            agreement=agreement,
            seconds=seconds,
            spread=spread,
            in_tolerance=in_tolerance,
            own=True,
        )
    return Judgement(
        PASSED,
        "",
        agreement=agreement,
        seconds=seconds,
        spread=spread,
        in_tolerance=in_tolerance,
    )


def speedup(baseline_s: float, candidate_s: float) -> float:
    """``(baseline - candidate) / baseline``: 0.35 is 35 percent faster than the baseline."""
    return (baseline_s - candidate_s) / baseline_s


def score_slices(
    baseline: Sequence[float],
    candidate: Sequence[float],
    in_tolerance: Sequence[bool] | None = None,
) -> float:
    """The entry's score: the median over slices of :func:`speedup`, a slice under
    tolerance (``in_tolerance`` False) counting ``min(speedup, 0)`` (module docstring)."""
    kept = in_tolerance if in_tolerance is not None else [True] * len(baseline)
    return statistics.median(
        counted_speedup(speedup(b, c), ok)
        for b, c, ok in zip(baseline, candidate, kept, strict=True)
    )


def counted_speedup(value: float, in_tolerance: bool) -> float:
    """What a slice adds to the median: its speedup, or ``min(speedup, 0)`` under
    tolerance (it earns nothing and keeps any loss)."""
    return value if in_tolerance else min(value, 0.0)


def drift(opening: Sequence[float], closing: Sequence[float]) -> float:
    """``|median_i(closing_i / opening_i) - 1|`` (module docstring)."""
    return abs(statistics.median(c / o for o, c in zip(opening, closing, strict=True)) - 1)


def slice_rows(
    judgement: Judgement,
    run: ImageRun | None,
    baseline: Sequence[float] | None,
    *,
    void_reason: str = "",
    excluded: str = "",
) -> list[dict[str, Any]]:
    """One row per slice for the entry report: ``slice``, ``baseline_s``, ``candidate_s``,
    ``speedup`` (what the slice counted in the median; None when it counted nothing),
    ``matches``, ``total`` (the requests both images were compared on) and ``reason``
    (why it did not score in full; "" when it did). A slice counts only in a passed entry
    of a scored round; under tolerance it counts ``min(speedup, 0)``."""
    ran = {item.slice: item for item in (run.slices if run else [])}
    count = len(baseline) if baseline is not None else len(ran)
    rows = []
    for index in range(count):
        item = ran.get(index)
        baseline_s = baseline[index] if baseline is not None else None
        candidate_s = item.wall_ns / 1e9 if item is not None and item.wall_ns else None
        row: dict[str, Any] = {
            "slice": index,
            "baseline_s": baseline_s,
            "candidate_s": candidate_s,
            "speedup": None,
            "matches": item.matches if item is not None else None,
            "total": item.total if item is not None else None,
            "reason": "",
        }
        tolerated = judgement.in_tolerance
        if void_reason:
            row["reason"] = f"round void: {void_reason}"
        elif excluded:
            row["reason"] = excluded
        elif item is None:
            row["reason"] = "not run"
        elif judgement.verdict != PASSED or not baseline_s or candidate_s is None:
            row["reason"] = f"{judgement.verdict}: {judgement.reason}"
        elif tolerated is not None and index < len(tolerated) and not tolerated[index]:
            row["speedup"] = counted_speedup(speedup(baseline_s, candidate_s), False)
            row["reason"] = (
                f"{UNDER_TOLERANCE}: {item.matches} of {item.total} answers agree, below "
                "the gate; the slice earns nothing (it counts min(speedup, 0))"
            )
        else:
            row["speedup"] = speedup(baseline_s, candidate_s)
        rows.append(row)
    return rows


# Who holds the crown ---------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    """An image's result in one round, as the crown rule sees it."""

    submission_id: int
    verdict: str
    score: float | None
    position: int


@dataclass(frozen=True)
class CrownChange:
    """The crown after a scored round: ``holder`` None is a vacant crown.

    ``change``: kept, overtaken (a challenger beat the leader by the moat), succeeded (the
    leader lost it by failing correctness or scoring 0 or less, and a challenger took it),
    taken (no leader before), vacated (the leader lost it, nobody took it), vacant.
    """

    holder: int | None
    score: float | None
    change: str


def best_challenger(challengers: Sequence[Contender]) -> Contender | None:
    """The passing challenger with the highest score; a tie goes to the earlier entry."""
    passing = [c for c in challengers if c.verdict == PASSED and c.score is not None]
    if not passing:
        return None
    return min(passing, key=lambda c: (-(c.score or 0.0), c.position))


def crown_transition(
    leader: Contender | None, challengers: Sequence[Contender], *, moat: float
) -> CrownChange:
    """The crown after a scored round (module docstring, Crown).

    The leader holds while it passes and scores above 0, unless the best challenger
    beats ``leader_score * (1 + moat)``. A leader whose verdict is neither passed nor
    failed_correctness cannot be here: that round is void (``ValueError``).
    """
    best = best_challenger(challengers)
    if leader is not None:
        if leader.verdict not in (PASSED, FAILED_CORRECTNESS):
            raise ValueError(f"a leader verdict of {leader.verdict} voids the round")
        if leader.verdict == PASSED and leader.score is not None and leader.score > 0:
            if best is not None and (best.score or 0.0) > leader.score * (1 + moat):
                return CrownChange(best.submission_id, best.score, "overtaken")
            return CrownChange(leader.submission_id, leader.score, "kept")
    if best is not None and (best.score or 0.0) > 0:
        return CrownChange(
            best.submission_id, best.score, "taken" if leader is None else "succeeded"
        )
    return CrownChange(None, None, "vacant" if leader is None else "vacated")


# The whole round -------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedEntry:
    """What the round was created with, for one image."""

    entry_id: int
    submission_id: int
    role: str
    position: int
    image_digest: str


@dataclass(frozen=True)
class EntryResult:
    entry_id: int
    verdict: str
    score: float | None
    agreement: float | None
    reason: str
    slices: list[dict[str, Any]]


@dataclass(frozen=True)
class RoundDecision:
    """A void round (``void_reason``, ``void_cause``, ``void_by``) changes nothing but the
    round (and the void counts); a scored one writes ``entries`` (by entry id) and
    ``crown``."""

    void_reason: str
    drift: float | None
    baseline_open: Judgement
    baseline_close: Judgement
    entries: dict[int, EntryResult] = field(default_factory=dict)
    crown: CrownChange | None = None
    void_cause: str = ""  # one of VOID_CAUSES when void
    void_by: tuple[int, ...] = ()  # submissions whose own entry caused the void


def decide_round(
    outcome: RoundOutcome,
    *,
    planned: Sequence[PlannedEntry],
    request_digest: str,
    baseline_digest: str,
    slice_totals: Sequence[int],
    limits: Limits,
    excluded: frozenset[int] = frozenset(),
) -> RoundDecision:
    """Judge every image of a finished round and decide void or scored, and the crown.

    Void, first reason found: the host's own (``outcome.void_reason``: died, stale
    heartbeat...), another request set than the round's, the opening or the closing
    baseline failed (or was another image), drift above the ceiling, the leader
    infra_failed, no challenger reached passed, failed_correctness or disqualified.
    An entry that ran an image other than its submission's is infra_failed.
    ``excluded``: submissions staff disqualified while the round was open (module
    docstring): disqualified, no score, no crown; an excluded leader is no leader.
    """
    ran = {run.entry_id: run for run in outcome.entries}
    results: dict[int, EntryResult] = {}
    judged: dict[int, Judgement] = {}

    def judge_baseline(run: ImageRun | None) -> Judgement:
        if run is not None and run.image_digest != baseline_digest:
            return Judgement(INFRA_FAILED, "the host ran another baseline image")
        return judge_run(run, slice_totals=slice_totals, limits=limits, incumbent=True)

    opening = judge_baseline(outcome.baseline_open)
    closing = judge_baseline(outcome.baseline_close)
    for entry in planned:
        run = ran.get(entry.entry_id)
        if entry.submission_id in excluded:
            judged[entry.entry_id] = Judgement(DISQUALIFIED, STAFF_DISQUALIFIED)
        elif run is not None and run.image_digest != entry.image_digest:
            judged[entry.entry_id] = Judgement(INFRA_FAILED, "the host ran another image")
        else:
            judged[entry.entry_id] = judge_run(
                run, slice_totals=slice_totals, limits=limits, incumbent=entry.role == LEADER
            )
    round_drift = None
    if opening.seconds is not None and closing.seconds is not None:
        round_drift = drift(opening.seconds, closing.seconds)
    void = cause = ""
    void_by: tuple[int, ...] = ()
    leader = next(
        (e for e in planned if e.role == LEADER and e.submission_id not in excluded), None
    )
    challengers = [entry for entry in planned if entry.role == CHALLENGER]
    if outcome.void_reason:
        void, cause = outcome.void_reason, VOID_HOST
    elif outcome.request_digest != request_digest:
        void, cause = "the host staged another request set than the round's", VOID_HOST
    elif opening.verdict != PASSED:
        void, cause = f"the opening baseline failed: {opening.reason}", VOID_BASELINE
    elif closing.verdict != PASSED:
        void, cause = f"the closing baseline failed: {closing.reason}", VOID_BASELINE
    elif round_drift is not None and round_drift > limits.drift_ceiling:
        void = (
            f"the baseline drifted {round_drift:.4f} between the opening and the closing "
            f"run (the ceiling is {limits.drift_ceiling:.4f})"
        )
        cause = VOID_BASELINE
    elif leader is not None and judged[leader.entry_id].verdict == INFRA_FAILED:
        void = f"the leader failed on infrastructure: {judged[leader.entry_id].reason}"
        cause = VOID_LEADER
        if judged[leader.entry_id].own:
            void_by = (leader.submission_id,)
    elif not any(
        judged[entry.entry_id].verdict in (PASSED, FAILED_CORRECTNESS, DISQUALIFIED)
        for entry in challengers
    ):
        void, cause = "no challenger got a verdict", VOID_CHALLENGERS
        void_by = tuple(entry.submission_id for entry in challengers if judged[entry.entry_id].own)
    for entry in planned:
        judgement = judged[entry.entry_id]
        score = None
        if (
            not void
            and judgement.verdict == PASSED
            and opening.seconds is not None
            and judgement.seconds is not None
        ):
            score = score_slices(opening.seconds, judgement.seconds, judgement.in_tolerance)
        reason = judgement.reason
        if void:  # what was seen, kept for the page; it changes nothing
            reason = f"round void; seen: {judgement.verdict}" + (f" ({reason})" if reason else "")
        results[entry.entry_id] = EntryResult(
            entry_id=entry.entry_id,
            verdict=NONE if void else judgement.verdict,
            score=score,
            agreement=judgement.agreement,
            reason=reason,
            slices=slice_rows(
                judgement,
                ran.get(entry.entry_id),
                opening.seconds,
                void_reason=void,
                excluded=STAFF_DISQUALIFIED if entry.submission_id in excluded else "",
            ),
        )
    crown = None
    if not void:

        def contender(entry: PlannedEntry) -> Contender:
            result = results[entry.entry_id]
            return Contender(entry.submission_id, result.verdict, result.score, entry.position)

        crown = crown_transition(
            contender(leader) if leader is not None else None,
            [contender(entry) for entry in challengers],
            moat=limits.moat,
        )
    return RoundDecision(
        void, round_drift, opening, closing, results, crown, void_cause=cause, void_by=void_by
    )


def leader_void_streak(streak: int, decision: RoundDecision, leader_id: int | None) -> int:
    """The leader's count of voids its own entry caused in a row, after ``decision``.

    A scored round resets it; a void the leader's own entry caused adds one; a void of
    any other cause leaves it. The crown is lost when it reaches the campaign's
    ``leader_void_limit``.
    """
    if not decision.void_reason:
        return 0
    if (
        leader_id is not None
        and leader_id in decision.void_by
        and decision.void_cause == VOID_LEADER
    ):
        return streak + 1
    return streak


def evidence_digest(evidence: dict[str, Any]) -> str:
    """sha256 of the evidence as canonical JSON (sorted keys, no spaces, UTF-8)."""
    text = json.dumps(evidence, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
