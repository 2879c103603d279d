"""The machine lock of each Docker Engine, as rows: ``MachineLease``, one per engine
(keyed by ``scoring.host.machine.machine_key``, whatever host names drive that engine).

A holder takes it with one conditional UPDATE (free, or its holder's lease expired),
keeps it by pushing ``expires_at`` forward (its heartbeat, which renews its run's lease
too), and frees it conditionally on still holding it; the reaper frees a lock whose
holder stopped heartbeating. ``scoring.host.machine`` holds and heartbeats; builds ask
:func:`machine_held` whether their host is frozen.
"""

from __future__ import annotations

import datetime as dt

from django.db import IntegrityError, models, transaction
from django.utils import timezone

from portal.hosts.models import MachineLease
from portal.submissions.models import Run


def machine_lease_acquire(*, host: str, holder: str, lease_s: float) -> bool:
    """Take ``host``'s machine lock for ``holder`` if it is free or its lease expired.

    One conditional UPDATE decides, so two workers racing for it cannot both win. The
    row is created on first use. A lock taken over from an expired holder is simply
    reassigned: that holder has stopped heartbeating and is presumed dead.
    """
    now = timezone.now()
    try:
        with transaction.atomic():
            MachineLease.objects.get_or_create(host=host)
    except IntegrityError:
        pass  # created by a concurrent first caller
    with transaction.atomic():
        taken = (
            MachineLease.objects.filter(host=host)
            .filter(models.Q(holder="") | models.Q(expires_at__lt=now))
            .update(
                holder=holder,
                run=None,
                acquired_at=now,
                heartbeat_at=now,
                expires_at=now + dt.timedelta(seconds=lease_s),
            )
        )
    return bool(taken)


def machine_lease_renew(
    *, host: str, holder: str, lease_s: float, run_id: int | None = None
) -> bool:
    """The holder's heartbeat: push the lock's expiry (and its run's lease) forward.

    False when ``holder`` no longer holds the lock (it expired and was taken over, or was
    freed by the reaper): the caller has lost it and must stop. The run's lease is
    renewed only while the run is staging or running.
    """
    now = timezone.now()
    expires = now + dt.timedelta(seconds=lease_s)
    with transaction.atomic():
        kept = MachineLease.objects.filter(host=host, holder=holder).update(
            heartbeat_at=now, expires_at=expires, run_id=run_id
        )
        if kept and run_id is not None:
            Run.objects.filter(pk=run_id, status__in=[Run.STAGING, Run.RUNNING]).update(
                lease_expires_at=expires
            )
    return bool(kept)


def machine_lease_release(*, host: str, holder: str) -> bool:
    """Free the lock, only if ``holder`` still holds it (a taken-over lock is not touched)."""
    with transaction.atomic():
        freed = MachineLease.objects.filter(host=host, holder=holder).update(
            holder="", run=None, expires_at=None
        )
    return bool(freed)


def machine_lease_free_expired(*, host: str, now: dt.datetime | None = None) -> str:
    """The reaper's half: free ``host``'s lock if its holder stopped heartbeating.

    Returns the dead holder's name ("" when there was none). Conditional on the expiry
    it read, so a holder that renewed meanwhile keeps its lock.
    """
    now = now or timezone.now()
    with transaction.atomic():
        lease = (
            MachineLease.objects.filter(host=host, expires_at__lt=now).exclude(holder="").first()
        )
        if lease is None:
            return ""
        freed = MachineLease.objects.filter(
            pk=lease.pk, holder=lease.holder, expires_at=lease.expires_at
        ).update(holder="", run=None, expires_at=None)
    return lease.holder if freed else ""


def machine_lease_holder(host: str) -> tuple[str, int | None]:
    """Who holds ``host``'s lock and for which run: ``(holder, run id)``, ``("", None)``
    when it is free or was never taken (whether the lease is still live is not asked)."""
    row = MachineLease.objects.filter(host=host).values_list("holder", "run_id").first()
    return (str(row[0]), row[1]) if row else ("", None)


def machine_held(host: str, now: dt.datetime | None = None) -> bool:
    """Whether a live score holds ``host``'s lock (builds are frozen while it does)."""
    now = now or timezone.now()
    return MachineLease.objects.filter(host=host, expires_at__gte=now).exclude(holder="").exists()
