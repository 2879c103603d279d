"""The one heartbeat: a daemon thread that beats every ``interval_s`` until it is stopped
or what it keeps is gone, on a database connection of its own.

Three things beat with it, each saying only what one beat does (:meth:`Heartbeat.beat`):

- the machine lock (``scoring.host.machine.LockHeartbeat``): renews the engine's lock and
  the held run's lease every ``PODIUM_LEASE_S / 3`` seconds; it is lost when a renewal
  finds the lock taken over;
- the host's registration (``scoring.host.hosts.HostHeartbeat``): registers the host,
  then records its heartbeat every ``PODIUM_HOST_HEARTBEAT_S``, beating once at its start
  and reopening a connection the database dropped before each beat; never lost;
- a running round (``scoring.campaign.rounds.RoundHeartbeat``): ``round_heartbeat`` every
  minute; lost when the round is no longer the host's.

How each goes on is this class's:

- a beat that finds what it keeps gone sets ``lost`` (and does what that takes), and
  the thread ends after that beat;
- a beat that fails on a database error is logged (``failure``) and tried again at the
  next beat: a lease or a heartbeat is still good until it goes stale;
- :meth:`Heartbeat.stop` ends the thread at its next wait and waits for it (``join_s``);
  the thread closes its database connections when it ends.
"""

from __future__ import annotations

import logging
import threading

from django.db import DatabaseError, close_old_connections, connections

log = logging.getLogger(__name__)


class Heartbeat(threading.Thread):
    """Calls :meth:`beat` every ``interval_s`` seconds (first after one interval, or at
    once with ``at_start``) until :meth:`stop`, or until a beat sets ``lost``.

    ``reconnect``: reopen a connection the database dropped before each beat. ``failure``:
    the log line of a beat that failed on a database error. ``join_s``: how long
    :meth:`stop` waits for the thread.
    """

    def __init__(
        self,
        *,
        name: str,
        interval_s: float,
        failure: str,
        at_start: bool = False,
        reconnect: bool = False,
        join_s: float = 30.0,
    ) -> None:
        super().__init__(daemon=True, name=name)
        self.interval_s = interval_s
        self.failure = failure
        self.at_start = at_start
        self.reconnect = reconnect
        self.join_s = join_s
        # Set by a beat that found what this heartbeat keeps gone; the thread then ends.
        self.lost = threading.Event()
        self._stopping = threading.Event()

    def beat(self) -> None:
        """One beat: keep what this heartbeat keeps; set ``lost`` when it is gone."""
        raise NotImplementedError

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping.is_set()

    def _beat(self) -> bool:
        """One beat, with this heartbeat's rules; whether the thread goes on."""
        if self.reconnect:
            # A connection the database dropped since the last beat is reopened.
            close_old_connections()
        try:
            self.beat()
        except DatabaseError:
            log.exception("%s", self.failure)
        return not self.lost.is_set()

    def run(self) -> None:
        try:
            if self.at_start and not self._beat():
                return
            while not self._stopping.wait(self.interval_s):
                if not self._beat():
                    return
        finally:
            connections.close_all()

    def stop(self) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(self.join_s)
