"""Platforms: which supervisor binary a host runs, Docker's names for architectures, and
what platforms an image is available for.

A hardware class has a Docker platform (``portal.contests.hardware.class_platform``:
``linux/amd64``, ``linux/arm64``, or "" for the engine's own). The environment build
builds for it, the Dockerfile policy checks every stage's image against it (with
:func:`image_platforms` as its lookup), and a scoring host registers for the class only
when it is of that architecture (:func:`platform_problem`), so the native supervisor is
always the right one.

Everything here is pure but :func:`image_platforms` (the engine).
"""

from __future__ import annotations

import platform as host
from typing import Any

from podium_policy.dockerfile_policy import ARCH_ALIASES
from scoring import engine

# A registry that does not answer must not hold up a build for the client's 120 s.
DISTRIBUTION_TIMEOUT_S = 15


def docker_arch(platform: str) -> str:
    """The architecture of a Docker platform: ``linux/arm64`` -> ``arm64``, ``linux/amd64``
    -> ``amd64`` (a variant is dropped: ``linux/arm64/v8`` -> ``arm64``); uname's spellings
    are folded in (``x86_64`` -> ``amd64``, ``aarch64`` -> ``arm64``), and an architecture
    alone is taken as it is. "" (the engine's default) stays ""."""
    parts = platform.strip().lower().split("/")
    arch = parts[1] if len(parts) >= 2 else parts[0]
    return ARCH_ALIASES.get(arch, arch)


def host_platform(machine: str | None = None) -> str:
    """This host's own platform, ``linux/<docker arch>`` of ``uname -m`` (or ``machine``)."""
    return f"linux/{docker_arch(machine if machine is not None else host.machine())}"


def platform_problem(platform: str, machine: str | None = None) -> str:
    """Why this host cannot score a class of ``platform`` ("" when it can, or when the
    class takes the engine's own platform).

    A host scores only its own architecture, with its native supervisor (``make``
    builds it for the host; ``make supervisor-aarch64`` cross-builds the arm64 one to
    ship to arm64 hosts). Emulation is no way to score: under qemu-user the supervisor
    cannot become a subreaper nor install the entrant's seccomp filter (qemu refuses
    ``PR_SET_CHILD_SUBREAPER`` and ``PR_SET_SECCOMP``; seen with Debian 12's qemu-user
    7.2), and emulated time is not the class's time. ``machine`` is ``uname -m`` (this
    host's when None). Pure.
    """
    if not platform:
        return ""
    own = host_platform(machine)
    if docker_arch(platform) != docker_arch(own):
        return f"the class runs {platform} images but this host is {own}"
    return ""


def _platform_name(os_name: Any, arch: Any, variant: Any = "") -> str:
    name = f"{str(os_name or '').lower()}/{docker_arch(str(arch or ''))}"
    return f"{name}/{str(variant).lower()}" if variant else name


def image_platforms(ref: str) -> frozenset[str] | None:
    """The platforms (``os/arch[/variant]``) the engine could build ``ref`` for, or
    ``None`` when it cannot tell; the Dockerfile policy's platform lookup.

    Two sources, unioned: the engine's own copy (``docker image inspect``: its ``Os``,
    ``Architecture`` and ``Variant``; the only source for an image that exists only in
    the engine, like ``localhost/podium/...``) and the registry's manifest list, asked
    through the engine (``engine.registry_platforms``).
    Either may fail: the image is not local, the registry does not exist, does not
    answer within :data:`DISTRIBUTION_TIMEOUT_S` or refuses us, or the engine itself
    cannot be reached. When both fail the answer is ``None`` and the policy lets the
    image pass (the build itself then finds out). Never raises.
    """
    found: set[str] = set()
    local = engine.image_platform(ref)
    if local is not None:
        found.add(_platform_name(*local))
    remote = engine.registry_platforms(ref, DISTRIBUTION_TIMEOUT_S)
    for item in remote or []:
        if item.get("os") and item.get("architecture"):
            found.add(_platform_name(item["os"], item["architecture"], item.get("variant")))
    return frozenset(found) if local is not None or remote is not None else None
