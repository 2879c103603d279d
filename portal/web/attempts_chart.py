"""The every-attempt chart: each graded official attempt's wall time against its upload
date, each board identity's best (an entrant's, or a team's: the row the board ranks)
ringed, and the signed-in entrant's team's attempts highlighted (their own solid, their
teammates' paler; only their own when on their own); as inline SVG that needs no script.

Written directly rather than with pygal: tens of thousands of points, drawn as one
``<path>`` of round dots per kind (passed, failed) on whole pixels, so points that fall
on the same pixel are drawn once. The shared drawing (axes, the cloud, the bests) is
cached per benchmark and version of the attempts (which moves with a change of team of
anyone with an attempt, so the names shown follow the board's); the viewer's points are
a small layer added per request from one query of their team's attempts.

Text alternative: the chart's ``<desc>`` sums it up, each best and each of the viewer's
highlighted point has a ``<title>`` (the browser's tooltip), and the page lists the
viewer's team's attempts (their own marked) in a table beside it.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape
from zoneinfo import ZoneInfo

from django.core.cache import cache
from django.urls import reverse

from portal.contests.models import Benchmark, LeaderboardEntry
from portal.contests.selectors import RANK_ORDER
from portal.contests.templatetags.podium import ns, zoned
from portal.submissions.every_attempt import Attempt, attempts_version, graded_attempts
from portal.web.chart import CACHE_S, _chart_end, _tick_label, _x_ticks, _zone_label

CHART_ID = "attempts-chart"
WIDTH, HEIGHT = 880, 400
LEFT, RIGHT, TOP, BOTTOM = 78, 24, 40, 96
Y_TICKS = 6
DRAW_LOCK_S = 30  # a drawing that takes longer than this may be drawn twice
# Shared drawings this process keeps besides the shared cache, by key. A key names one
# version of the attempts and one end of the time axis, so what it holds never changes;
# kept here, a page is spared fetching and unpickling about 200 KB (20,000 attempts).
LOCAL_KEEP = 4

PASSED_COLOUR = "#0072b2"
FAILED_COLOUR = "#3d4247"
BEST_COLOUR = "#1d2125"
OWN_COLOUR = "#d55e00"
TEAMMATE_OPACITY = ".45"  # a teammate's point: the viewer's colour, paler


@dataclass(frozen=True)
class Scale:
    x0: float  # seconds since the epoch at the left edge
    x1: float
    y0: float  # milliseconds at the bottom edge
    y1: float

    def x(self, stamp: float) -> float:
        return LEFT + (stamp - self.x0) / (self.x1 - self.x0) * (WIDTH - LEFT - RIGHT)

    def y(self, ms: float) -> float:
        return HEIGHT - BOTTOM - (ms - self.y0) / (self.y1 - self.y0) * (HEIGHT - TOP - BOTTOM)


@dataclass(frozen=True)
class Best:
    rank: int
    entrant: str  # the row's name: a team's, or the entrant's username
    submission_id: int
    wall_time_ns: int
    at: dt.datetime
    team: bool = False


@dataclass(frozen=True)
class SharedDrawing:
    """What every viewer sees; cached."""

    key: str
    head: str  # from <svg> through the cloud and the bests
    tail: str  # the legend and </svg>
    scale: Scale | None
    attempts: int
    failed: int
    entrants: int  # board identities: a team counts once
    bests: list[Best]
    start: dt.datetime
    end: dt.datetime


@dataclass(frozen=True)
class AttemptsChart:
    svg: str  # safe to insert as is; empty when nothing is graded yet
    attempts: int
    failed: int
    entrants: int
    bests: list[Best]
    own_count: int  # the viewer's team's graded attempts (their own when alone; 0 signed out)
    own_rows: str  # their table's rows, safe to insert as is
    team: bool = False  # the highlighted attempts are a team's (the table names who uploaded)


def attempts_chart(
    benchmark: Benchmark,
    *,
    now: dt.datetime,
    board_key: str,
    viewer_id: int | None = None,
    teammates: Sequence[int] = (),
) -> AttemptsChart:
    """The chart for ``?show=all``. Cached: the shared drawing per benchmark and version of
    the attempts (``board_key``: the board's version, see ``attempts_version``), and the
    viewer's layer and table per viewer, team (``teammates``: the viewer's team's members,
    as ``teams.selectors.teammate_ids`` reads them; empty or only the viewer when alone)
    and that version. Warm, no query; cold, three for the shared drawing and one for the
    viewer's team's attempts."""
    end = _chart_end(benchmark, now)
    version = attempts_version(benchmark, board_key)
    key = f"podium:attempts:{benchmark.pk}:{version}:{end.timestamp()}"
    shared = _shared_drawing(benchmark, key=key, end=end)
    own: tuple[int, str, str, bool] = (0, "", "", False)  # count, SVG layer, rows, team
    if viewer_id is not None and shared.scale is not None:
        team = sorted({viewer_id, *teammates})
        # Drawn on that drawing's scale; keyed by the team as read now, so a change of
        # membership shows on the viewer's layer at once.
        own_key = f"{shared.key}:own:{viewer_id}:{'-'.join(map(str, team))}"
        cached: tuple[int, str, str, bool] | None = cache.get(own_key)
        if cached is None:
            ours = graded_attempts(benchmark, team)
            zone = benchmark.attempt_timezone
            cached = (
                len(ours),
                _own_layer(ours, viewer_id, shared.scale, zone),
                _own_rows(ours, viewer_id, zone, team=len(team) > 1),
                len(team) > 1,
            )
            cache.set(own_key, cached, CACHE_S)
        own = cached
    svg = ""
    if shared.scale is not None:
        svg = shared.head + own[1] + (_own_legend(team=own[3]) if own[0] else "") + shared.tail
    return AttemptsChart(
        svg=svg,
        attempts=shared.attempts,
        failed=shared.failed,
        entrants=shared.entrants,
        bests=shared.bests,
        own_count=own[0],
        own_rows=own[2],
        team=own[3],
    )


_local: OrderedDict[str, SharedDrawing] = OrderedDict()
_local_lock = threading.Lock()


def _shared_drawing(benchmark: Benchmark, *, key: str, end: dt.datetime) -> SharedDrawing:
    """The shared drawing for ``key``: this process's copy, else the shared cache's, else
    drawn (:func:`_draw_once`). Only a drawing made for ``key`` is kept for it (while
    another request draws, the benchmark's latest stands in, and is not kept)."""
    with _local_lock:
        shared = _local.get(key)
        if shared is not None:
            _local.move_to_end(key)
            return shared
    shared = cache.get(key)
    if shared is None:
        shared = _draw_once(benchmark, key=key, end=end)
    if shared.key == key:
        with _local_lock:
            _local[key] = shared
            while len(_local) > LOCAL_KEEP:
                _local.popitem(last=False)
    return shared


def forget_local() -> None:
    """Drop this process's copies of the shared drawings (a test or a bench that clears
    the shared cache to draw again)."""
    with _local_lock:
        _local.clear()


def _draw_once(benchmark: Benchmark, *, key: str, end: dt.datetime) -> SharedDrawing:
    """Draw the shared part for ``key``, one request at a time: while one draws, the others
    show the benchmark's latest drawing (when there is one) rather than draw it too."""
    latest_key = f"podium:attempts-latest:{benchmark.pk}"
    drawing_key = f"{key}:drawing"
    if not cache.add(drawing_key, 1, DRAW_LOCK_S):
        latest: SharedDrawing | None = cache.get(latest_key)
        if latest is not None:
            return latest
    try:
        shared = draw_shared(benchmark, graded_attempts(benchmark), key=key, end=end)
        cache.set_many({key: shared, latest_key: shared}, CACHE_S)
    finally:
        cache.delete(drawing_key)
    return shared


def _own_rows(ours: list[Attempt], viewer_id: int, zone: str, *, team: bool) -> str:
    """The viewer's (team's) attempts as table rows, with who uploaded each when in a team
    (written here: a template loop costs more than the rest of the page)."""
    link = reverse("submissions:detail", kwargs={"pk": 0}).removesuffix("0/")
    rows = []
    for a in ours:
        by = ""
        if team:
            by = (
                "<td><strong>you</strong></td>"
                if a.entrant_id == viewer_id
                else f"<td>{escape(a.entrant)}</td>"
            )
        rows.append(
            f'<tr><th scope="row"><a href="{link}{a.submission_id}/">#{a.submission_id}</a></th>'
            f"{by}<td>{escape(zoned(a.submitted_at, zone))}</td>"
            f"<td>{'passed' if a.passed else 'failed'}</td>"
            f'<td class="num mono" title="{a.wall_time_ns} ns">{escape(ns(a.wall_time_ns))}'
            "</td></tr>"
        )
    return "".join(rows)


def _bests(benchmark: Benchmark) -> list[Best]:
    """The board's rows (one per team, one per entrant on their own), named as it names
    them."""
    rows = (
        LeaderboardEntry.objects.filter(benchmark=benchmark)
        .order_by(*RANK_ORDER)
        .values_list(
            "entrant__username", "team_name", "submission_id", "wall_time_ns", "submitted_at"
        )
    )
    return [
        Best(rank, team or entrant, submission_id, wall_time_ns, at, team=bool(team))
        for rank, (entrant, team, submission_id, wall_time_ns, at) in enumerate(rows, start=1)
    ]


def draw_shared(
    benchmark: Benchmark, attempts: list[Attempt], *, key: str, end: dt.datetime
) -> SharedDrawing:
    zone = benchmark.attempt_timezone
    tz = ZoneInfo(zone)
    if not attempts:
        return SharedDrawing(key, "", "", None, 0, 0, 0, [], benchmark.opens_at, end)
    bests = _bests(benchmark)
    start = min(benchmark.opens_at, attempts[0].submitted_at)
    end = max(end, attempts[-1].submitted_at)
    times = [a.wall_time_ns / 1e6 for a in attempts]
    y0, y1, step = _nice_range(min(times), max(times))
    scale = Scale(start.timestamp(), max(end.timestamp(), start.timestamp() + 1), y0, y1)
    failed = sum(1 for a in attempts if not a.passed)
    # Board identities: a team (by name, unique on the benchmark) or an entrant alone.
    entrants = len({a.team.lower() if a.team else a.entrant_id for a in attempts})

    parts = [
        f'<svg role="img" aria-labelledby="{CHART_ID}-title" '
        f'aria-describedby="{CHART_ID}-desc" focusable="false" id="{CHART_ID}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        'font-family="system-ui, -apple-system, sans-serif" font-size="12" '
        'class="attempts-chart">',
        f'<title id="{CHART_ID}-title">Every graded attempt</title>',
        f'<desc id="{CHART_ID}-desc">{escape(_summary(attempts, failed, entrants, bests))}</desc>',
        f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
        f'height="{HEIGHT - TOP - BOTTOM}" fill="#fff" stroke="#b8c0c8"/>',
        f'<text x="{WIDTH / 2:.0f}" y="22" text-anchor="middle" font-size="15" '
        'fill="#1d2125">Every graded attempt</text>',
    ]
    # The y axis: guides and labels in milliseconds.
    decimals = 0 if step >= 1 else max(0, -math.floor(math.log10(step)))
    value = y0
    while value <= y1 + step / 2:
        y = scale.y(value)
        parts.append(
            f'<path d="M{LEFT} {y:.1f}H{WIDTH - RIGHT}" stroke="#d8dde2"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#5f6b76">'
            f"{value:,.{decimals}f}</text>"
        )
        value += step
    parts.append(
        f'<text transform="translate(16 {(TOP + HEIGHT - BOTTOM) / 2:.0f}) rotate(-90)" '
        'text-anchor="middle" fill="#1d2125">wall time (ms)</text>'
    )
    for tick in _x_ticks(start, end, tz):
        x = scale.x(tick)
        if LEFT <= x <= WIDTH - RIGHT:
            parts.append(
                f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle" '
                f'fill="#5f6b76">{_tick_label(tick, start, end, tz)}</text>'
            )
    parts.append(
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - BOTTOM + 36}" '
        f'text-anchor="middle" fill="#1d2125">upload accepted ({_zone_label(end, tz)})</text>'
    )
    # The cloud: the (fewer) failed attempts over the passing ones, each kind a path of
    # dots on whole pixels.
    for passed, colour, name in (
        (True, PASSED_COLOUR, "passed"),
        (False, FAILED_COLOUR, "failed"),
    ):
        dots = _dots(scale, (a for a in attempts if a.passed is passed))
        if dots:
            parts.append(
                f'<path class="attempts-{name}" d="{dots}" stroke="{colour}" '
                'stroke-width="3.5" stroke-linecap="round" stroke-opacity=".45" fill="none"/>'
            )
    # The bests the board ranks: a ring each, with its tooltip.
    parts.append('<g class="attempts-bests">')
    for best in bests:
        parts.append(
            f'<circle cx="{scale.x(best.at.timestamp()):.1f}" '
            f'cy="{scale.y(best.wall_time_ns / 1e6):.1f}" r="4.5" fill="none" '
            f'stroke="{BEST_COLOUR}" stroke-width="1.5"><title>{best.rank}. '
            f"{escape(best.entrant)}: best {ns(best.wall_time_ns)}, uploaded "
            f"{escape(zoned(best.at, zone))}</title></circle>"
        )
    parts.append("</g>")
    legend_y = HEIGHT - 22
    legend = [
        _legend(LEFT, legend_y, f'fill="{PASSED_COLOUR}" fill-opacity=".6"', "passed"),
        _legend(LEFT + 110, legend_y, f'fill="{FAILED_COLOUR}" fill-opacity=".6"', "failed"),
        _legend(
            LEFT + 220,
            legend_y,
            f'fill="none" stroke="{BEST_COLOUR}" stroke-width="1.5"',
            "best of each entrant or team (ranked)",
        ),
    ]
    return SharedDrawing(
        key=key,
        head="".join(parts),
        tail='<g class="attempts-legend">' + "".join(legend) + "</g></svg>",
        scale=scale,
        attempts=len(attempts),
        failed=failed,
        entrants=entrants,
        bests=bests,
        start=start,
        end=end,
    )


def _own_legend(*, team: bool) -> str:
    x, y = LEFT + 490, HEIGHT - 22
    if not team:
        entry = _legend(x, y, f'fill="{OWN_COLOUR}" stroke="#1d2125"', "your attempts")
    else:
        entry = _legend(x, y, f'fill="{OWN_COLOUR}" stroke="#1d2125"', "yours") + _legend(
            x + 70,
            y,
            f'fill="{OWN_COLOUR}" fill-opacity="{TEAMMATE_OPACITY}" stroke="#1d2125"',
            "your teammates'",
        )
    return f'<g class="attempts-legend-own">{entry}</g>'


def _own_layer(ours: list[Attempt], viewer_id: int, scale: Scale, zone: str) -> str:
    """The viewer's points over the cloud (their own on top of their teammates')."""
    if not ours:
        return ""
    theirs = [a for a in ours if a.entrant_id != viewer_id]
    own = [a for a in ours if a.entrant_id == viewer_id]
    marks = [
        f'<circle cx="{scale.x(a.submitted_at.timestamp()):.1f}" '
        f'cy="{scale.y(a.wall_time_ns / 1e6):.1f}" r="4" fill="{OWN_COLOUR}" '
        f'fill-opacity="{TEAMMATE_OPACITY}" stroke="#1d2125" stroke-width=".75">'
        f"<title>Your team's submission {a.submission_id} by {escape(a.entrant)} "
        f"({'passed' if a.passed else 'failed'}): {ns(a.wall_time_ns)}, uploaded "
        f"{escape(zoned(a.submitted_at, zone))}</title></circle>"
        for a in theirs
    ]
    marks += [
        f'<circle cx="{scale.x(a.submitted_at.timestamp()):.1f}" '
        f'cy="{scale.y(a.wall_time_ns / 1e6):.1f}" r="4" fill="{OWN_COLOUR}" stroke="#1d2125" '
        f'stroke-width=".75"><title>Your submission {a.submission_id} '
        f"({'passed' if a.passed else 'failed'}): {ns(a.wall_time_ns)}, uploaded "
        f"{escape(zoned(a.submitted_at, zone))}</title></circle>"
        for a in own
    ]
    return '<g class="attempts-own">' + "".join(marks) + "</g>"


def _dots(scale: Scale, attempts: Iterable[Attempt]) -> str:
    """``M x y h0`` for each distinct whole pixel, as relative moves (short)."""
    pixels = sorted(
        {
            (round(scale.x(a.submitted_at.timestamp())), round(scale.y(a.wall_time_ns / 1e6)))
            for a in attempts
        }
    )
    if not pixels:
        return ""
    out = [f"M{pixels[0][0]} {pixels[0][1]}h0"]
    px, py = pixels[0]
    for x, y in pixels[1:]:
        dy = y - py
        out.append(f"m{x - px} {dy}h0" if dy >= 0 else f"m{x - px}{dy}h0")
        px, py = x, y
    return "".join(out)


def _legend(x: int, y: int, paint: str, label: str) -> str:
    return (
        f'<circle cx="{x + 5}" cy="{y - 4}" r="4.5" {paint}/>'
        f'<text x="{x + 14}" y="{y}" fill="#1d2125">{escape(label)}</text>'
    )


def _summary(attempts: list[Attempt], failed: int, entrants: int, bests: list[Best]) -> str:
    text = (
        f"{len(attempts):,} graded official attempts by {entrants:,} entrants "
        f"({failed:,} failed on accuracy), wall time against upload time"
    )
    if bests:
        text += f"; fastest on the board: {bests[0].entrant} at {ns(bests[0].wall_time_ns)}"
    return text + "."


def _nice_range(low_ms: float, high_ms: float) -> tuple[float, float, float]:
    """Axis bounds on round steps, about ``Y_TICKS`` of them, around ``low``..``high``."""
    if high_ms - low_ms < 1e-6:
        low_ms, high_ms = low_ms * 0.9, high_ms * 1.1 + 1e-3
    raw = (high_ms - low_ms) / Y_TICKS
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    low = math.floor(low_ms / step) * step
    high = math.ceil(high_ms / step) * step
    if high <= low:
        high = low + step
    return low, high, step
