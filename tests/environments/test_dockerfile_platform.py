"""The Dockerfile policy's platform check: every FROM image must exist for the class's
platform (``linux/arm64``...), as far as the engine or the image's registry can tell.

The policy stays pure: it is given the platform and a lookup (image reference -> the
platforms it is available for, or None when nothing can tell). The pure tests use a fake
lookup; the Docker tests use the worker's real one (``scoring.images.platforms.image_platforms``)
on the local base image, and the environment build that calls it.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any

import pytest

from podium_policy.dockerfile_policy import (
    Violation,
    check_dockerfile,
    check_platforms,
    format_violations,
)
from portal.contests.models import HardwareClass
from portal.core import storage
from portal.environments.models import Environment
from portal.environments.services import environment_create
from scoring import engine
from scoring.build import builds
from scoring.images import platforms

LOCAL = ["localhost/podium/"]
BUSYBOX = "localhost/podium/busybox:1"
PYTHON = "localhost/podium/python:bookworm"
ARM64, AMD64 = "linux/arm64", "linux/amd64"


class FakeRegistry:
    """A lookup that answers from a table and remembers what it was asked."""

    def __init__(self, table: dict[str, Collection[str] | None]) -> None:
        self.table = table
        self.asked: list[str] = []

    def __call__(self, ref: str) -> Collection[str] | None:
        self.asked.append(ref)
        return self.table.get(ref)


def platform_check(text: str, lookup: Any, platform: str = ARM64, **args: str) -> list[Violation]:
    return check_platforms(
        text, LOCAL, platform=platform, image_platforms=lookup, build_args=args or None
    )


# The pure rule, with a fake lookup ---------------------------------------------------------


def test_an_image_without_the_platform_is_refused_on_its_line_naming_the_platform() -> None:
    lookup = FakeRegistry({BUSYBOX: {AMD64}, PYTHON: {AMD64, "linux/arm64/v8"}})
    text = f"FROM {PYTHON} AS build\nRUN true\n\nFROM {BUSYBOX}\nCOPY --from=build /a /a\n"

    violations = platform_check(text, lookup)

    assert [v.line for v in violations] == [4]
    assert violations[0].message == (
        f"FROM names `{BUSYBOX}`, which has no image for linux/arm64 (it has linux/amd64); "
        "use a base image built for linux/arm64."
    )
    assert format_violations(violations).startswith("line 4: FROM names")


def test_an_image_nothing_can_tell_about_passes_silently() -> None:
    assert platform_check(f"FROM {BUSYBOX}\n", FakeRegistry({})) == []

    def unreachable(ref: str) -> Collection[str] | None:
        raise ConnectionError("the registry does not answer")

    assert platform_check(f"FROM {BUSYBOX}\n", unreachable) == []


def test_spellings_of_the_same_platform_match() -> None:
    for offered in ({"linux/arm64/v8"}, {"linux/aarch64"}, {"linux/arm64", "unknown/unknown"}):
        assert platform_check(f"FROM {BUSYBOX}\n", FakeRegistry({BUSYBOX: offered})) == []
    refused = platform_check(f"FROM {BUSYBOX}\n", FakeRegistry({BUSYBOX: {"unknown/unknown"}}))
    assert refused[0].message == (
        f"FROM names `{BUSYBOX}`, which has no image for linux/arm64; "
        "use a base image built for linux/arm64."
    )


def test_only_allowed_images_are_looked_up_and_each_once() -> None:
    lookup = FakeRegistry({BUSYBOX: {AMD64}})
    text = (
        f"FROM {BUSYBOX} AS one\n"
        "FROM one AS two\n"  # an earlier stage: nothing to look up
        f"FROM {BUSYBOX}\n"
        "FROM docker.io/library/busybox:1\n"  # not allowed: the policy refuses it, unasked
        "FROM scratch\n"
    )

    assert [v.line for v in platform_check(text, lookup)] == [1, 3]
    assert lookup.asked == [BUSYBOX]


def test_variables_are_resolved_and_shown() -> None:
    lookup = FakeRegistry({BUSYBOX: {AMD64}})
    text = "ARG BASE=localhost/podium/python:bookworm\nFROM ${BASE}\n"

    violations = platform_check(text, lookup, BASE=BUSYBOX)

    assert [v.line for v in violations] == [2]
    assert f"`${{BASE}}` (that is, `{BUSYBOX}`)" in violations[0].message


def test_a_from_platform_flag_is_the_stages_platform() -> None:
    lookup = FakeRegistry({BUSYBOX: {AMD64}, PYTHON: {ARM64}})
    text = (
        f"FROM --platform=linux/amd64 {BUSYBOX} AS tools\n"  # has amd64: fine
        f"FROM --platform=$BUILDPLATFORM {PYTHON} AS cross\n"  # the build machine's: unknown
        f"FROM --platform=$TARGETPLATFORM {BUSYBOX}\n"  # the class's: no arm64
        f"FROM --platform=linux/amd64 {PYTHON}\n"  # arm64 only: no amd64
    )

    violations = platform_check(text, lookup)

    assert [v.line for v in violations] == [3, 4]
    assert "no image for linux/arm64" in violations[0].message
    assert "no image for linux/amd64 (it has linux/arm64)" in violations[1].message


def test_no_platform_means_the_engines_default_and_no_lookup() -> None:
    lookup = FakeRegistry({BUSYBOX: {AMD64}})

    assert platform_check(f"FROM {BUSYBOX}\n", lookup, platform="") == []
    assert check_dockerfile(f"FROM {BUSYBOX}\n", LOCAL, image_platforms=lookup) == []
    assert lookup.asked == []


def test_check_dockerfile_reports_the_platform_with_every_other_violation() -> None:
    lookup = FakeRegistry({BUSYBOX: {AMD64}})
    text = f"FROM {BUSYBOX}\nVOLUME /data\n"

    plain = check_dockerfile(text, LOCAL)
    with_platform = check_dockerfile(text, LOCAL, platform=ARM64, image_platforms=lookup)

    assert [v.line for v in plain] == [2]
    assert [v.line for v in with_platform] == [1, 2]
    assert "linux/arm64" in with_platform[0].message


# The worker's real lookup, on this engine ---------------------------------------------------


def other_platform() -> str:
    """A platform this engine's local base images are not built for."""
    return AMD64 if platforms.host_platform() == ARM64 else ARM64


@pytest.mark.docker
def test_the_engine_tells_a_local_images_platform_and_nothing_for_a_missing_one() -> None:
    assert platforms.image_platforms(BUSYBOX) == {platforms.host_platform()}
    assert platforms.image_platforms(f"localhost/podium/missing-{uuid.uuid4().hex[:8]}:1") is None


@pytest.mark.docker
def test_a_local_image_is_refused_for_another_platform_and_accepted_for_its_own() -> None:
    text = f"# a comment\nFROM {BUSYBOX}\n"
    lookup = platforms.image_platforms

    refused = check_platforms(text, LOCAL, platform=other_platform(), image_platforms=lookup)
    accepted = check_platforms(
        text, LOCAL, platform=platforms.host_platform(), image_platforms=lookup
    )

    assert [v.line for v in refused] == [2]
    assert f"no image for {other_platform()} (it has {platforms.host_platform()})" in (
        refused[0].message
    )
    assert accepted == []


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_an_environment_build_for_another_platform_fails_before_building(
    alice: Any, benchmark: Any, sent: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    hardware_class = f"cpu-other-{uuid.uuid4().hex[:6]}"
    benchmark.hardware_class = HardwareClass.objects.create(
        name=hardware_class, platform=other_platform()
    )
    benchmark.save(update_fields=["hardware_class"])
    built: list[dict[str, Any]] = []
    monkeypatch.setattr(engine, "build_image", lambda **kw: built.append(kw))
    environment = environment_create(
        owner=alice, benchmark=benchmark, name="arm", dockerfile_text=f"FROM {BUSYBOX}\n"
    )

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    assert environment.status == Environment.FAILED
    assert environment.failure_reason == (
        f"The Dockerfile cannot be built for {other_platform()}: line 1: FROM names "
        f"`{BUSYBOX}`, which has no image for {other_platform()} (it has "
        f"{platforms.host_platform()}); use a base image built for {other_platform()}."
    )
    assert built == []  # refused before the engine was asked to build anything
    build_log = (storage.environment_dir(environment.pk) / "build.log").read_text()
    assert environment.failure_reason in build_log
