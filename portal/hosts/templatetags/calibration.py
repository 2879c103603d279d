"""``{% noise_band_of benchmark.hardware_class_id as band %}``: a class's timing noise for the
benchmark page (``portal.hosts.selectors.noise_band``; cached, one query when cold)."""

from __future__ import annotations

from django import template

from portal.hosts.selectors import NoiseBand, noise_band

register = template.Library()


@register.simple_tag
def noise_band_of(hardware_class: str) -> NoiseBand | None:
    return noise_band(hardware_class)
