"""Writes of calibration: a host's calibration recorded (and what a drift sets off), and
staff's answer to the runs a drift flagged.

Who calls what: a scoring worker records its own host's calibrations
(``scoring.run.calibration``, while it holds the machine); staff rescore or dismiss flagged
runs from the admin (which checks ``submissions.rescore_submission`` first).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.contests.models import HardwareClass
from portal.core import errors
from portal.hosts import noise
from portal.hosts.models import CalibrationFlag, HostCalibration, ScoringHost
from portal.hosts.selectors import noise_band_cache_key
from portal.hosts.services import host_drain
from portal.submissions.models import Run
from portal.submissions.staff import submission_rescore

log = logging.getLogger(__name__)

# uname -m -> the class's Docker platform, for a class row the first calibration creates.
_PLATFORMS = {
    "x86_64": HardwareClass.AMD64,
    "amd64": HardwareClass.AMD64,
    "aarch64": HardwareClass.ARM64,
    "arm64": HardwareClass.ARM64,
}


def _class_row(host: ScoringHost) -> HardwareClass | None:
    """The host's class row, locked. A class nobody described (a blank platform: a CPU
    class of the engine's default platform) gets its platform now, ``PODIUM_DOCKER_PLATFORM``
    else the host's own, so the first good calibration has somewhere to keep the reference
    and the class keeps the platform it was measured on. None, the row left as it is, when
    neither names a platform Podium knows."""
    row = HardwareClass.objects.select_for_update().get(name=host.hardware_class_id)
    if row.platform:
        return row
    choices = {value for value, _label in HardwareClass.PLATFORMS if value}
    configured = str(settings.PODIUM_DOCKER_PLATFORM)
    platform = configured if configured in choices else _PLATFORMS.get(host.architecture)
    if platform is None:
        return None
    row.platform = platform
    fields = ["platform"]
    if not row.description:
        row.description = f"Described by the first calibration (host {host.name})."
        fields.append("description")
    row.save(update_fields=fields)
    return row


def flagged_runs(host: ScoringHost, last_good: HostCalibration | None) -> list[Run]:
    """The host's timed scored runs that no good calibration vouches for: those started
    after its last good calibration finished (all of them when it never had one)."""
    runs = Run.objects.filter(
        host=host.name,
        purpose=Run.SCORE,
        status=Run.FINISHED,
        wall_time_ns__isnull=False,
    )
    if last_good is not None:
        runs = runs.filter(started_at__gte=last_good.finished_at)
    return list(runs.order_by("started_at", "pk"))


def calibration_record(
    *,
    host_name: str,
    trigger: str,
    started_at: dt.datetime,
    finished_at: dt.datetime,
    wall_ns: Sequence[int] = (),
    workload_sha256: str = "",
    error: str = "",
) -> HostCalibration:
    """Record one calibration of ``host_name`` and act on it; returns the row.

    ``error`` (the workload could not be measured: an engine or supervisor fault, a wrong
    checksum) records a calibration that is not ``ok`` and changes nothing else: a
    platform fault says nothing about the host's speed. So does a calibration whose own
    noise is past ``PODIUM_CALIBRATION_MAX_NOISE_PCT``: its median means nothing. Otherwise
    the repetitions' median is compared with the class's reference:

    - no reference yet: this calibration sets it (``ok``);
    - within ``PODIUM_CALIBRATION_DRIFT_PCT``: ``ok``;
    - past it: not ``ok``, every timed scored run of the host since its last good
      calibration gets a :class:`CalibrationFlag` for staff, and an ``active`` host is
      drained (``host_drain``, audited with the calibration as its reason).

    One transaction, the host's and the class's rows locked (two hosts of a class
    calibrating at once agree on who set the reference). Who calls: the host's scoring
    worker, holding its machine. ``NotFound`` for a host that is not registered.
    """
    limit = float(settings.PODIUM_CALIBRATION_DRIFT_PCT)
    with transaction.atomic():
        host = ScoringHost.objects.select_for_update().filter(name=host_name).first()
        if host is None:
            raise errors.NotFound(f"No scoring host is called {host_name!r}.")
        row = HostCalibration(
            host=host,
            hardware_class=host.hardware_class_id,  # the host's class at the time
            trigger=trigger,
            started_at=started_at,
            finished_at=finished_at,
            wall_ns=[int(wall) for wall in wall_ns],
            workload_sha256=workload_sha256,
        )
        if error or not wall_ns:
            row.ok = False
            row.reason = error or "no repetition was measured"
            row.save()
            return row
        row.median_ns = noise.median_ns(wall_ns)
        row.noise_pct = noise.noise_pct(wall_ns)
        max_noise = float(settings.PODIUM_CALIBRATION_MAX_NOISE_PCT)
        if row.noise_pct > max_noise:
            # Its own runs disagree by more than a drift would: its median can neither set
            # a reference nor show a drift (a machine busy beside it, say). Judged again at
            # the next claim (``noise.calibration_due``: "recheck").
            row.ok = False
            row.reason = (
                f"too noisy to judge: its runs spread ±{row.noise_pct:.2f} % "
                f"(limit ±{max_noise:g} %)"
            )
            row.save()
            return row
        hardware = _class_row(host)
        reference = hardware.calibration_reference_ns if hardware is not None else None
        if hardware is not None and reference is None:
            hardware.calibration_reference_ns = row.median_ns
            hardware.save(update_fields=["calibration_reference_ns"])
            reference = row.median_ns
            row.reason = "the first good calibration of its class: it set the class's reference"
        row.reference_ns = reference
        if reference is None:
            row.ok = True
            row.reason = "no class row to compare with (unknown platform)"
        else:
            row.drift_pct = noise.drift_pct(row.median_ns, reference)
            row.ok = not noise.drifted(row.drift_pct, limit)
            if not row.ok:
                row.reason = (
                    f"median {row.median_ns:,} ns is {row.drift_pct:+.2f} % off the "
                    f"{host.hardware_class_id} reference {reference:,} ns (limit ±{limit:g} %)"
                )
        last_good = (
            HostCalibration.objects.filter(host=host, ok=True).order_by("-finished_at").first()
        )
        row.save()
        if not row.ok:
            _act_on_drift(host, row, last_good)
        # The class's noise band is read again: now for this transaction's own reads, and
        # after the commit for everyone's (a reader in between cached the old rows).
        key = noise_band_cache_key(row.hardware_class)
        cache.delete(key)
        transaction.on_commit(lambda: cache.delete(key))
    return row


def _act_on_drift(
    host: ScoringHost, calibration: HostCalibration, last_good: HostCalibration | None
) -> None:
    now = timezone.now()
    runs = flagged_runs(host, last_good)
    CalibrationFlag.objects.bulk_create(
        [CalibrationFlag(run=run, calibration=calibration, created_at=now) for run in runs],
        ignore_conflicts=True,
    )
    log.error(
        "scoring host %s: calibration drifted (%s); %d run(s) flagged",
        host.name,
        calibration.reason,
        len(runs),
    )
    if host.status == ScoringHost.ACTIVE:
        host_drain(
            name=host.name,
            actor=None,
            reason=f"calibration drifted: {calibration.reason}; {len(runs)} run(s) flagged",
        )


def _resolve(
    flags: Any, *, actor: Any, resolution: str, note: str, now: dt.datetime
) -> list[CalibrationFlag]:
    resolved = list(flags)
    for flag in resolved:
        flag.resolved_at = now
        flag.resolved_by = actor if actor is not None and actor.is_authenticated else None
        flag.resolution = resolution
        flag.note = note
    CalibrationFlag.objects.bulk_update(
        resolved, ["resolved_at", "resolved_by", "resolution", "note"]
    )
    return resolved


def _open_flag(flag_id: int) -> CalibrationFlag:
    flag = (
        CalibrationFlag.objects.select_for_update()
        .select_related("run__submission", "calibration__host")
        .filter(pk=flag_id)
        .first()
    )
    if flag is None:
        raise errors.NotFound("No such calibration flag.")
    if flag.resolved_at is not None:
        raise errors.InvalidParameter(f"This flag was already {flag.resolution}.")
    return flag


def calibration_flag_rescore(
    *, flag_id: int, actor: Any, reason: str = "", origin: Origin = NOWHERE
) -> CalibrationFlag:
    """Rescore the flagged run's submission, free of charge, and resolve its flags.

    The rescore is staff's own (``submission_rescore``: a new scored run of a finished
    submission, nothing charged, the board keeping the entrant's best passing run). Every
    open flag on a run of the same submission is resolved with it, as one rescore
    answers them all. Audited twice in one transaction: ``submission.rescore`` and
    ``host.calibration_flag.rescore``. A flag already resolved, or a submission that
    cannot be rescored now (it is queued or running again), is ``InvalidParameter`` and
    changes nothing. Who may call: staff holding ``submissions.rescore_submission`` (the
    caller checks).
    """
    reason = reason.strip()
    with transaction.atomic():
        flag = _open_flag(flag_id)
        calibration = flag.calibration
        submission = flag.run.submission
        note = (
            f"calibration of host {calibration.host.name} drifted "
            f"({calibration.drift_pct or 0:+.2f} %)" + (f": {reason}" if reason else "")
        )
        submission_rescore(submission=submission, actor=actor, reason=note, origin=origin)
        others = CalibrationFlag.objects.select_for_update().filter(
            run__submission=submission, resolved_at__isnull=True
        )
        resolved = _resolve(
            others,
            actor=actor,
            resolution=CalibrationFlag.RESCORED,
            note=reason,
            now=timezone.now(),
        )
        audit_record(
            actor=actor,
            action="host.calibration_flag.rescore",
            target=f"submission:{submission.pk}",
            origin=origin,
            reason=reason,
            details={
                "flags": sorted(int(item.pk) for item in resolved),
                "run": int(flag.run.pk),
                "host": calibration.host.name,
                "calibration": int(calibration.pk),
                "drift_pct": calibration.drift_pct,
            },
        )
    flag.refresh_from_db()
    return flag


def calibration_flag_dismiss(
    *, flag_id: int, actor: Any, reason: str, origin: Origin = NOWHERE
) -> CalibrationFlag:
    """Resolve a flag without rescoring (staff judged the run's time sound); a reason is
    required. Audited (``host.calibration_flag.dismiss``). Who may call: staff holding
    ``submissions.rescore_submission`` (the caller checks)."""
    reason = reason.strip()
    if not reason:
        raise errors.InvalidParameter("Say why the flagged run's time stands.")
    with transaction.atomic():
        flag = _open_flag(flag_id)
        _resolve(
            [flag],
            actor=actor,
            resolution=CalibrationFlag.DISMISSED,
            note=reason,
            now=timezone.now(),
        )
        audit_record(
            actor=actor,
            action="host.calibration_flag.dismiss",
            target=f"submission:{flag.run.submission_id}",
            origin=origin,
            reason=reason,
            details={"flag": int(flag.pk), "run": int(flag.run.pk)},
        )
    flag.refresh_from_db()
    return flag
