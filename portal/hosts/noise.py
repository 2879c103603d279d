"""Calibration arithmetic (pure: plain values in, plain values out, no Django).

A calibration runs a fixed workload K times (``scoring.run.calibration``) and keeps each
repetition's trusted wall time. From those:

- **median**: the calibration's one figure, compared with the class's reference. The
  median of an odd count is a measured value; of an even count, the mean of the middle
  two, rounded down.
- **noise** of one calibration: half the range of its repetitions, in percent of their
  median: ``(max - min) / 2 / median * 100``. It is the ± of a single run measured on
  this host at that moment. With K = 7 the range is the honest choice: an interquartile
  range of seven values leaves out the very outliers a timing would suffer.
- **drift**: ``(median - reference) / reference * 100``, signed (faster is a drift too:
  a host faster than its class is not comparable with it either). A host drifts when
  ``|drift|`` exceeds the limit (``PODIUM_CALIBRATION_DRIFT_PCT``).
- **noise band** of a class: see :func:`noise_band_pct`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence


def median_ns(walls: Sequence[int]) -> int:
    """The median of the repetitions' wall times (ns). ValueError when there are none."""
    if not walls:
        raise ValueError("no repetitions")
    ordered = sorted(walls)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return int(ordered[middle])
    return (int(ordered[middle - 1]) + int(ordered[middle])) // 2


def noise_pct(walls: Sequence[int]) -> float:
    """Half the range of the repetitions in percent of their median (0 for one run)."""
    middle = median_ns(walls)
    if middle <= 0:
        raise ValueError("a wall time must be positive")
    return (max(walls) - min(walls)) / 2 / middle * 100


def drift_pct(median: int, reference: int) -> float:
    """How far ``median`` is from ``reference``, in percent of the reference (signed)."""
    if reference <= 0:
        raise ValueError("a reference must be positive")
    return (median - reference) / reference * 100


def drifted(drift: float, limit_pct: float) -> bool:
    """Whether a drift is past the limit (either way; exactly the limit is still good)."""
    return abs(drift) > limit_pct


def calibration_due(
    *,
    last_finished_at: dt.datetime | None,
    last_ok: bool,
    runs_since: int,
    now: dt.datetime,
    every_runs: int,
    every_s: float,
) -> str:
    """Why a host must calibrate before it claims its next run, or "" when it need not.

    Due when it never calibrated, when its last calibration was not good (a drift or a
    calibration that could not be measured: a host resumed by staff proves itself again
    first), after ``every_runs`` runs since the last one, or once the last one is
    ``every_s`` seconds old. ``every_runs`` or ``every_s`` of 0 turns that rule off.
    The value is the trigger: ``registration``, ``recheck``, ``runs`` or ``age``.
    """
    if last_finished_at is None:
        return "registration"
    if not last_ok:
        return "recheck"
    if every_runs > 0 and runs_since >= every_runs:
        return "runs"
    if every_s > 0 and (now - last_finished_at).total_seconds() >= every_s:
        return "age"
    return ""


def noise_band_pct(calibrations: Sequence[Sequence[int]]) -> float | None:
    """A class's timing noise: the ± (in percent) around the class's median within which
    every repetition of the given calibrations fell; None when there are none.

    ``calibrations`` are recent good calibrations of the class's active hosts, each its
    repetitions' wall times. Their repetitions are pooled; ``M`` is the pooled median
    and the band is ``max |wall - M| / M * 100``. It holds both kinds of noise an entrant
    meets: a run against itself (each calibration's own spread) and a host or a day
    against another (the spread of the calibrations' medians, within the drift limit).
    It is the worst case seen, not a standard deviation: timing noise is skewed (a run
    is only ever slowed), and "every measured run fell within ±x %" is a claim a reader
    can check against the calibration rows.
    """
    pooled = [int(wall) for walls in calibrations for wall in walls]
    if not pooled:
        return None
    middle = median_ns(pooled)
    if middle <= 0:
        raise ValueError("a wall time must be positive")
    return max(abs(wall - middle) for wall in pooled) / middle * 100


def spread_pct(walls: Sequence[int]) -> float:
    """How much slower one of repeated runs of the same image on the same cohort was than
    another: the slowest over the fastest, minus one, in percent (0 for one run).

    It is the reference kit's **spread** on a class and cohort size, the tolerance of a
    verification (``rules.verification_tolerance_pct``): an honest entry's official run
    and its verification runs are two such runs, and either may be the fast one. The
    worst case seen, like the noise band: a skewed noise (a run is only ever slowed, a
    short run's process start jitters most) has no standard deviation worth quoting, and
    "every one of N runs was within x % of every other" can be checked against the row.
    """
    if not walls:
        raise ValueError("no runs")
    fastest = min(walls)
    if fastest <= 0:
        raise ValueError("a wall time must be positive")
    return (max(walls) - fastest) / fastest * 100
