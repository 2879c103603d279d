"""A real SMTP server (aiosmtpd) on a free loopback port, keeping every message it accepts."""

from __future__ import annotations

import email
import email.policy
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller


class Collector:
    """An aiosmtpd handler that keeps every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], EmailMessage]] = []
        self.port = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        self.messages.append((list(envelope.rcpt_tos), parsed))
        return "250 Message accepted for delivery"


def closed_port() -> int:
    """A loopback port nothing listens on (free at the time of asking)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def smtp_server() -> Iterator[Collector]:
    """Serve SMTP on 127.0.0.1 (``Collector.port``) for the block."""
    collector = Collector()
    collector.port = closed_port()
    controller = Controller(collector, hostname="127.0.0.1", port=collector.port)
    controller.start()
    try:
        yield collector
    finally:
        controller.stop()
