"""The build freezer: while a score holds its engine, every other container there is paused.

What a container *is* decides, never its labels (an entrant sets any label in their own
Dockerfile): the scored container is spared by id, the deployment's own services by name
(``PODIUM_FREEZE_EXEMPT``). An engine event stream pauses whatever starts or is unpaused
during the score; :func:`thaw` unpauses what a dead holder left paused. Used by
``scoring.host.machine.hold`` and the reaper.

A freezer acts on a whole Docker Engine, so it is named by the engine's machine lock
(``scoring.host.machine.machine_key``, the engine's own ID), never by a scoring host's name:
two host names registered on one engine share that lock, so one's freezer never runs
beside (nor thaws) the other's.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.conf import settings

from scoring import engine

log = logging.getLogger(__name__)


def freeze_exempt() -> frozenset[str]:
    """The container names no score pauses: ``PODIUM_FREEZE_EXEMPT`` (comma-separated)."""
    value = settings.PODIUM_FREEZE_EXEMPT
    names = value.split(",") if isinstance(value, str) else value
    return frozenset(name.strip().lstrip("/") for name in names if name.strip())


def _names(container: dict[str, Any]) -> set[str]:
    """A listed container's names, without the engine's leading slash."""
    return {str(name).lstrip("/") for name in container.get("Names") or []}


class BuildFreezer:
    """Pauses every container on the engine whose lock ``lock`` is held (the scored
    one and the deployment's own excepted), and keeps them paused until :meth:`stop`.

    :meth:`start` subscribes to the engine's ``start`` and ``unpause`` events of every
    container first and then pauses every running container, so one that starts in
    between is caught by its event. A thread pauses each container that starts (or is
    unpaused) while frozen; a broken event stream is resubscribed, with a fresh sweep.
    Never paused: containers given to :meth:`spare` (by id; the scored container, spared
    before it starts) and containers whose name is in ``exempt`` (by default
    ``PODIUM_FREEZE_EXEMPT``). Labels exempt nothing. :meth:`stop` ends the watch and
    unpauses every paused container of the engine but the exempt ones (also any that a
    dead holder left paused), see :func:`thaw`.
    """

    def __init__(self, lock: str, exempt: frozenset[str] | None = None) -> None:
        self.lock = lock
        self.exempt = freeze_exempt() if exempt is None else exempt
        self.paused: set[str] = set()
        self.spared: set[str] = set()
        self._closing = threading.Event()
        self._stream: engine.EventStream | None = None
        self._thread: threading.Thread | None = None

    def spare(self, container_id: str) -> None:
        """Never pause ``container_id``. Call it before the container starts, so that its
        ``start`` event finds it spared already."""
        self.spared.add(container_id)

    def start(self) -> None:
        """Freeze; raises :class:`engine.EngineError` if the engine cannot be asked."""
        self._stream = self._subscribe()
        self._sweep()
        self._thread = threading.Thread(
            target=self._watch, daemon=True, name=f"build-freezer-{self.lock}"
        )
        self._thread.start()

    def stop(self) -> int:
        """Stop watching and unpause; the number of containers unpaused."""
        self._closing.set()
        if self._stream is not None:
            self._stream.close()
        if self._thread is not None:
            self._thread.join(10)
        return thaw(self.lock, self.exempt)

    def _subscribe(self) -> engine.EventStream:
        return engine.container_events(labels=[], actions=["start", "unpause"])

    def _sweep(self) -> None:
        for container in engine.list_containers([], status="running"):
            container_id = str(container["Id"])
            if container_id not in self.spared and not _names(container) & self.exempt:
                self._pause(container_id)

    def _pause(self, container_id: str) -> None:
        try:
            engine.pause(container_id)
        except engine.EngineError as exc:  # it stopped meanwhile, or is paused already
            log.debug("could not pause container %s: %s", container_id[:12], exc)
            return
        self.paused.add(container_id)

    def _on_event(self, event: dict[str, Any]) -> None:
        actor = event.get("Actor") or {}
        container_id = str(event.get("id") or actor.get("ID") or "")
        if not container_id or container_id in self.spared:
            return
        # The engine writes the container's own name over any label called "name".
        name = str((actor.get("Attributes") or {}).get("name") or "")
        if name not in self.exempt:
            self._pause(container_id)

    def _watch(self) -> None:
        stream = self._stream
        while not self._closing.is_set():
            if stream is not None:
                for event in stream:
                    if self._closing.is_set():
                        return
                    self._on_event(event)
            if self._closing.is_set():
                return
            log.warning("the engine's event stream ended; watching %s again", self.lock)
            try:
                stream = self._subscribe()
                self._stream = stream
                if self._closing.is_set():
                    stream.close()
                    return
                self._sweep()
            except engine.EngineError:
                log.exception("could not watch the containers of %s", self.lock)
                stream = None
                self._closing.wait(0.5)


def thaw(lock: str, exempt: frozenset[str] | None = None) -> int:
    """Unpause every paused container on the engine of the machine lock ``lock`` but those
    named in ``exempt`` (by default ``PODIUM_FREEZE_EXEMPT``); how many were unpaused.

    Only a score pauses containers on a scoring host, so every paused one there is a
    score's to thaw. Callers: the freezer at release, and the reaper while no score of
    any host name on this engine holds its lock (a holder that died left them paused).
    """
    exempt = freeze_exempt() if exempt is None else exempt
    count = 0
    for container in engine.list_containers([], status="paused"):
        if _names(container) & exempt:
            continue
        try:
            engine.unpause(str(container["Id"]))
            count += 1
        except engine.EngineError as exc:
            log.warning(
                "could not unpause container %s on %s: %s", str(container["Id"])[:12], lock, exc
            )
    return count
