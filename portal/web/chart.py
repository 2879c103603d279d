"""The progress chart: best wall time over the contest for the top entrants, as inline SVG.

Drawn on the server with pygal and cleaned of everything that needs JavaScript or
another site (pygal's config script, its comments with links), so the chart reads the
same with scripts off: each improvement is a dot whose ``<title>`` is the browser's
own tooltip, and the page puts the same numbers in a table next to it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from zoneinfo import ZoneInfo

import pygal
from django.core.cache import cache
from pygal.style import Style

from portal.contests.models import Benchmark
from portal.contests.selectors import BoardVersion, leaderboard_version
from portal.contests.templatetags.podium import ns, zoned
from portal.submissions.progress import ProgressSeries, progress_series

CHART_ID = "progress-chart"
CACHE_S = 15 * 60
# The right edge of the chart ("now") moves in steps of this, so a cached chart is
# reused between steps; any change of the board makes a new one at once.
NOW_STEP_S = 10 * 60
MAX_X_LABELS = 8

PODIUM_STYLE = Style(
    background="transparent",
    plot_background="#ffffff",
    foreground="#1d2125",
    foreground_strong="#1d2125",
    foreground_subtle="#5f6b76",
    font_family='system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans KR", sans-serif',
    label_font_size=12,
    major_label_font_size=12,
    legend_font_size=13,
    title_font_size=15,
    guide_stroke_color="#d8dde2",
    major_guide_stroke_color="#b8c0c8",
    stroke_width="2",
    stroke_width_hover="3",
    opacity=".9",
    opacity_hover="1",
    # Distinct on white and for the common colour-vision deficiencies (Okabe-Ito).
    colors=(
        "#0072b2",
        "#d55e00",
        "#009e73",
        "#cc79a7",
        "#56595c",
        "#e69f00",
        "#2a8fd0",
        "#8c564b",
    ),
)


@dataclass(frozen=True)
class ProgressChart:
    key: str  # names this drawing (for caching what the page renders from it)
    svg: str  # markup, safe to insert as is; empty when the board is empty
    series: list[ProgressSeries]
    start: dt.datetime
    end: dt.datetime


def progress_chart(
    benchmark: Benchmark, *, now: dt.datetime, version: BoardVersion | None = None
) -> ProgressChart:
    """The chart for the benchmark page, from the cache while the board is unchanged.

    No query when cached and given the board's ``version`` (one to read it otherwise);
    two more to draw it.
    """
    version = version or leaderboard_version(benchmark)
    end = _chart_end(benchmark, now)
    key = f"podium:progress:{benchmark.pk}:{version.key}:{end.timestamp()}"
    chart: ProgressChart | None = cache.get(key)
    if chart is None:
        series = progress_series(benchmark)
        start = min([benchmark.opens_at, *(s.improvements[0].at for s in series)])
        svg = render_progress_svg(series, zone=benchmark.attempt_timezone, start=start, end=end)
        chart = ProgressChart(key=key, svg=svg, series=series, start=start, end=end)
        cache.set(key, chart, CACHE_S)
    return chart


def _chart_end(benchmark: Benchmark, now: dt.datetime) -> dt.datetime:
    if now >= benchmark.closes_at:
        return benchmark.closes_at
    step = int(now.timestamp()) // NOW_STEP_S * NOW_STEP_S + NOW_STEP_S
    return dt.datetime.fromtimestamp(step, dt.UTC)


def render_progress_svg(
    series: list[ProgressSeries], *, zone: str, start: dt.datetime, end: dt.datetime
) -> str:
    """Step lines of each entrant's best time (ms) against upload time, ending at ``end``."""
    if not series:
        return ""
    end = max([end, *(s.improvements[-1].at for s in series)])
    tz = ZoneInfo(zone)
    chart = pygal.XY(
        style=PODIUM_STYLE,
        js=[],
        disable_xml_declaration=True,
        width=880,
        height=380,
        title="Best wall time of the top entrants",
        x_title=f"upload accepted ({_zone_label(end, tz)})",
        y_title="best wall time (ms)",
        show_x_guides=False,
        dots_size=3.5,
        legend_at_bottom=True,
        legend_at_bottom_columns=min(4, len(series)),
        truncate_legend=-1,
        x_labels=_x_ticks(start, end, tz),
        x_value_formatter=lambda stamp: _tick_label(stamp, start, end, tz),
        value_formatter=_ms_formatter(series),
        xrange=(start.timestamp(), end.timestamp()),
        include_x_axis=False,
        margin_right=30,
    )
    for entry in series:
        chart.add(f"{entry.rank}. {entry.entrant}", _step_points(entry, zone, end))
    return _clean(chart.render(is_unicode=True), series)


def _ms_formatter(series: list[ProgressSeries]) -> Callable[[float], str]:
    """Axis labels with as few decimals as the spread of the times needs."""
    times = [step.wall_time_ns for entry in series for step in entry.improvements]
    spread_ms = (max(times) - min(times)) / 1_000_000
    decimals = 0 if spread_ms >= 20 else 1 if spread_ms >= 2 else 3
    return lambda ms: f"{ms:,.{decimals}f}"


def _ms(wall_time_ns: int) -> float:
    return float(Decimal(wall_time_ns) / Decimal(1_000_000))


def _step_points(entry: ProgressSeries, zone: str, end: dt.datetime) -> list[dict[str, object]]:
    """A staircase: each best holds until the next improvement, the last one until ``end``.

    Only real improvements get a visible dot and a tooltip.
    """
    points: list[dict[str, object]] = []
    for index, step in enumerate(entry.improvements):
        x = step.at.timestamp()
        if index:
            held = entry.improvements[index - 1].wall_time_ns
            points.append({"value": (x, _ms(held)), "node": {"r": 0}})
        label = f"{entry.entrant}: {ns(step.wall_time_ns)}, uploaded {zoned(step.at, zone)}"
        points.append({"value": (x, _ms(step.wall_time_ns)), "label": label})
    points.append({"value": (end.timestamp(), _ms(entry.best_ns)), "node": {"r": 0}})
    return points


def _zone_label(moment: dt.datetime, tz: ZoneInfo) -> str:
    return moment.astimezone(tz).tzname() or str(tz)


def _x_ticks(start: dt.datetime, end: dt.datetime, tz: ZoneInfo) -> list[float]:
    """Local midnights (or whole hours for a short span), at most MAX_X_LABELS of them."""
    span_s = max(1.0, (end - start).total_seconds())
    local_start = start.astimezone(tz)
    if span_s <= 2 * 86_400:
        unit = dt.timedelta(hours=1)
        first = local_start.replace(minute=0, second=0, microsecond=0) + unit
        count_units = span_s / 3_600
    else:
        unit = dt.timedelta(days=1)
        first = local_start.replace(hour=0, minute=0, second=0, microsecond=0) + unit
        count_units = span_s / 86_400
    every = max(1, int(-(-count_units // MAX_X_LABELS)))
    ticks: list[float] = []
    tick = first
    while tick <= end:
        ticks.append(tick.timestamp())
        # Wall-clock steps in the zone (a day is 23 or 25 hours across a clock change).
        tick = (tick.replace(tzinfo=None) + unit * every).replace(tzinfo=tz)
    return ticks


def _tick_label(stamp: float, start: dt.datetime, end: dt.datetime, tz: ZoneInfo) -> str:
    local = dt.datetime.fromtimestamp(stamp, tz)
    if (end - start).total_seconds() <= 2 * 86_400:
        return f"{local:%m-%d %H:%M}"
    return f"{local:%m-%d}"


_PYGAL_ID = re.compile(r"chart-[0-9a-f-]{36}")


def _clean(svg: str, series: list[ProgressSeries]) -> str:
    """Drop pygal's script and comments, give the chart a stable id and an accessible name,
    and turn each point's label into a native tooltip."""
    svg = re.sub(r"<!--.*?-->", "", svg, flags=re.S)
    svg = re.sub(r"<script\b.*?</script>", "", svg, flags=re.S)
    svg = _PYGAL_ID.sub(CHART_ID, svg)
    # Inline in HTML the SVG namespace is implied; no address of another site is left.
    svg = re.sub(r'\s+xmlns(?::\w+)?="[^"]*"', "", svg)
    svg = re.sub(r'<desc class="(?:value|x|y)[^"]*">.*?</desc>', "", svg, flags=re.S)
    svg = svg.replace('<desc class="label">', "<title>").replace("</desc>", "</title>")
    leader = series[0]
    summary = (
        f"Best wall time over the contest for the top {len(series)} entrants; "
        f"leading: {leader.entrant} at {ns(leader.best_ns)}."
    )
    return svg.replace(
        "<svg ",
        f'<svg role="img" aria-describedby="{CHART_ID}-desc" focusable="false" ',
        1,
    ).replace(
        "<defs>",
        f'<desc id="{CHART_ID}-desc">{_escape(summary)}</desc><defs>',
        1,
    )


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
