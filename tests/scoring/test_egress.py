"""The build egress policy as rules (pure): what is blocked, admitted, and found missing."""

from __future__ import annotations

import ipaddress

import pytest

from scoring.build import egress
from scoring.build.egress import IN_CHAIN, OUT_CHAIN

RESOLVER = ipaddress.ip_address("10.255.255.53")
POLICY = egress.Policy(
    bridge="podium-build0",
    dns=(RESOLVER,),
    allow=egress.parse_allow("203.0.113.80:80, 198.18.0.0/30,[fd00::8]:3128"),
)


def test_the_allow_list_reads_cidrs_addresses_and_address_port_pairs() -> None:
    entries = egress.parse_allow(" 203.0.113.80:443,10.1.2.0/24 ,192.0.2.7,[2001:db8::1]:8080,,")

    assert [str(entry) for entry in entries] == [
        "203.0.113.80:443",
        "10.1.2.0/24",
        "192.0.2.7/32",
        "[2001:db8::1]:8080",
    ]


@pytest.mark.parametrize(
    "entry", ["mirror.example.org:80", "203.0.113.80:0", "203.0.113.80:http", "10.0.0.0/33", "*"]
)
def test_an_allow_list_entry_that_is_not_an_address_is_refused_by_name(entry: str) -> None:
    with pytest.raises(egress.PolicyError, match=repr(entry).replace("*", r"\*")):
        egress.parse_allow(f"203.0.113.80:80,{entry}")


def test_resolvers_come_from_resolv_conf_without_loopback_stubs() -> None:
    text = "# comment\nnameserver 127.0.0.53\nnameserver 10.255.255.53\nnameserver fe80::1%eth0\n"

    assert [str(a) for a in egress.parse_resolvers(text)] == ["10.255.255.53", "fe80::1"]


def test_every_blocked_range_is_rejected_after_what_is_admitted() -> None:
    rules = egress.expected(POLICY, 4)[OUT_CHAIN]

    assert rules[0].endswith("--ctstate RELATED,ESTABLISHED -j RETURN")
    admitted = [rule for rule in rules[1:] if rule.endswith("-j RETURN")]
    assert admitted == [
        f"-A {OUT_CHAIN} -d 10.255.255.53/32 -p udp -m udp --dport 53 -j RETURN",
        f"-A {OUT_CHAIN} -d 10.255.255.53/32 -p tcp -m tcp --dport 53 -j RETURN",
        f"-A {OUT_CHAIN} -d 203.0.113.80/32 -p tcp -m tcp --dport 80 -j RETURN",
        f"-A {OUT_CHAIN} -d 198.18.0.0/30 -j RETURN",
    ]
    rejected = [rule.split()[3] for rule in rules if "REJECT" in rule]
    assert rejected == list(egress.BLOCKED_V4)
    assert rules.index(admitted[-1]) < rules.index(next(r for r in rules if "REJECT" in r))
    for needed in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"):
        assert needed in rejected
    for needed in ("100.64.0.0/10", "224.0.0.0/4", "127.0.0.0/8", "240.0.0.0/4"):
        assert needed in rejected


def test_ipv6_rules_block_ula_link_local_multicast_and_mapped_ipv4() -> None:
    rules = egress.expected(POLICY, 6)
    rejected = [rule.split()[3] for rule in rules[OUT_CHAIN] if "REJECT" in rule]

    for needed in ("fc00::/7", "fe80::/10", "ff00::/8", "::ffff:0.0.0.0/96", "2001:db8::/32"):
        assert needed in rejected
    assert f"-A {OUT_CHAIN} -d fd00::8/128 -p tcp -m tcp --dport 3128 -j RETURN" in rules[OUT_CHAIN]
    assert all("icmp6-adm-prohibited" in rule for rule in rules[OUT_CHAIN] if "REJECT" in rule)


def test_the_host_itself_takes_only_dns_from_builds() -> None:
    assert egress.expected(POLICY, 4)[IN_CHAIN] == [
        f"-A {IN_CHAIN} -d 10.255.255.53/32 -p udp -m udp --dport 53 -j RETURN",
        f"-A {IN_CHAIN} -d 10.255.255.53/32 -p tcp -m tcp --dport 53 -j RETURN",
        f"-A {IN_CHAIN} -j REJECT --reject-with icmp-admin-prohibited",
    ]
    assert egress.expected(POLICY, 6)[IN_CHAIN] == [
        f"-A {IN_CHAIN} -j REJECT --reject-with icmp6-adm-prohibited"
    ]


@pytest.mark.parametrize("entry", ["172.29.254.1:8080", "0.0.0.0/0", "::/0", "[fe80::1]:22"])
def test_an_allow_list_entry_opens_forwarding_only_never_the_host(entry: str) -> None:
    # An entry covering the host's own addresses (its bridge gateway, or everything)
    # still opens no service on the host: the INPUT chain is the same without it.
    policy = egress.Policy(bridge="podium-build0", dns=(RESOLVER,), allow=egress.parse_allow(entry))
    bare = egress.Policy(bridge="podium-build0", dns=(RESOLVER,))
    [allowed] = policy.allow
    version = allowed.network.version

    chains = egress.expected(policy, version)
    assert chains[IN_CHAIN] == egress.expected(bare, version)[IN_CHAIN]
    assert not any(allowed.network.with_prefixlen in rule for rule in chains[IN_CHAIN])
    assert any(allowed.network.with_prefixlen in rule for rule in chains[OUT_CHAIN])
    restore = egress.restore_input(policy, version, "DOCKER-USER").splitlines()
    opened = [line for line in restore if allowed.network.with_prefixlen in line]
    assert opened and all(line.startswith(f"-A {OUT_CHAIN} ") for line in opened)


def test_an_allow_list_entry_left_on_the_host_chain_is_named() -> None:
    # The host chain as an earlier Podium wrote it: the allow-list opened INPUT too.
    found = listings()
    stale = f"-A {IN_CHAIN} -d 203.0.113.80/32 -p tcp -m tcp --dport 80 -j RETURN"
    found[IN_CHAIN].insert(2, stale)

    assert egress.problems(POLICY, 4, "DOCKER-USER", found) == [
        f"IPv4: chain {IN_CHAIN} differs (unexpected `{stale}`)"
    ]


def listings(version: int = 4, parent: str = "DOCKER-USER") -> dict[str, list[str]]:
    chains = egress.expected(POLICY, version)
    jumps = egress.jumps(POLICY, parent)
    return {
        **chains,
        parent: [jumps[parent], f"-A {parent} -j RETURN"],
        "INPUT": [jumps["INPUT"], "-A INPUT -i lo -j ACCEPT"],
    }


def test_a_complete_ruleset_has_no_problems() -> None:
    assert egress.problems(POLICY, 4, "DOCKER-USER", listings()) == []
    assert egress.problems(POLICY, 6, "FORWARD", listings(6, "FORWARD")) == []


def test_a_removed_rule_is_named() -> None:
    found = listings()
    removed = f"-A {OUT_CHAIN} -d 10.0.0.0/8 -j REJECT --reject-with icmp-admin-prohibited"
    found[OUT_CHAIN].remove(removed)

    assert egress.problems(POLICY, 4, "DOCKER-USER", found) == [
        f"IPv4: chain {OUT_CHAIN} differs (missing `{removed}`)"
    ]


def test_an_added_or_reordered_rule_is_a_change() -> None:
    added = listings()
    added[OUT_CHAIN].insert(1, f"-A {OUT_CHAIN} -j RETURN")
    reordered = listings()
    reordered[OUT_CHAIN][1], reordered[OUT_CHAIN][-1] = (
        reordered[OUT_CHAIN][-1],
        reordered[OUT_CHAIN][1],
    )

    assert "unexpected" in egress.problems(POLICY, 4, "DOCKER-USER", added)[0]
    assert "rule order changed" in egress.problems(POLICY, 4, "DOCKER-USER", reordered)[0]


def test_a_jump_that_is_not_first_or_a_missing_chain_is_named() -> None:
    found = listings()
    found["INPUT"].reverse()  # an ACCEPT now comes before the build chain
    del found[IN_CHAIN]

    assert egress.problems(POLICY, 4, "DOCKER-USER", found) == [
        f"IPv4: chain {IN_CHAIN} is missing",
        f"IPv4: `-A INPUT -i podium-build0 -j {IN_CHAIN}` is not the first rule of INPUT",
    ]


def test_the_restore_input_declares_both_chains_and_puts_the_jumps_first() -> None:
    text = egress.restore_input(POLICY, 4, "DOCKER-USER")
    lines = text.splitlines()

    assert lines[0] == "*filter" and lines[-1] == "COMMIT"
    assert lines[1:3] == [f":{OUT_CHAIN} - [0:0]", f":{IN_CHAIN} - [0:0]"]
    assert f"-I DOCKER-USER 1 -i podium-build0 -j {OUT_CHAIN}" in lines
    assert f"-I INPUT 1 -i podium-build0 -j {IN_CHAIN}" in lines
    for rules in egress.expected(POLICY, 4).values():
        assert all(rule in lines for rule in rules)
