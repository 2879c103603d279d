"""``{% noise_band_of benchmark.hardware_class_id as band %}``: a class's timing noise for the
benchmark page (``portal.hosts.selectors.noise_band``; cached, one query when cold).
``{% reference_spread_of benchmark as spread %}``: its reference kit's measured spread at
its official cohort's size (``portal.hosts.selectors.reference_spread``), the verification
tolerance."""

from __future__ import annotations

from django import template

from portal.contests.models import Benchmark
from portal.contests.selectors import official_cohort_size
from portal.hosts.models import ReferenceSpread
from portal.hosts.selectors import NoiseBand, noise_band, reference_spread

register = template.Library()


@register.simple_tag
def noise_band_of(hardware_class: str) -> NoiseBand | None:
    return noise_band(hardware_class)


@register.simple_tag
def reference_spread_of(benchmark: Benchmark) -> ReferenceSpread | None:
    size = official_cohort_size(benchmark)
    return reference_spread(benchmark.hardware_class_id, size) if size else None
