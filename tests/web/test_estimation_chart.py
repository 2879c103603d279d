"""The metered-estimation chart as a pure function: entries placed on log axes, the Monte
Carlo band and the budget's marker, the viewer's team's entries marked. No database."""

from __future__ import annotations

import math
import re

import pytest

from portal.web.estimation_chart import (
    BOTTOM,
    HEIGHT,
    LEFT,
    RIGHT,
    TIMES,
    TOP,
    WIDTH,
    chart_axes,
    decade,
    estimation_chart,
    sci,
)

POINTS = [(1e8, 1e-3, 1), (1e10, 1e-5, 2), (3.2e11, 4e-6, 3)]
BAND = (1e-6, 3e-6, 1e-5)
BUDGET = 1e12


def circle(svg: str, entry_id: int) -> tuple[str, float, float]:
    """The class and centre of an entry's point."""
    found = re.search(
        rf'<circle class="([^"]+)" data-entry="{entry_id}" cx="([\d.]+)" cy="([\d.]+)"', svg
    )
    assert found is not None, f"no point for entry {entry_id}"
    return found.group(1), float(found.group(2)), float(found.group(3))


def test_the_axes_are_whole_decades_around_the_points_the_budget_and_the_band():
    axes = chart_axes(POINTS, budget=BUDGET, band=BAND)

    assert axes is not None
    assert (axes.x0, axes.x1) == (8, 12)  # the budget 1e12 widens the points' 1e8..3.2e11
    assert (axes.y0, axes.y1) == (-6, -3)  # the band's 1e-6 is the lowest value


def test_points_sit_on_log_scales():
    svg = estimation_chart(POINTS, budget=BUDGET, band=BAND)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    _, x1, y1 = circle(svg, 1)
    _, x2, y2 = circle(svg, 2)
    _, x3, y3 = circle(svg, 3)

    assert x1 == pytest.approx(LEFT, abs=0.1)  # 1e8, the left edge
    assert y1 == pytest.approx(TOP, abs=0.1)  # 1e-3, the top
    assert x2 == pytest.approx(LEFT + plot_w / 2, abs=0.1)  # 1e10: two of four decades
    assert y2 == pytest.approx(TOP + plot_h * 2 / 3, abs=0.1)  # 1e-5: two of three down
    assert x3 == pytest.approx(LEFT + plot_w * (math.log10(3.2e11) - 8) / 4, abs=0.1)
    assert y3 == pytest.approx(TOP + plot_h * (-3 - math.log10(4e-6)) / 3, abs=0.1)
    # Each decade has its label, as a power of ten.
    assert re.findall(r'class="x-tick"[^>]*>([^<]+)<', svg) == [decade(k) for k in range(8, 13)]
    assert re.findall(r'class="y-tick"[^>]*>([^<]+)<', svg) == [decade(k) for k in range(-6, -2)]


def test_the_band_spans_its_percentiles_with_the_median_and_the_budget_is_marked():
    svg = estimation_chart(POINTS, budget=BUDGET, band=BAND)
    axes = chart_axes(POINTS, budget=BUDGET, band=BAND)
    assert axes is not None

    band = re.search(
        r'<rect class="mc-band" x="(\d+)" y="([\d.]+)" width="(\d+)" height="([\d.]+)"', svg
    )
    assert band is not None
    top, height = float(band.group(2)), float(band.group(4))
    assert top == pytest.approx(axes.y(1e-5), abs=0.1)  # the 90th percentile
    assert top + height == pytest.approx(axes.y(1e-6), abs=0.1)  # the 10th
    assert int(band.group(3)) == WIDTH - LEFT - RIGHT  # across the whole plot
    median = re.search(r'class="mc-median" d="M\d+ ([\d.]+)H', svg)
    assert median is not None and float(median.group(1)) == pytest.approx(axes.y(3e-6), abs=0.1)
    marker = re.search(r'class="budget-marker" d="M([\d.]+) ', svg)
    assert marker is not None
    assert float(marker.group(1)) == pytest.approx(WIDTH - RIGHT, abs=0.1)  # 1e12: the right edge
    assert f"B = 1 {TIMES} 10¹²" in svg


def test_the_viewers_entries_are_marked_and_linked():
    svg = estimation_chart(
        POINTS, budget=BUDGET, band=BAND, own_ids={2}, entry_href="/estimation/entries/{id}/"
    )

    assert circle(svg, 2)[0] == "entry-point own"
    assert circle(svg, 1)[0] == circle(svg, 3)[0] == "entry-point"
    assert '<a href="/estimation/entries/2/"><circle class="entry-point own"' in svg
    assert 'href="/estimation/entries/1/"' not in svg  # others' entries are not linked
    assert svg.index('data-entry="2"') > svg.index('data-entry="3"')  # drawn over the rest
    assert "your team's entries" in svg and "1 of the entries are your team" in svg


def test_without_the_viewer_there_is_no_own_mark():
    svg = estimation_chart(POINTS, budget=BUDGET, band=BAND)

    assert "entry-point own" not in svg and "your team" not in svg


def test_a_chart_without_a_band_draws_the_points_and_the_budget():
    svg = estimation_chart(POINTS, budget=BUDGET, band=None)

    assert "mc-band" not in svg and "mc-median" not in svg
    assert 'class="budget-marker"' in svg and len(re.findall(r"<circle class=", svg)) == 3


def test_a_band_alone_is_drawn_before_any_entry():
    svg = estimation_chart([], budget=BUDGET, band=BAND)

    assert 'class="mc-band"' in svg and "<circle class=" not in svg
    assert "0 graded entries" in svg


def test_nothing_to_draw_is_an_empty_chart():
    assert estimation_chart([], budget=BUDGET, band=None) == ""


def test_points_off_a_log_scale_are_left_out_and_counted():
    svg = estimation_chart([*POINTS, (0.0, 1e-4, 4), (1e9, math.nan, 5)], budget=BUDGET, band=BAND)

    assert 'data-entry="4"' not in svg and 'data-entry="5"' not in svg
    assert "2 entries with no positive error or compute are not drawn" in svg


def test_one_decade_of_values_still_gets_an_axis():
    axes = chart_axes([(1e9, 1e-4, 1)], budget=1e9, band=None)

    assert axes is not None and (axes.x0, axes.x1) == (9, 10) and (axes.y0, axes.y1) == (-4, -3)


def test_numbers_over_many_decades_read_as_powers_of_ten():
    assert sci(2.2e12) == f"2.2 {TIMES} 10¹²"
    assert sci(9.9996e5) == f"1 {TIMES} 10⁶"
    assert sci(3.885e-7) == f"3.89 {TIMES} 10⁻⁷"
    assert sci(0.25) == "0.25"
    assert sci(1234.5) == "1,234"
    assert sci(None) == sci(math.inf) == "-"
    assert sci(0) == "0"
