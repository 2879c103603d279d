"""The every-attempt chart of a metered-estimation phase: each graded entry at its mean
effective compute (x, log scale) against its mean final-layer MSE on the public MLPs (y,
log scale), over the Monte Carlo convergence band at the phase's budget (the 10th to 90th
percentile of the error plain sampling reaches spending the whole budget, shaded, with
its median as a line) and a vertical marker at the budget B. The viewer's team's entries
are drawn over the others, in their own colour, each a link to its page.

A pure function of its numbers (no Django, no query): inline SVG that needs no script,
written directly like ``attempts_chart.py``. Text alternative: the ``<desc>`` sums it up,
the band, the marker and every point carry a ``<title>`` (the browser's tooltip), and
the page lists the viewer's team's entries in a table beside it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from html import escape

CHART_ID = "estimation-chart"
WIDTH, HEIGHT = 880, 420
LEFT, RIGHT, TOP, BOTTOM = 78, 24, 40, 96

POINT_COLOUR = "#0072b2"
OWN_COLOUR = "#d55e00"
BAND_COLOUR = "#cc3311"
BUDGET_COLOUR = "#1d2125"

TIMES = "\u00d7"
_SUPERSCRIPT = str.maketrans(
    "-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079"
)


def sci(value: float | None, digits: int = 3) -> str:
    """``2.2e12`` -> "2.2 x 10¹²" (with a multiplication sign); plain for values from 0.01
    to 10,000."""
    if value is None or not math.isfinite(value):
        return "-"
    if value == 0:
        return "0"
    if 1000 <= abs(value) < 10_000:
        return f"{value:,.0f}"
    if 0.01 <= abs(value) < 1000:
        return f"{value:.{digits}g}"
    exponent = math.floor(math.log10(abs(value)))
    mantissa = value / 10**exponent
    if round(mantissa, digits - 1) >= 10:  # 9.999e5 rounds to 10.0 x 10^5
        mantissa, exponent = mantissa / 10, exponent + 1
    head = f"{mantissa:.{digits}g}"
    return f"{head} {TIMES} {decade(exponent)}"


def decade(exponent: int) -> str:
    """10 to a whole power, with the power as superscript characters: "10⁻⁶"."""
    return "10" + str(exponent).translate(_SUPERSCRIPT)


@dataclass(frozen=True)
class Axes:
    """Whole decades on both axes: 10**x0 .. 10**x1 across, 10**y0 .. 10**y1 up."""

    x0: int
    x1: int
    y0: int
    y1: int

    def x(self, compute: float) -> float:
        span = self.x1 - self.x0
        return LEFT + (math.log10(compute) - self.x0) / span * (WIDTH - LEFT - RIGHT)

    def y(self, mse: float) -> float:
        span = self.y1 - self.y0
        return HEIGHT - BOTTOM - (math.log10(mse) - self.y0) / span * (HEIGHT - TOP - BOTTOM)


def _decades(values: Sequence[float]) -> tuple[int, int]:
    low = math.floor(math.log10(min(values)))
    high = math.ceil(math.log10(max(values)))
    return (low, high) if high > low else (low, low + 1)


def _drawable(value: float) -> bool:
    return math.isfinite(value) and value > 0


def chart_axes(
    points: Sequence[tuple[float, float, int]],
    *,
    budget: float,
    band: tuple[float, float, float] | None,
) -> Axes | None:
    """The axes that hold every drawable point (positive and finite on both axes), the
    budget and the band; None when there is nothing to draw on them."""
    drawn = [(c, m) for c, m, _ in points if _drawable(c) and _drawable(m)]
    band_values = [v for v in band or () if _drawable(v)]
    if not drawn and not band_values:
        return None
    xs = [c for c, _ in drawn] + ([budget] if _drawable(budget) else [])
    ys = [m for _, m in drawn] + band_values
    if not ys:
        return None
    x0, x1 = _decades(xs)
    y0, y1 = _decades(ys)
    return Axes(x0, x1, y0, y1)


def estimation_chart(
    points: Sequence[tuple[float, float, int]],
    *,
    budget: float,
    band: tuple[float, float, float] | None,
    own_ids: Collection[int] = (),
    entry_href: str = "",
) -> str:
    """The chart as inline SVG (empty when there is nothing to draw).

    ``points``: every graded entry as (mean effective compute, mean public final-layer
    MSE, entry id), as ``estimation.selectors.every_entry_points`` reads them; ``band``:
    (10th percentile, median, 90th percentile) of the Monte Carlo error at ``budget``;
    ``own_ids``: the viewer's team's entries, highlighted; ``entry_href``: the entry
    page's address with ``{id}`` where the entry's id goes (own points link to it).
    """
    axes = chart_axes(points, budget=budget, band=band)
    if axes is None:
        return ""
    own = set(own_ids)
    drawn = [p for p in points if _drawable(p[0]) and _drawable(p[1])]
    left_out = len(points) - len(drawn)
    right_edge, bottom_edge = WIDTH - RIGHT, HEIGHT - BOTTOM
    parts = [
        f'<svg role="img" aria-labelledby="{CHART_ID}-title" '
        f'aria-describedby="{CHART_ID}-desc" focusable="false" id="{CHART_ID}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        'font-family="system-ui, -apple-system, sans-serif" font-size="12" '
        'class="estimation-chart">',
        f'<title id="{CHART_ID}-title">Every graded entry: error against compute</title>',
        f'<desc id="{CHART_ID}-desc">{escape(_summary(drawn, left_out, own, budget, band))}</desc>',
        f'<rect x="{LEFT}" y="{TOP}" width="{right_edge - LEFT}" '
        f'height="{bottom_edge - TOP}" fill="#fff" stroke="#b8c0c8"/>',
        f'<text x="{WIDTH / 2:.0f}" y="22" text-anchor="middle" font-size="15" '
        'fill="#1d2125">Every graded entry: error against compute</text>',
    ]
    # Decade guides and labels on both axes.
    for k in range(axes.y0, axes.y1 + 1):
        y = axes.y(10.0**k)
        parts.append(
            f'<path d="M{LEFT} {y:.1f}H{right_edge}" stroke="#d8dde2"/>'
            f'<text class="y-tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" '
            f'fill="#5f6b76">{decade(k)}</text>'
        )
    for k in range(axes.x0, axes.x1 + 1):
        x = axes.x(10.0**k)
        parts.append(
            f'<path d="M{x:.1f} {TOP}V{bottom_edge}" stroke="#eef0f2"/>'
            f'<text class="x-tick" x="{x:.1f}" y="{bottom_edge + 16}" text-anchor="middle" '
            f'fill="#5f6b76">{decade(k)}</text>'
        )
    parts.append(
        f'<text transform="translate(16 {(TOP + bottom_edge) / 2:.0f}) rotate(-90)" '
        'text-anchor="middle" fill="#1d2125">mean final-layer MSE, public MLPs (log)</text>'
        f'<text x="{(LEFT + right_edge) / 2:.0f}" y="{bottom_edge + 36}" '
        'text-anchor="middle" fill="#1d2125">mean effective compute per MLP, FLOPs (log)</text>'
    )
    # The Monte Carlo band at the budget: 10th to 90th percentile, and the median.
    if band is not None and all(_drawable(v) for v in band):
        low, median, high = band
        top, bottom = axes.y(high), axes.y(low)
        parts.append(
            f'<rect class="mc-band" x="{LEFT}" y="{top:.1f}" width="{right_edge - LEFT}" '
            f'height="{max(bottom - top, 1.0):.1f}" fill="{BAND_COLOUR}" fill-opacity=".14">'
            f"<title>Monte Carlo at the budget: 10th to 90th percentile of the MLPs' error, "
            f"{sci(low)} to {sci(high)}</title></rect>"
            f'<path class="mc-median" d="M{LEFT} {axes.y(median):.1f}H{right_edge}" '
            f'stroke="{BAND_COLOUR}" stroke-width="1.5" stroke-dasharray="6 4">'
            f"<title>Monte Carlo at the budget: median error {sci(median)}</title></path>"
        )
    # The budget B.
    if _drawable(budget):
        x = axes.x(budget)
        parts.append(
            f'<path class="budget-marker" d="M{x:.1f} {TOP}V{bottom_edge}" '
            f'stroke="{BUDGET_COLOUR}" stroke-width="1.5">'
            f"<title>The FLOP budget per MLP, B = {sci(budget)}</title></path>"
            f'<text x="{x - 4:.1f}" y="{TOP + 14}" text-anchor="end" fill="#1d2125">'
            f"B = {sci(budget)}</text>"
        )
    # Everyone's entries, then the viewer's team's over them.
    parts.append('<g class="entries">')
    for compute, mse, entry_id in drawn:
        if entry_id in own:
            continue
        parts.append(
            f'<circle class="entry-point" data-entry="{entry_id}" cx="{axes.x(compute):.1f}" '
            f'cy="{axes.y(mse):.1f}" r="3.5" fill="{POINT_COLOUR}" fill-opacity=".5">'
            f"<title>Entry {entry_id}: {sci(compute)} FLOPs, error {sci(mse)}</title></circle>"
        )
    parts.append("</g>")
    mine = [p for p in drawn if p[2] in own]
    if mine:
        parts.append('<g class="entries-own">')
        for compute, mse, entry_id in mine:
            circle = (
                f'<circle class="entry-point own" data-entry="{entry_id}" '
                f'cx="{axes.x(compute):.1f}" cy="{axes.y(mse):.1f}" r="5" fill="{OWN_COLOUR}" '
                f'stroke="#1d2125" stroke-width=".75"><title>Your team\'s entry {entry_id}: '
                f"{sci(compute)} FLOPs, error {sci(mse)}</title></circle>"
            )
            if entry_href:
                href = escape(entry_href.replace("{id}", str(entry_id)))
                circle = f'<a href="{href}">{circle}</a>'
            parts.append(circle)
        parts.append("</g>")
    parts.append(_legend(own=bool(mine)))
    parts.append("</svg>")
    return "".join(parts)


def _legend(*, own: bool) -> str:
    y = HEIGHT - 22
    items = [
        f'<circle cx="{LEFT + 5}" cy="{y - 4}" r="4" fill="{POINT_COLOUR}" fill-opacity=".5"/>'
        f'<text x="{LEFT + 14}" y="{y}" fill="#1d2125">graded entry</text>',
        f'<rect x="{LEFT + 120}" y="{y - 10}" width="18" height="12" fill="{BAND_COLOUR}" '
        f'fill-opacity=".14" stroke="{BAND_COLOUR}" stroke-dasharray="3 2"/>'
        f'<text x="{LEFT + 144}" y="{y}" fill="#1d2125">Monte Carlo at B (10th-90th '
        "percentile, median dashed)</text>",
        f'<path d="M{LEFT + 470} {y - 11}v14" stroke="{BUDGET_COLOUR}" stroke-width="1.5"/>'
        f'<text x="{LEFT + 478}" y="{y}" fill="#1d2125">budget B</text>',
    ]
    if own:
        items.append(
            f'<circle cx="{LEFT + 570}" cy="{y - 4}" r="5" fill="{OWN_COLOUR}" '
            'stroke="#1d2125" stroke-width=".75"/>'
            f'<text x="{LEFT + 580}" y="{y}" fill="#1d2125">your team\'s entries</text>'
        )
    return '<g class="estimation-legend">' + "".join(items) + "</g>"


def _summary(
    drawn: Sequence[tuple[float, float, int]],
    left_out: int,
    own: set[int],
    budget: float,
    band: tuple[float, float, float] | None,
) -> str:
    text = (
        f"{len(drawn):,} graded entries, mean final-layer error on the public MLPs "
        f"against mean effective compute, both on log scales; the budget is "
        f"{sci(budget)} FLOPs per MLP"
    )
    if band is not None:
        text += (
            f"; Monte Carlo sampling at the budget reaches a median error of {sci(band[1])} "
            f"(10th to 90th percentile {sci(band[0])} to {sci(band[2])})"
        )
    if drawn:
        best = min(drawn, key=lambda p: p[1])
        text += f"; the lowest error is {sci(best[1])} at {sci(best[0])} FLOPs"
    mine = sum(1 for p in drawn if p[2] in own)
    if mine:
        text += f"; {mine} of the entries are your team's"
    if left_out:
        text += f"; {left_out} entries with no positive error or compute are not drawn"
    return text + "."
