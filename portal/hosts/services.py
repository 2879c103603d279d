"""Writes to the scoring fleet: registration, heartbeats, and staff's drain/resume/retire.

Who calls what: a scoring worker registers its own host when it starts and heartbeats
while it runs (``scoring/host/hosts.py``); staff drain, resume and retire hosts from the admin
(which checks ``hosts.manage_host`` first) or from ``manage.py hosts`` (an operator on a
host: no actor). The runner asks :func:`host_accepts_work` before it claims a run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.contests.hardware import hardware_class_row
from portal.contests.models import HardwareClass
from portal.core import errors
from portal.hosts.models import ScoringHost

MANAGE_HOST = "hosts.manage_host"

# What a host reports about its machine (scoring.host.hosts.machine_facts), field by field.
FACT_FIELDS = (
    "architecture",
    "cpu_model",
    "cpu_cores",
    "memory_bytes",
    "gpus",
    "docker_version",
    "kernel_version",
    "supervisor_sha256",
    "cpu_isolation",
)
NAME_MAX = ScoringHost._meta.get_field("name").max_length or 100
CLASS_MAX = HardwareClass._meta.get_field("name").max_length or 64


def _facts(facts: dict[str, Any]) -> dict[str, Any]:
    """The model's fields from a host's facts. Unknown keys are a caller's bug (ValueError);
    text longer than its column is cut, so odd hardware never keeps a host unregistered."""
    unknown = set(facts) - set(FACT_FIELDS)
    if unknown:
        raise ValueError(f"unknown host facts: {sorted(unknown)}")
    values: dict[str, Any] = {}
    for key, value in facts.items():
        field = ScoringHost._meta.get_field(key)
        max_length = getattr(field, "max_length", None)
        if isinstance(value, str) and max_length:
            value = value[:max_length]
        values[key] = value
    return values


def _checked_name(name: str, what: str = "host name") -> str:
    name = name.strip()
    if not name or len(name) > NAME_MAX:
        raise errors.InvalidParameter(f"A {what} is 1 to {NAME_MAX} characters.")
    return name


def host_register(
    *,
    name: str,
    hardware_class: str,
    facts: dict[str, Any],
    missing_tools: Sequence[str] = (),
) -> ScoringHost:
    """Create or update the host called ``name`` (upsert); returns its row.

    The hardware class, the machine's facts and its ``missing_tools`` (the host tools it
    lacks: then it refuses to register and takes no work) are overwritten and the
    heartbeat is set to now. A class nobody described gets its row, as a CPU class of the
    engine's default platform (``hardware_class_row``). ``status`` is never changed: a new
    host is ``active``, a draining host stays draining and a retired one stays retired
    (only staff move them). ``registered_at`` is the first registration's time.
    Idempotent; two workers registering the same name at once end with one row
    (``update_or_create`` locks it, and retries a lost insert race).
    """
    name = _checked_name(name)
    hardware_class = hardware_class.strip()
    if not hardware_class or len(hardware_class) > CLASS_MAX:
        raise errors.InvalidParameter(f"A hardware class is 1 to {CLASS_MAX} characters.")
    now = timezone.now()
    fields = {
        "hardware_class": hardware_class_row(hardware_class),
        "last_heartbeat_at": now,
        "missing_tools": sorted(set(missing_tools)),
        **_facts(facts),
    }
    host, _ = ScoringHost.objects.update_or_create(
        name=name, defaults=fields, create_defaults={**fields, "registered_at": now}
    )
    return host


def host_heartbeat(name: str, now: dt.datetime | None = None) -> bool:
    """Record that ``name`` is alive now; False when no such host is registered (the
    caller registers it again). One conditional update; the status is left alone."""
    updated = ScoringHost.objects.filter(name=name).update(last_heartbeat_at=now or timezone.now())
    return updated > 0


def host_accepts_work(name: str) -> bool:
    """Whether ``name`` may claim a new run: registered, ``active`` (neither draining nor
    retired) and lacking no host tool. Its heartbeat is not consulted: a host asks this
    about itself."""
    return ScoringHost.objects.filter(
        name=name, status=ScoringHost.ACTIVE, missing_tools=[]
    ).exists()


def _host_move(
    *,
    name: str,
    frm: tuple[str, ...],
    to: str,
    action: str,
    actor: Any,
    reason: str,
    origin: Origin,
) -> ScoringHost:
    """Move ``name`` from one of ``frm`` to ``to`` under a row lock, with its audit event
    in the same transaction. Unknown names are ``NotFound``; any other status is refused
    (``InvalidParameter``) and records nothing."""
    reason = reason.strip()
    with transaction.atomic():
        host = ScoringHost.objects.select_for_update().filter(name=name).first()
        if host is None:
            raise errors.NotFound(f"No scoring host is called {name!r}.")
        if host.status not in frm:
            raise errors.InvalidParameter(
                f"Host {name} is {host.status}; only a host that is {' or '.join(frm)} "
                f"can become {to}."
            )
        previous = host.status
        host.status = to
        host.save(update_fields=["status"])
        audit_record(
            actor=actor,
            action=action,
            target=f"host:{name}",
            origin=origin,
            reason=reason,
            details={"from": previous, "to": to, "hardware_class": host.hardware_class_id},
        )
    return host


def host_drain(*, name: str, actor: Any, reason: str = "", origin: Origin = NOWHERE) -> ScoringHost:
    """``active`` -> ``draining``: the host finishes the run it holds and claims no more.

    Audited (``host.drain``). ``actor`` is None from the command line.
    """
    return _host_move(
        name=name,
        frm=(ScoringHost.ACTIVE,),
        to=ScoringHost.DRAINING,
        action="host.drain",
        actor=actor,
        reason=reason,
        origin=origin,
    )


def host_resume(
    *, name: str, actor: Any, reason: str = "", origin: Origin = NOWHERE
) -> ScoringHost:
    """``draining`` or ``retired`` -> ``active``: the host claims work again (a retired
    host comes back to the fleet). Audited (``host.resume``)."""
    return _host_move(
        name=name,
        frm=(ScoringHost.DRAINING, ScoringHost.RETIRED),
        to=ScoringHost.ACTIVE,
        action="host.resume",
        actor=actor,
        reason=reason,
        origin=origin,
    )


def host_retire(
    *, name: str, actor: Any, reason: str = "", origin: Origin = NOWHERE
) -> ScoringHost:
    """``active`` or ``draining`` -> ``retired``: the host leaves the fleet; it claims no
    work, counts as offline and is no longer listed by the API. Its row (and history)
    stays; a worker starting on it again does not bring it back (``host_resume`` does).
    Audited (``host.retire``)."""
    return _host_move(
        name=name,
        frm=(ScoringHost.ACTIVE, ScoringHost.DRAINING),
        to=ScoringHost.RETIRED,
        action="host.retire",
        actor=actor,
        reason=reason,
        origin=origin,
    )
