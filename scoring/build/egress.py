"""The build network's egress policy as firewall rules (pure: no Django, no Docker).

Builds may reach the public internet, but not the Docker host, private, loopback,
link-local (cloud metadata included), CGNAT (Tailscale), multicast or reserved ranges.
Two chains per address family, reached only from the build bridge:

* ``PODIUM-BUILD-OUT``, jumped to first from ``DOCKER-USER`` (or from ``FORWARD`` where
  the engine made no ``DOCKER-USER`` for that family): packets a build sends through the
  host. Replies of admitted connections pass at once; DNS to the build resolvers and the
  operator's allow-list return to Docker's own chains; every blocked range is rejected.
* ``PODIUM-BUILD-IN``, jumped to first from ``INPUT``: packets a build sends to the host
  itself, at any of its addresses (the bridge gateway included). Only DNS to a resolver
  on the host passes; everything else is rejected. The allow-list opens forwarding
  only, never this chain: an entry admits destinations a build reaches *through* the
  host, and an entry that happens to cover one of the host's own addresses (or a
  whole range holding one) still opens no service on the host itself.

Rules match destination addresses, so the decision is made on the address a build
connects to, whatever a name resolved to. Rejecting (rather than dropping) tells a
build at once that a destination is closed, instead of letting it wait for a timeout.

:func:`expected` gives each chain's rules exactly as ``iptables -S`` prints them, so
:func:`problems` can compare a live listing line by line, and :func:`restore_input`
writes them for ``iptables-restore --noflush`` (one atomic commit per family).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

OUT_CHAIN = "PODIUM-BUILD-OUT"
IN_CHAIN = "PODIUM-BUILD-IN"
DOCKER_USER = "DOCKER-USER"

# Destinations no build may reach (besides the host itself, which PODIUM-BUILD-IN covers).
BLOCKED_V4 = (
    "0.0.0.0/8",  # "this network"
    "10.0.0.0/8",  # RFC 1918
    "100.64.0.0/10",  # CGNAT, Tailscale
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local, cloud metadata
    "172.16.0.0/12",  # RFC 1918
    "192.0.0.0/24",  # IETF protocol assignments
    "192.0.2.0/24",  # TEST-NET-1
    "192.88.99.0/24",  # 6to4 relay anycast
    "192.168.0.0/16",  # RFC 1918
    "198.18.0.0/15",  # benchmarking
    "198.51.100.0/24",  # TEST-NET-2
    "203.0.113.0/24",  # TEST-NET-3
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, and the limited broadcast 255.255.255.255
)
BLOCKED_V6 = (
    "::/128",  # unspecified
    "::1/128",  # loopback
    "::ffff:0.0.0.0/96",  # IPv4-mapped, reaching the IPv4 ranges (spelt as ip6tables does)
    "64:ff9b::/96",  # NAT64, well-known prefix
    "64:ff9b:1::/48",  # NAT64, local use
    "100::/64",  # discard
    "2001::/23",  # IETF protocol assignments (Teredo, benchmarking, ORCHID)
    "2001:db8::/32",  # documentation
    "2002::/16",  # 6to4: embeds any IPv4 address
    "3fff::/20",  # documentation
    "5f00::/16",  # segment routing SIDs
    "fc00::/7",  # unique local
    "fe80::/10",  # link-local
    "ff00::/8",  # multicast
)
DNS_PORT = 53


class PolicyError(ValueError):
    """A setting that cannot be turned into rules (the message names the entry)."""


@dataclass(frozen=True)
class Allow:
    """One allow-list entry: a network, and a TCP port unless the whole network is open."""

    network: IPNetwork
    port: int | None = None

    def __str__(self) -> str:
        if self.port is None:
            return str(self.network)
        address = self.network.network_address
        host = f"[{address}]" if address.version == 6 else str(address)
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class Policy:
    bridge: str
    dns: tuple[IPAddress, ...] = ()
    allow: tuple[Allow, ...] = ()


def parse_allow(text: str) -> tuple[Allow, ...]:
    """``PODIUM_BUILD_EGRESS_ALLOW``: comma-separated CIDRs, addresses, or address:port pairs
    (IPv6 in brackets with a port). Names are not accepted: rules match addresses, so
    whoever writes the setting resolves the names (``scripts/mirror-allowlist`` does)."""
    entries: list[Allow] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            entries.append(_parse_entry(entry))
        except ValueError as exc:
            raise PolicyError(
                f"build egress allow-list entry {entry!r} is not a CIDR, an address or an "
                f"address:port pair ({exc})"
            ) from exc
    return tuple(dict.fromkeys(entries))


def _parse_entry(entry: str) -> Allow:
    if entry.startswith("["):
        host, _, port = entry[1:].partition("]:")
        return Allow(ipaddress.ip_network(host), _port(port))
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return Allow(ipaddress.ip_network(host), _port(port))
    return Allow(ipaddress.ip_network(entry, strict=False))


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"port {text!r}")
    return int(text)


def parse_resolvers(resolv_conf: str) -> tuple[IPAddress, ...]:
    """The ``nameserver`` addresses of a resolv.conf, loopback ones left out (the engine
    does not hand those to containers)."""
    found: list[IPAddress] = []
    for line in resolv_conf.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            try:
                address = ipaddress.ip_address(words[1].split("%")[0])
            except ValueError:
                continue
            if not address.is_loopback:
                found.append(address)
    return tuple(dict.fromkeys(found))


def blocked(version: int) -> tuple[str, ...]:
    return BLOCKED_V4 if version == 4 else BLOCKED_V6


def _reject(version: int) -> str:
    return (
        "-j REJECT --reject-with icmp-admin-prohibited"
        if version == 4
        else "-j REJECT --reject-with icmp6-adm-prohibited"
    )


def _dest(network: IPNetwork) -> str:
    return f"-d {network.with_prefixlen}"


def _dns(policy: Policy, chain: str, version: int) -> list[str]:
    """``chain``'s rules that admit DNS (UDP and TCP) to the build resolvers."""
    rules: list[str] = []
    for resolver in policy.dns:
        if resolver.version != version:
            continue
        network = ipaddress.ip_network(resolver)
        for proto in ("udp", "tcp"):
            rules.append(
                f"-A {chain} {_dest(network)} -p {proto} -m {proto} --dport {DNS_PORT} -j RETURN"
            )
    return rules


def _allowed(policy: Policy, chain: str, version: int) -> list[str]:
    """``chain``'s rules that admit the operator's allow-list (forwarding chains only)."""
    rules: list[str] = []
    for entry in policy.allow:
        if entry.network.version != version:
            continue
        if entry.port is None:
            rules.append(f"-A {chain} {_dest(entry.network)} -j RETURN")
        else:
            rules.append(
                f"-A {chain} {_dest(entry.network)} -p tcp -m tcp --dport {entry.port} -j RETURN"
            )
    return rules


def expected(policy: Policy, version: int) -> dict[str, list[str]]:
    """Each chain's rules for IP ``version`` (4 or 6), in ``iptables -S`` form.

    The forwarding chain admits DNS to the resolvers and the allow-list; the host's own
    chain admits DNS alone (see the module's note on the allow-list).
    """
    out = [f"-A {OUT_CHAIN} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN"]
    out += _dns(policy, OUT_CHAIN, version) + _allowed(policy, OUT_CHAIN, version)
    out += [f"-A {OUT_CHAIN} -d {cidr} {_reject(version)}" for cidr in blocked(version)]
    inbound = _dns(policy, IN_CHAIN, version)
    inbound.append(f"-A {IN_CHAIN} {_reject(version)}")
    return {OUT_CHAIN: out, IN_CHAIN: inbound}


def jumps(policy: Policy, forward_parent: str) -> dict[str, str]:
    """Parent chain -> the jump rule that must be its first rule."""
    return {
        forward_parent: f"-A {forward_parent} -i {policy.bridge} -j {OUT_CHAIN}",
        "INPUT": f"-A INPUT -i {policy.bridge} -j {IN_CHAIN}",
    }


def restore_input(policy: Policy, version: int, forward_parent: str) -> str:
    """``iptables-restore --noflush`` input that (re)writes both chains and puts each jump
    first in its parent. Older copies of a jump stay further down (harmless; the caller
    removes them)."""
    lines = ["*filter"]
    chains = expected(policy, version)
    lines += [f":{chain} - [0:0]" for chain in chains]  # declaring a chain flushes it
    for parent, rule in jumps(policy, forward_parent).items():
        lines.append(f"-I {parent} 1 {rule.removeprefix(f'-A {parent} ')}")
    for rules in chains.values():
        lines += rules
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def problems(
    policy: Policy,
    version: int,
    forward_parent: str,
    listings: Mapping[str, Sequence[str] | None],
) -> list[str]:
    """What is missing or changed, one sentence each; ``[]`` when every rule is in place.

    ``listings`` maps a chain name to its ``iptables -S CHAIN`` lines (``None`` when the
    chain does not exist).
    """
    family = f"IPv{version}"
    found: list[str] = []
    for chain, rules in expected(policy, version).items():
        listing = listings.get(chain)
        if listing is None:
            found.append(f"{family}: chain {chain} is missing")
            continue
        present = [line for line in listing if line.startswith("-A ")]
        if present != rules:
            missing = [rule for rule in rules if rule not in present]
            extra = [rule for rule in present if rule not in rules]
            detail = "; ".join(
                [f"missing `{rule}`" for rule in missing[:3]]
                + [f"unexpected `{rule}`" for rule in extra[:3]]
            )
            found.append(f"{family}: chain {chain} differs ({detail or 'rule order changed'})")
    for parent, rule in jumps(policy, forward_parent).items():
        listing = listings.get(parent)
        first = next((line for line in listing or () if line.startswith("-A ")), None)
        if first != rule:
            found.append(f"{family}: `{rule}` is not the first rule of {parent}")
    return found
