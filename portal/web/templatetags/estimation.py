"""Filters of the metered-estimation pages: numbers over many decades (FLOPs, errors)."""

from __future__ import annotations

import math

from django import template

from portal.web.estimation_chart import sci as _sci

register = template.Library()


@register.filter
def sci(value: float | int | None) -> str:
    """``2.2e12`` -> "2.2 x 10¹²" (a multiplication sign); "-" for a missing or non-finite value."""
    return _sci(None if value is None else float(value))


@register.filter
def seconds(value: float | None) -> str:
    """A duration in seconds as ms below one second: "312 ms", "1.25 s"."""
    if value is None or not math.isfinite(value):
        return "-"
    if value < 1:
        return f"{value * 1000:.3g} ms"
    return f"{value:.3g} s"


@register.filter
def ratio(value: float | None) -> str:
    """Seed 004's ratio, a fraction from 0 to 1: "0.93", "4.1 x 10⁻⁴"."""
    if value is None or not math.isfinite(value):
        return "-"
    return _sci(value, 2) if value < 0.01 else f"{value:.2f}"
