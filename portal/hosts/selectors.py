"""Reads of the scoring fleet: whether a host is online, how many of a class are, and the
fleet as the API and the staff tools show it.

*Online* is read from the heartbeat: a host whose last heartbeat is older than
``PODIUM_HOST_STALE_S`` is offline, whatever its status says.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, OuterRef, Subquery

from portal.hosts import noise
from portal.hosts.models import HostCalibration, ReferenceSpread, ScoringHost
from portal.submissions.models import Run, Submission

ONLINE = "online"
DRAINING = "draining"
OFFLINE = "offline"
STATES = (ONLINE, DRAINING, OFFLINE)

# What waits for a scoring host: a scored run, or a verification run.


def stale_after() -> dt.timedelta:
    return dt.timedelta(seconds=settings.PODIUM_HOST_STALE_S)


def host_state(host: ScoringHost, now: dt.datetime) -> str:
    """``offline`` (retired, or no heartbeat within the stale time), else ``draining`` or
    ``online`` as its status says."""
    if host.status == ScoringHost.RETIRED or host.last_heartbeat_at < now - stale_after():
        return OFFLINE
    if host.status == ScoringHost.DRAINING:
        return DRAINING
    return ONLINE


def host_state_label(host: ScoringHost, now: dt.datetime) -> str:
    """For staff: :func:`host_state`, except that a retired host says ``retired``."""
    return ScoringHost.RETIRED if host.status == ScoringHost.RETIRED else host_state(host, now)


def hosts_online(hardware_class: str, now: dt.datetime) -> int:
    """How many ``active`` hosts of ``hardware_class`` heartbeat within the stale time
    (draining, retired and silent hosts do not count, nor hosts that lack a host tool).
    One query."""
    return ScoringHost.objects.filter(
        hardware_class__name=hardware_class,
        status=ScoringHost.ACTIVE,
        last_heartbeat_at__gte=now - stale_after(),
        missing_tools=[],
    ).count()


def queue_lengths() -> dict[str, int]:
    """Per hardware class: official and practice submissions waiting for a scoring host
    (``queued``, or ``verifying``), plus final-rerun runs not yet claimed, by their
    benchmark's class. Two queries for all classes; a class with nothing waiting is absent."""
    waiting: Counter[str] = Counter()
    submissions = (
        Submission.objects.filter(
            status__in=Submission.WAITING_FOR_SCORE,
            kind__in=(Submission.OFFICIAL, Submission.PRACTICE),
        )
        .values("benchmark__hardware_class")
        .annotate(waiting=Count("id"))
        .order_by()
    )
    for row in submissions:
        waiting[str(row["benchmark__hardware_class"])] += int(row["waiting"])
    finals = (
        Run.objects.filter(purpose=Run.FINAL, status=Run.QUEUED)
        .values("submission__benchmark__hardware_class")
        .annotate(waiting=Count("id"))
        .order_by()
    )
    for row in finals:
        waiting[str(row["submission__benchmark__hardware_class"])] += int(row["waiting"])
    return dict(waiting)


@dataclass(frozen=True)
class HostRow:
    """One host as ``GET /api/v1/hosts/`` shows it: its machine and how busy its class is,
    never what it runs or for whom."""

    name: str
    hardware_class: str
    architecture: str
    gpus: list[str]
    cpu_cores: int
    memory_bytes: int
    state: str
    last_heartbeat_at: dt.datetime
    queue_length: int
    # The latest calibration: {"median_ns", "noise_pct", "at", "ok"}; None before the first.
    calibration: dict[str, Any] | None = None
    # The host tools it lacks (it refused to register and takes no run); [] when none.
    missing_tools: list[str] = field(default_factory=list)
    # Where its scored runs compute (portal/core/cpus.py): {"shared", "scoring_cpus",
    # "other_cpus", "reason"}; None until it reports it.
    cpu_isolation: dict[str, Any] | None = None


def gpu_names(gpus: Any) -> list[str]:
    """The GPU models of a host's ``gpus`` facts, one entry per GPU (no serials or UUIDs)."""
    if not isinstance(gpus, list):
        return []
    return [str(gpu.get("name", "")) if isinstance(gpu, dict) else str(gpu) for gpu in gpus]


def host_rows(now: dt.datetime) -> list[HostRow]:
    """Every host that is not retired, by class then name, with its state and the length
    of its class's queue. Two queries, however many hosts and classes."""
    waiting = queue_lengths()
    hosts = (
        ScoringHost.objects.exclude(status=ScoringHost.RETIRED)
        .annotate(**_latest_calibration_fields())
        .order_by("hardware_class_id", "name")
    )
    return [
        HostRow(
            name=host.name,
            hardware_class=host.hardware_class_id,
            architecture=host.architecture,
            gpus=gpu_names(host.gpus),
            cpu_cores=host.cpu_cores,
            memory_bytes=host.memory_bytes,
            state=host_state(host, now),
            last_heartbeat_at=host.last_heartbeat_at,
            queue_length=waiting.get(host.hardware_class_id, 0),
            calibration=_latest_calibration(host),
            missing_tools=[str(tool) for tool in host.missing_tools or []],
            cpu_isolation=host.cpu_isolation or None,
        )
        for host in hosts
    ]


def memory_text(memory_bytes: int) -> str:
    """Memory for people: ``62.8 GiB``."""
    return f"{memory_bytes / 2**30:.1f} GiB"


# Calibration ---------------------------------------------------------------------------


def _latest_calibration_fields() -> dict[str, Subquery]:
    """Annotations with a host's latest calibration (one correlated subquery per field,
    so the hosts list stays one query however many hosts)."""
    latest = HostCalibration.objects.filter(host=OuterRef("pk")).order_by("-finished_at", "-id")
    return {
        f"calibration_{name}": Subquery(latest.values(name)[:1])
        for name in ("id", "median_ns", "noise_pct", "finished_at", "ok")
    }


def _latest_calibration(host: ScoringHost) -> dict[str, Any] | None:
    values = host.__dict__
    if values.get("calibration_id") is None:
        return None
    noise_value = values.get("calibration_noise_pct")
    return {
        "median_ns": values.get("calibration_median_ns"),
        "noise_pct": None if noise_value is None else round(float(noise_value), 3),
        "at": values["calibration_finished_at"],
        "ok": bool(values["calibration_ok"]),
    }


def latest_calibration(host_name: str) -> HostCalibration | None:
    return (
        HostCalibration.objects.filter(host__name=host_name).order_by("-finished_at", "-id").first()
    )


def calibration_due(host_name: str, now: dt.datetime) -> str:
    """Why ``host_name`` must calibrate before its next claim ("" when it need not): see
    ``noise.calibration_due``. Runs count from the start of its latest calibration: every
    run of the host (scores and verifications) started since. Two queries at most."""
    last = latest_calibration(host_name)
    runs_since = 0
    if last is not None:
        runs_since = Run.objects.filter(host=host_name, started_at__gte=last.started_at).count()
    return noise.calibration_due(
        last_finished_at=last.finished_at if last is not None else None,
        last_ok=last.ok if last is not None else False,
        runs_since=runs_since,
        now=now,
        every_runs=int(settings.PODIUM_CALIBRATE_EVERY_RUNS),
        every_s=float(settings.PODIUM_CALIBRATE_EVERY_S),
    )


@dataclass(frozen=True)
class NoiseBand:
    """A class's timing noise as published: ± ``percent`` from ``runs`` calibrations."""

    hardware_class: str
    percent: float
    runs: int


NOISE_BAND_CACHE_S = 300


def noise_band_cache_key(hardware_class: str) -> str:
    return f"podium:noise-band:{hardware_class}"


def noise_band(hardware_class: str) -> NoiseBand | None:
    """The timing noise of ``hardware_class`` (``noise.noise_band_pct``) over its latest
    ``PODIUM_NOISE_BAND_CALIBRATIONS`` good calibrations on hosts that are ``active`` now;
    None before the first. One query, then cached (a new calibration of the class clears
    it; a host's change of status shows within ``NOISE_BAND_CACHE_S``)."""
    key = noise_band_cache_key(hardware_class)
    cached = cache.get(key)
    if cached is not None:
        return cached or None  # False: known to have none
    walls = list(
        HostCalibration.objects.filter(
            hardware_class=hardware_class,
            ok=True,
            host__hardware_class__name=hardware_class,
            host__status=ScoringHost.ACTIVE,
        )
        .order_by("-finished_at", "-id")
        .values_list("wall_ns", flat=True)[: int(settings.PODIUM_NOISE_BAND_CALIBRATIONS)]
    )
    percent = noise.noise_band_pct([list(map(int, wall)) for wall in walls if wall])
    band = (
        None
        if percent is None
        else NoiseBand(hardware_class=hardware_class, percent=round(percent, 2), runs=len(walls))
    )
    cache.set(key, band or False, NOISE_BAND_CACHE_S)
    return band


def noise_band_percent(hardware_class: str) -> float | None:
    """The class's published noise band in percent (:func:`noise_band`); None before any."""
    band = noise_band(hardware_class)
    return band.percent if band else None


def reference_spread_cache_key(hardware_class: str, cohort_size: int) -> str:
    return f"podium:reference-spread:{hardware_class}:{cohort_size}"


def reference_spread(hardware_class: str, cohort_size: int) -> ReferenceSpread | None:
    """The latest good measurement of the reference kit's spread on ``hardware_class`` at
    ``cohort_size`` images (``portal.hosts.reference``); None before the first. One query,
    then cached (a new measurement of the class and size clears it)."""
    key = reference_spread_cache_key(hardware_class, cohort_size)
    cached = cache.get(key)
    if cached is not None:
        return cached or None  # False: known to have none
    row = (
        ReferenceSpread.objects.filter(
            hardware_class=hardware_class, cohort_size=cohort_size, ok=True
        )
        .order_by("-finished_at", "-id")
        .first()
    )
    cache.set(key, row or False, NOISE_BAND_CACHE_S)
    return row


def reference_spread_percent(hardware_class: str, cohort_size: int) -> float | None:
    """The reference kit's measured spread in percent (:func:`reference_spread`); None
    where none was measured on the class at that cohort size."""
    row = reference_spread(hardware_class, cohort_size)
    return row.spread_pct if row else None


@dataclass(frozen=True)
class ClassCpuIsolation:
    """Where the scored runs of a class compute, over its ``active`` hosts that reported
    it: ``split`` of ``hosts`` keep CPUs of their own for runs (``scoring_cpus``: their
    list when every one of them says the same, else ""); the others share every CPU, for
    the ``reasons`` they gave."""

    hosts: int
    split: int
    scoring_cpus: str
    reasons: list[str]

    @property
    def shared(self) -> int:
        return self.hosts - self.split


def class_cpu_isolation(hardware_class: str) -> ClassCpuIsolation | None:
    """The benchmark page's line on CPU isolation (``ScoringHost.cpu_isolation``); None
    while no ``active`` host of the class reported it. One query."""
    reported = [
        facts
        for facts in ScoringHost.objects.filter(
            hardware_class__name=hardware_class, status=ScoringHost.ACTIVE
        ).values_list("cpu_isolation", flat=True)
        if isinstance(facts, dict) and facts
    ]
    if not reported:
        return None
    split = [facts for facts in reported if not facts.get("shared")]
    lists = {str(facts.get("scoring_cpus") or "") for facts in split}
    reasons = sorted({str(facts.get("reason") or "") for facts in reported if facts.get("shared")})
    return ClassCpuIsolation(
        hosts=len(reported),
        split=len(split),
        scoring_cpus=lists.pop() if len(lists) == 1 else "",
        reasons=[reason for reason in reasons if reason],
    )
