"""The build network: Podium's own bridge for every build container, and the host
firewall rules (``scoring.build.egress``) that keep builds off the host and every private,
link-local, CGNAT, multicast or reserved destination.

- :func:`apply` (``manage.py build_network --apply``, run by ``make run`` and CI) creates
  the network through the engine when missing and installs the rules for IPv4 and IPv6
  with ``iptables-restore --noflush`` (each family in one commit). Applying again
  rewrites the same rules: it is idempotent.
- :func:`check` (``--check``; and before and during every build) reads the live rules
  with ``iptables-save`` and compares them line by line; it records what it found for
  the benchmark page, the API and staff (``build_network_record``).
- :func:`require` is what a build calls: it raises :class:`NotEnforced` unless every
  rule is in place, so a build never runs unfiltered.

Rules are installed with ``iptables``/``ip6tables``, the tools the Docker Engine itself
uses (whichever backend, legacy or nftables, they drive). Reading or changing them needs
root (CAP_NET_ADMIN in the host's network namespace).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError

from portal.environments.services import build_network_record
from scoring import engine
from scoring.build import egress
from scoring.host import machine

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_S = 20
RESOLV_CONF = Path("/etc/resolv.conf")
# Where systemd-resolved keeps the upstream servers when /etc/resolv.conf names its stub.
RESOLVED_CONF = Path("/run/systemd/resolve/resolv.conf")
_TOOLS = {
    4: ("iptables-save", "iptables-restore", "iptables"),
    6: ("ip6tables-save", "ip6tables-restore", "ip6tables"),
}


class NotEnforced(Exception):
    """The build network or its rules are not in place: no build may start."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Report:
    """One check: ``problems`` is empty exactly when everything is in place."""

    problems: list[str]
    policy: dict[str, Any] = field(default_factory=dict)

    @property
    def enforced(self) -> bool:
        return not self.problems


def resolvers() -> tuple[egress.IPAddress, ...]:
    """The resolvers builds send DNS to: ``PODIUM_BUILD_DNS``, else the host's own (the
    engine's DNS forwards containers' queries to the host's resolv.conf servers, and to
    systemd-resolved's upstream ones when that names only its loopback stub)."""
    if settings.PODIUM_BUILD_DNS:
        return tuple(
            ipaddress.ip_address(part.strip())
            for part in settings.PODIUM_BUILD_DNS.split(",")
            if part.strip()
        )
    for path in (RESOLV_CONF, RESOLVED_CONF):
        try:
            found = egress.parse_resolvers(path.read_text())
        except OSError:
            continue
        if found:
            return found
    return ()


def policy() -> egress.Policy:
    """The policy the settings ask for; raises :class:`egress.PolicyError` on a bad entry."""
    return egress.Policy(
        bridge=settings.PODIUM_BUILD_BRIDGE,
        dns=resolvers(),
        allow=egress.parse_allow(settings.PODIUM_BUILD_EGRESS_ALLOW),
    )


def _ipv6_enabled() -> bool:
    return Path("/proc/net/if_inet6").exists()


def _families() -> list[int]:
    return [4, 6] if _ipv6_enabled() else [4]


def _run(argv: list[str], *, stdin: str | None = None) -> str:
    completed = subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    if completed.returncode != 0:
        detail = (completed.stderr or completed.stdout).strip().splitlines()
        raise OSError(f"{argv[0]} failed: {detail[-1] if detail else completed.returncode}")
    return completed.stdout


def _listings(version: int) -> dict[str, list[str]]:
    """The filter table of one family: chain -> its ``-A`` lines (declared chains only)."""
    listings: dict[str, list[str]] = {}
    for line in _run([_TOOLS[version][0], "-t", "filter"]).splitlines():
        if line.startswith(":"):
            listings.setdefault(line[1:].split()[0], [])
        elif line.startswith("-A "):
            listings.setdefault(line.split()[1], []).append(line)
    return listings


def _forward_parent(listings: dict[str, list[str]]) -> str:
    """``DOCKER-USER`` where the engine made it for this family (it keeps that chain
    first in FORWARD), else ``FORWARD`` itself (the engine manages no IPv6 rules)."""
    return egress.DOCKER_USER if egress.DOCKER_USER in listings else "FORWARD"


def _host_addresses() -> list[str]:
    try:
        shown = json.loads(_run(["ip", "-j", "address", "show"]))
    except (OSError, ValueError, subprocess.SubprocessError):
        return []
    return [
        f"{info['local']}/{32 if info['family'] == 'inet' else 128}"
        for link in shown
        for info in link.get("addr_info", [])
        if info.get("family") in ("inet", "inet6") and info.get("local")
    ]


def _mtu() -> int:
    """``PODIUM_BUILD_MTU``, else the MTU of the interface of the default route."""
    if settings.PODIUM_BUILD_MTU:
        return int(settings.PODIUM_BUILD_MTU)
    try:
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 2 and fields[1] == "00000000":
                return int(Path(f"/sys/class/net/{fields[0]}/mtu").read_text())
    except (OSError, ValueError):
        pass
    return 0


def _network_problems() -> list[str]:
    """What differs between the engine's build network and the settings."""
    name = settings.PODIUM_BUILD_NETWORK
    found = engine.network_info(name)
    if found is None:
        return [f"the build network {name} does not exist"]
    options = found.get("Options") or {}
    subnets = [c.get("Subnet") for c in (found.get("IPAM") or {}).get("Config") or []]
    problems = []
    if found.get("Driver") != "bridge":
        problems.append(f"the build network {name} is not a bridge network")
    if options.get("com.docker.network.bridge.name") != settings.PODIUM_BUILD_BRIDGE:
        problems.append(f"the build network {name} is not on bridge {settings.PODIUM_BUILD_BRIDGE}")
    if options.get("com.docker.network.bridge.enable_icc") != "false":
        problems.append(f"containers on the build network {name} may reach each other")
    if subnets != [settings.PODIUM_BUILD_SUBNET]:
        problems.append(
            f"the build network {name} is on {subnets}, not {settings.PODIUM_BUILD_SUBNET}"
        )
    return problems


def _published(build_policy: egress.Policy | None) -> dict[str, Any]:
    """The policy as the benchmark page and the API show it."""
    return {
        "network": settings.PODIUM_BUILD_NETWORK,
        "subnet": settings.PODIUM_BUILD_SUBNET,
        "bridge": settings.PODIUM_BUILD_BRIDGE,
        "blocked": [
            *egress.BLOCKED_V4,
            *(egress.BLOCKED_V6 if _ipv6_enabled() else ()),
            *_host_addresses(),
        ],
        "dns": [str(address) for address in build_policy.dns] if build_policy else [],
        "allowed": [str(entry) for entry in build_policy.allow] if build_policy else [],
    }


def inspect() -> Report:
    """Compare the engine's network and the live rules with the settings (records nothing)."""
    try:
        build_policy = policy()
    except (egress.PolicyError, ValueError) as exc:
        return Report([f"the settings cannot be enforced: {exc}"], _published(None))
    problems: list[str] = []
    try:
        problems += _network_problems()
    except engine.EngineError as exc:
        problems.append(f"the container engine did not answer: {exc}")
    for version in _families():
        try:
            listings = _listings(version)
        except (OSError, subprocess.SubprocessError) as exc:
            problems.append(f"IPv{version}: the firewall rules cannot be read ({exc})")
            continue
        problems += egress.problems(
            build_policy, version, _forward_parent(listings), dict(listings)
        )
    return Report(problems, _published(build_policy))


def _host() -> str:
    try:
        return machine.scoring_host()
    except engine.EngineError:
        return "unknown"


def record(report: Report) -> None:
    """Keep the latest check for the page, the API and staff; a database error is logged
    (the check's answer stands)."""
    try:
        build_network_record(
            host=_host(), enforced=report.enforced, problems=report.problems, policy=report.policy
        )
    except DatabaseError as exc:
        log.warning("could not record the build network check: %s", exc)


def check() -> Report:
    """Check everything and record the result."""
    report = inspect()
    record(report)
    return report


def require() -> None:
    """Raise :class:`NotEnforced` (with what is missing) unless every rule is in place."""
    report = check()
    if not report.enforced:
        raise NotEnforced(report.problems)


def apply() -> Report:
    """Create the build network when missing and (re)install the rules; then inspect
    them (the caller records the result).

    Raises :class:`egress.PolicyError` for settings that cannot be turned into rules,
    :class:`engine.EngineError` when the engine fails and :class:`OSError` when the
    firewall tools do.
    """
    build_policy = policy()
    if engine.network_info(settings.PODIUM_BUILD_NETWORK) is None:
        engine.create_bridge_network(
            settings.PODIUM_BUILD_NETWORK,
            bridge=settings.PODIUM_BUILD_BRIDGE,
            subnet=settings.PODIUM_BUILD_SUBNET,
            mtu=_mtu(),
        )
    for version in _families():
        _save, restore, tool = _TOOLS[version]
        parent = _forward_parent(_listings(version))
        _run(
            [restore, "--noflush", "-w"], stdin=egress.restore_input(build_policy, version, parent)
        )
        for chain, rule in egress.jumps(build_policy, parent).items():
            _remove_later_copies(tool, version, chain, rule)
    return inspect()


def _remove_later_copies(tool: str, version: int, chain: str, rule: str) -> None:
    """Delete copies of ``rule`` after the first one in ``chain`` (from an earlier apply)."""
    rules = _listings(version).get(chain, [])
    numbers = [index + 1 for index, line in enumerate(rules) if line == rule]
    for number in reversed(numbers[1:]):
        _run([tool, "-w", "-D", chain, str(number)])


def remove() -> None:
    """Take the rules out again (tests and benchmarks measure the network without them)."""
    build_policy = policy()
    for version in _families():
        listings = _listings(version)
        tool = _TOOLS[version][2]
        for chain, rule in egress.jumps(build_policy, _forward_parent(listings)).items():
            for _ in range(listings.get(chain, []).count(rule)):
                _run([tool, "-w", "-D", chain, *rule.split()[2:]])
        for chain in (egress.OUT_CHAIN, egress.IN_CHAIN):
            if chain in listings:
                _run([tool, "-w", "-F", chain])
                _run([tool, "-w", "-X", chain])
