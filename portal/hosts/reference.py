"""Writes of the reference kit's spread: a measurement recorded, and which one is due.

A benchmark's reference kit (its starter kit image, unchanged) is run over and over on a
scoring host of its class, on the benchmark's official cohort (``scoring.run.reference``).
How much slower one of those honest runs was than another (``noise.spread_pct``) is the
verification tolerance of the class at that cohort size (``rules.verification_decision``):
a short cohort's runs spread far more than a long one's, and more than the calibration
workload's. Who calls what: a scoring worker records its own measurements, holding the
machine, when one is due (:func:`reference_due`) or staff asked for one
(``manage.py reference_spread``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from django.core.cache import cache
from django.db import transaction

from portal.contests.models import Benchmark
from portal.hosts import noise
from portal.hosts.models import ReferenceSpread
from portal.hosts.selectors import reference_spread_cache_key


def reference_spread_record(
    *,
    benchmark: Benchmark,
    host: str,
    image: str,
    cohort_size: int,
    started_at: dt.datetime,
    finished_at: dt.datetime,
    wall_ns: Sequence[int] = (),
    error: str = "",
) -> ReferenceSpread:
    """Record one measurement of ``benchmark``'s reference kit on ``host``; returns the row.

    ``error`` (the kit could not be measured, or a run of it did not pass) or no run at
    all records a row that is not ``ok``, which changes no tolerance: the latest ``ok``
    row still applies. Otherwise the row's spread is the tolerance of the benchmark's
    class at ``cohort_size`` from now on (the cached figure is dropped).
    """
    row = ReferenceSpread(
        hardware_class=benchmark.hardware_class_id,
        cohort_size=cohort_size,
        benchmark=benchmark,
        host=host,
        image=image,
        started_at=started_at,
        finished_at=finished_at,
        wall_ns=[int(wall) for wall in wall_ns],
    )
    if error or not wall_ns:
        row.reason = error or "no run was measured"
        row.save()
        return row
    row.median_ns = noise.median_ns(wall_ns)
    row.spread_pct = round(noise.spread_pct(wall_ns), 2)
    row.ok = True
    with transaction.atomic():
        row.save()
        key = reference_spread_cache_key(row.hardware_class, cohort_size)
        cache.delete(key)
        transaction.on_commit(lambda: cache.delete(key))
    return row


def reference_due(
    *, last_finished_at: dt.datetime | None, now: dt.datetime, every_s: float
) -> bool:
    """Whether a measurement is due (pure): none was ever made, or the latest (good or
    not) is ``every_s`` seconds old; ``every_s`` 0 measures only when asked."""
    if every_s <= 0:
        return False
    return last_finished_at is None or (now - last_finished_at).total_seconds() >= every_s


def reference_image(hardware_class: str, cohort_size: int) -> str:
    """The image a new measurement of a class and cohort size runs: the one its latest
    measurement ran ("" when none was ever made: staff name it the first time, or a
    campaign's pinned baseline is its kit; ``scoring.run.reference``)."""
    return (
        ReferenceSpread.objects.filter(hardware_class=hardware_class, cohort_size=cohort_size)
        .exclude(image="")
        .values_list("image", flat=True)
        .first()
        or ""
    )
