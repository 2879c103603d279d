"""Podium's own test hosts for the build network tests and benchmark: listeners that a
build must not reach, and a "mirror" on an address of its own that the allow-list admits.

Every address here belongs to this machine (a network namespace made here, a Docker
network made here, the host's own addresses): no test traffic leaves it.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scoring import engine

BUSYBOX = "localhost/podium/busybox:1"


def free_port() -> int:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
        probe.bind(("::", 0))
        return int(probe.getsockname()[1])


class _DualStackServer(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


@contextmanager
def host_listener(body: bytes = b"host-listener") -> Iterator[int]:
    """An HTTP listener on the Docker host, bound to all its addresses (IPv4 and IPv6);
    yields its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = _DualStackServer(("::", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _inspect(container_id: str) -> dict[str, Any]:
    return dict(engine.client().api.inspect_container(container_id))


@contextmanager
def private_listener(name: str, subnet: str) -> Iterator[str]:
    """A listener container (busybox httpd on port 8080) on a second, private Docker
    network; yields its address."""
    engine.remove_network(name)
    engine.create_bridge_network(name, bridge=name[:15], subnet=subnet, mtu=0, icc=True)
    container_id = engine.create_container(
        image=BUSYBOX,
        command=[
            "sh",
            "-c",
            "mkdir -p /www && echo private-listener > /www/index.html && httpd -f -p 8080 -h /www",
        ],
        network_mode=name,
    )
    try:
        engine.start(container_id)
        address = str(_inspect(container_id)["NetworkSettings"]["Networks"][name]["IPAddress"])
        _wait_until_listening(address, 8080)
        yield address
    finally:
        engine.remove_container(container_id)
        engine.remove_network(name)


@dataclass(frozen=True)
class Mirror:
    address: str
    port: int
    folder: Path

    @property
    def allow(self) -> str:
        """Its allow-list entry."""
        return f"{self.address}:{self.port}"

    def url(self, name: str) -> str:
        return f"http://{self.address}:{self.port}/{name}"


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


@contextmanager
def mirror_host(folder: Path, *, octet: int = 7) -> Iterator[Mirror]:
    """An HTTP server serving ``folder`` from a network namespace of its own, at
    198.18.<octet>.2 behind a veth pair (the host side is .1): a stand-in for a package
    mirror that sits inside a blocked range. Needs root."""
    tag = f"{os.getpid() % 10000}-{octet}"
    namespace, host_side, inside = f"podium-mirror-{tag}", f"pmh{tag}", f"pmn{tag}"
    address, gateway = f"198.18.{octet}.2", f"198.18.{octet}.1"
    port = 8000 + octet
    _sh("ip", "netns", "add", namespace)
    server: subprocess.Popen[bytes] | None = None
    try:
        _sh("ip", "link", "add", host_side, "type", "veth", "peer", "name", inside)
        _sh("ip", "link", "set", inside, "netns", namespace)
        _sh("ip", "addr", "add", f"{gateway}/30", "dev", host_side)
        _sh("ip", "link", "set", host_side, "up")
        for command in (
            ["ip", "addr", "add", f"{address}/30", "dev", inside],
            ["ip", "link", "set", inside, "up"],
            ["ip", "link", "set", "lo", "up"],
            ["ip", "route", "add", "default", "via", gateway],
        ):
            _sh("ip", "netns", "exec", namespace, *command)
        server = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                namespace,
                "python3",
                "-m",
                "http.server",
                str(port),
                "--bind",
                address,
                "--directory",
                str(folder),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        mirror = Mirror(address, port, folder)
        _wait_until_serving(mirror)
        yield mirror
    finally:
        if server is not None:
            server.kill()
            server.wait(10)
        subprocess.run(["ip", "link", "del", host_side], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)


def _wait_until_listening(address: str, port: int, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((address, port), timeout=2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _wait_until_serving(mirror: Mirror, timeout_s: float = 15.0) -> None:
    (mirror.folder / "ping").write_text("mirror")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(mirror.url("ping"), timeout=2) as response:  # noqa: S310
                response.read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def host_addresses(version: int) -> list[str]:
    """The host's own addresses of one family, loopback and link-local left out."""
    found = subprocess.run(
        ["ip", "-o", f"-{version}", "addr", "show"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    addresses = [line.split()[3].split("/")[0] for line in found.splitlines()]
    return [a for a in addresses if not a.startswith(("127.", "::1", "fe80"))]
