"""The Dockerfile policy, checked before any environment build (pure: no database).

The build engine is Docker's classic builder: it reads ``FROM 3fa9`` as whatever local
image id starts with ``3fa9`` and pulls what it does not have, so every image a line
names must be an earlier stage or a full reference under an allowed prefix, and the
namespace where Podium tags entrants' images is refused by name.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podium_policy.dockerfile_policy import (
    ENTRANT_NAMESPACE,
    Violation,
    base_images,
    check_dockerfile,
    format_violations,
    normalize_image,
    prefix_problem,
)

LOCAL = ["localhost/podium/"]
DEFAULT = ["localhost/podium/", "docker.io/library/"]  # a benchmark's default allowed_registries
WIDE = [*DEFAULT, "ghcr.io/acme/", "localhost:5000/team/", "registry.lab:443/team/"]
HEX64 = "3f1a2e9c0b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
BASE = "FROM localhost/podium/python:bookworm\n"

STARTER_KIT = """\
ARG BASE=localhost/podium/python:bookworm
FROM ${BASE}
COPY requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir -r /tmp/requirements.txt
"""


def lines_of(text: str, prefixes: list[str] = DEFAULT, **build_args: str) -> list[int]:
    return [v.line for v in check_dockerfile(text, prefixes, build_args or None)]


def only_message(text: str, prefixes: list[str] = DEFAULT, **build_args: str) -> str:
    violations = check_dockerfile(text, prefixes, build_args or None)
    assert len(violations) == 1, violations
    return violations[0].message


# Image names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("python:3.11", "docker.io/library/python:3.11"),
        ("python", "docker.io/library/python"),
        ("user/x", "docker.io/user/x"),
        ("docker.io/python:3.11", "docker.io/library/python:3.11"),
        ("index.docker.io/library/python", "docker.io/library/python"),
        ("index.docker.io/python", "docker.io/library/python"),
        ("ghcr.io/a/b@sha256:" + "0" * 64, "ghcr.io/a/b@sha256:" + "0" * 64),
        ("localhost/podium/python:bookworm", "localhost/podium/python:bookworm"),
        ("localhost:5000/x:1", "localhost:5000/x:1"),
        ("registry.lab:443/team/img", "registry.lab:443/team/img"),
        ("localhost/podium/", "localhost/podium/"),
        ("docker.io/", "docker.io/"),
    ],
)
def test_normalize_image(ref: str, expected: str) -> None:
    assert normalize_image(ref) == expected


# Full references only -------------------------------------------------------------------


def test_the_starter_kit_is_allowed() -> None:
    assert check_dockerfile(STARTER_KIT, LOCAL) == []
    assert check_dockerfile(STARTER_KIT, DEFAULT) == []


@pytest.mark.parametrize(
    "image",
    [
        "localhost/podium/python:bookworm",
        "localhost/podium/busybox:1",
        "docker.io/library/python:3.11",
        "docker.io/python:3.11",
        "index.docker.io/library/python",
        f"docker.io/library/python@sha256:{HEX64}",
        f"docker.io/library/python:3.11-slim@sha256:{HEX64}",
        "ghcr.io/acme/model-server:v1.2_rc-3",
        "ghcr.io/acme/a__b/c.d/e--f:TAG",
        "localhost:5000/team/img",
        "registry.lab:443/team/a/b/c:latest",
        "scratch",
    ],
)
def test_it_allows_full_references_under_an_allowed_prefix(image: str) -> None:
    assert check_dockerfile(f"FROM {image}\n", WIDE) == []


def test_it_asks_for_the_registry_of_a_name_written_without_one() -> None:
    assert check_dockerfile("FROM python:3.11\n", DEFAULT) == [
        Violation(
            1,
            "FROM names `python:3.11`, which has no registry; write it with its registry, "
            "like docker.io/library/python:3.11.",
        )
    ]


@pytest.mark.parametrize(
    ("image", "expected_form"),
    [
        ("python", "docker.io/library/python"),
        ("ubuntu:24.04", "docker.io/library/ubuntu:24.04"),
        ("user/x", "docker.io/user/x"),
        ("podium/python:bookworm", "localhost/podium/python:bookworm"),
        ("podium/busybox:1", "localhost/podium/busybox:1"),
    ],
)
def test_a_name_without_a_registry_is_refused_with_its_full_form(
    image: str, expected_form: str
) -> None:
    message = only_message(f"FROM {image}\n")
    assert message.endswith(f"write it with its registry, like {expected_form}.")


@pytest.mark.parametrize(
    "image", ["3fa9", "3fa9c2e1d0b4", HEX64, f"sha256:{HEX64}", "sha256:3fa9", "0", "cafe"]
)
def test_an_image_id_is_refused(image: str) -> None:
    assert check_dockerfile(f"FROM {image}\n", WIDE) == [
        Violation(
            1,
            f"FROM names `{image}`, an image id, which could be any image on the build "
            "machine; name the image by its full reference instead, like "
            "docker.io/library/python:3.11.",
        )
    ]


@pytest.mark.parametrize(
    "image",
    [
        "localhost/Podium/python",
        "Localhost/podium/python",
        "localhost/podium/python:-bad",
        "localhost/podium/python:" + "a" * 129,
        "localhost/podium/python:",
        "localhost/podium/python@sha256:3fa9",
        f"localhost/podium/python@sha512:{HEX64}",
        f"localhost/podium/python@sha256:{HEX64.upper()}",
        f"localhost/podium/python@{HEX64}",
        "localhost/",
        "localhost/podium//python",
        "localhost/podium/-python",
        "localhost/podium/py..thon",
        "-bad.example/podium/python",
        "localhost/podium/" + "a" * 250,
        "localhost/podium/pythön",
    ],
)
def test_a_malformed_reference_is_refused(image: str) -> None:
    assert only_message(f"FROM {image}\n", WIDE) == (
        f"FROM names `{image}`, which is not a valid image reference; write it as "
        "registry/repository:tag, like docker.io/library/python:3.11."
    )


def test_copy_and_mount_sources_need_full_references_too() -> None:
    text = (
        BASE
        + "COPY --from=python:3.11 /usr/local /usr/local\n"
        + "COPY --from=3fa9 /bin/x /x\n"
        + "RUN --mount=type=bind,from=tools,target=/t ls /t\n"
        + f"RUN --mount=type=bind,from=sha256:{HEX64},target=/t ls /t\n"
        + "COPY --from=docker.io/library/python:3.11 /usr/local /usr/local\n"
        + "RUN --mount=type=bind,from=localhost/podium/tools:1,target=/t ls /t\n"
    )
    violations = check_dockerfile(text, DEFAULT)
    assert [v.line for v in violations] == [2, 3, 4, 5]
    assert violations[0].message == (
        "COPY --from names `python:3.11`, which has no registry; write it with its registry, "
        "like docker.io/library/python:3.11."
    )
    assert violations[1].message.startswith("COPY --from names `3fa9`, an image id")
    assert violations[2].message.startswith("RUN --mount names `tools`, which has no registry")
    assert violations[3].message.startswith(f"RUN --mount names `sha256:{HEX64}`, an image id")


def test_from_without_an_image() -> None:
    assert only_message("FROM\n") == "FROM needs an image name."
    assert only_message('ARG EMPTY=""\nFROM ${EMPTY}\n') == "FROM `${EMPTY}` names no image."


# Stages ------------------------------------------------------------------------------------


def test_earlier_stages_may_be_named_by_alias_or_index() -> None:
    text = """\
FROM --platform=$BUILDPLATFORM localhost/podium/python:bookworm AS Builder
RUN make
FROM scratch AS empty
FROM builder AS tools
COPY --from=0 /out /opt
COPY --from=BUILDER /out /opt
COPY --from=empty / /
RUN --mount=type=bind,from=builder,target=/b ls /b
RUN --mount=type=bind,from=1,target=/e ls /e
FROM BUILDER AS final
COPY --from=2 /opt /opt
COPY --from=tools /opt /opt
"""
    assert lines_of(text, LOCAL) == []


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (f"{BASE}FROM localhost/podium/busybox:1\nCOPY --from=2 /x /x\n", 3),  # no stage 2
        (f"{BASE}FROM localhost/podium/busybox:1\nCOPY --from=1 /x /x\n", 3),  # this stage
        (f"{BASE}COPY --from=0 /x /x\n", 2),  # the first stage, from inside itself
        (f"{BASE}FROM localhost/podium/busybox:1\nCOPY --from=-1 /x /x\n", 3),
        (f"{BASE}RUN --mount=type=bind,from=1,target=/m ls /m\n", 2),
    ],
)
def test_an_index_that_is_not_an_earlier_stage_is_refused(text: str, line: int) -> None:
    violations = check_dockerfile(text, DEFAULT)
    assert [v.line for v in violations] == [line]
    assert "which is not an earlier stage" in violations[0].message


def test_a_later_stage_is_not_a_stage_yet() -> None:
    text = (
        "FROM localhost/podium/a AS one\n"
        "COPY --from=later /x /x\n"
        "RUN --mount=type=bind,from=later,target=/m ls /m\n"
        "FROM later\n"
        "FROM localhost/podium/b AS later\n"
    )
    violations = check_dockerfile(text, LOCAL)
    assert [v.line for v in violations] == [2, 3, 4]
    assert violations[0].message == (
        "COPY --from names the stage `later`, which is this stage or a later one; name a "
        "stage defined above this one or a full image reference."
    )


def test_the_current_stage_is_not_an_earlier_stage() -> None:
    text = (
        "FROM localhost/podium/a AS current\nCOPY --from=current /x /x\nFROM current AS current2\n"
    )
    assert lines_of(text, LOCAL) == [2]


def test_an_earlier_stage_name_wins_over_an_image_of_the_same_name() -> None:
    text = "FROM localhost/podium/a AS cafe\nFROM cafe\nCOPY --from=cafe /x /x\n"
    assert lines_of(text, LOCAL) == []


# Allowed registries ------------------------------------------------------------------------


def test_a_refused_image_is_named_with_the_allowed_list() -> None:
    assert check_dockerfile("FROM evil.example/miner:latest\n", DEFAULT) == [
        Violation(
            1,
            "FROM names `evil.example/miner:latest`, which is not from an allowed registry "
            "(localhost/podium/, docker.io/library/).",
        )
    ]


def test_the_starter_kit_is_refused_when_only_docker_hub_library_is_allowed() -> None:
    assert check_dockerfile(STARTER_KIT, ["docker.io/library/"]) == [
        Violation(
            2,
            "FROM names `${BASE}` (that is, `localhost/podium/python:bookworm`), which is not "
            "from an allowed registry (docker.io/library/).",
        )
    ]


def test_prefixes_match_the_normalized_reference() -> None:
    assert lines_of("FROM docker.io/python:3.11\n", ["docker.io/library/python:"]) == []
    assert lines_of("FROM index.docker.io/library/python\n", ["docker.io/library/"]) == []
    assert lines_of("FROM docker.io/library/python\n", ["index.docker.io/library/"]) == []
    assert lines_of("FROM docker.io/evil/x\n", ["docker.io/"]) == []
    assert lines_of("FROM docker.io/evil/x\n", ["docker.io/library/"]) == [1]
    assert lines_of("FROM ghcr.io/acme-evil/x\n", ["ghcr.io/acme/"]) == [1]
    assert lines_of("FROM localhost/podium.evil.com/python\n", LOCAL) == [1]
    assert lines_of("FROM localhost:5000/podium/python\n", LOCAL) == [1]
    assert lines_of("FROM ghcr.io/podium/python\n", LOCAL) == [1]


@pytest.mark.parametrize("prefix", ["podium/", "podium", "library/", "python:", "ghcr.io"])
def test_a_prefix_without_a_registry_host_matches_nothing(prefix: str) -> None:
    for image in ("docker.io/podium/python", "docker.io/library/python:3.11", "ghcr.io/x/y"):
        assert lines_of(f"FROM {image}\n", [prefix]) == [1], image


def test_an_empty_prefix_allows_nothing() -> None:
    assert lines_of(BASE, ["", "  "]) == [1]
    assert "(none are configured)" in only_message(BASE, [])


def test_build_args_override_arg_defaults() -> None:
    assert lines_of(STARTER_KIT, LOCAL, BASE="evil.example/python:3.11") == [2]
    assert lines_of(STARTER_KIT, LOCAL, BASE="python:3.11") == [2]
    assert lines_of(STARTER_KIT, DEFAULT, BASE="docker.io/library/python:3.11") == []
    # A build argument for an undeclared ARG changes nothing.
    assert lines_of(BASE, LOCAL, OTHER="evil.example/x") == []


# The entrant namespace -----------------------------------------------------------------------

EVERYTHING = ["localhost/", "docker.io/", "index.docker.io/", "localhost/podium-entrant/"]


@pytest.mark.parametrize("prefixes", [DEFAULT, EVERYTHING, ["docker.io/podium-entrant/"]])
@pytest.mark.parametrize(
    "text",
    [
        "FROM podium-entrant/sub-35:abc\n",
        "FROM podium-entrant/env-12:ab12cd34ef56\n",
        "FROM docker.io/podium-entrant/sub-35:abc\n",
        "FROM index.docker.io/podium-entrant/sub-35:abc\n",
        "FROM docker.io/library/podium-entrant/sub-35:abc\n",
        "FROM localhost/podium-entrant/env-3:x\n",
        "FROM localhost:5000/podium-entrant/env-3:x\n",
        "FROM podium-entrant:latest\n",
        "FROM docker.io/Podium-Entrant/sub-35:abc\n",
        f"FROM docker.io/podium-entrant/sub-35@sha256:{HEX64}\n",
        "ARG IMG=podium-entrant/sub-35:abc\nFROM ${IMG}\n",
        "ARG IMG=localhost/podium-entrant/sub-35:abc\nFROM ${IMG}\n",
        "FROM ${IMG:-docker.io/podium-entrant/sub-35:abc}\n",
    ],
)
def test_another_entrants_image_is_refused_whatever_the_prefixes(
    text: str, prefixes: list[str]
) -> None:
    violations = check_dockerfile(text, prefixes)
    assert [v.line for v in violations] == [text.count("\n")]
    assert "another entrant's image (podium-entrant/), which no Dockerfile may use" in (
        violations[0].message
    )


@pytest.mark.parametrize(
    "line",
    [
        "COPY --from=podium-entrant/sub-35:abc /submission/run /stolen",
        "COPY --from=localhost/podium-entrant/sub-35:abc /submission/run /stolen",
        "COPY --from=docker.io/podium-entrant/env-4:x / /stolen",
        "RUN --mount=from=podium-entrant/sub-1:x,target=/m true",
        "RUN --mount=type=bind,from=localhost/podium-entrant/sub-1:x,target=/m cp -r /m /x",
        "ONBUILD COPY --from=localhost/podium-entrant/sub-35:abc /submission /s",
    ],
)
def test_another_entrants_image_cannot_be_copied_or_mounted(line: str) -> None:
    text = f"{BASE}{line}\n"
    for prefixes in (DEFAULT, EVERYTHING):
        violations = check_dockerfile(text, prefixes)
        assert [v.line for v in violations] == [2]
        assert "another entrant's image" in violations[0].message


def test_a_variable_cannot_hide_another_entrants_image() -> None:
    text = f"{BASE}ENV SRC=localhost/podium-entrant/sub-35:abc\nCOPY --from=$SRC /x /x\n"
    assert only_message(text, EVERYTHING) == (
        "COPY --from names `$SRC` (that is, `localhost/podium-entrant/sub-35:abc`), another "
        "entrant's image (podium-entrant/), which no Dockerfile may use; start from an "
        "allowed base image instead."
    )


def test_similar_names_outside_the_namespace_are_not_entrant_images() -> None:
    text = "FROM localhost/podium/podium-entrant:1\nFROM docker.io/library/podium-entrants\n"
    assert check_dockerfile(text, ["localhost/", "docker.io/"]) == []


REGISTRIES = st.sampled_from(
    ["", "docker.io/", "index.docker.io/", "docker.io/library/", "localhost/", "localhost:5000/"]
)
COMPONENTS = st.from_regex(r"[a-z0-9]+([._-][a-z0-9]+)?", fullmatch=True)
TAGS = st.from_regex(r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,8})?", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(
    registry=REGISTRIES,
    path=st.lists(COMPONENTS, min_size=1, max_size=3),
    tag=TAGS,
    prefixes=st.lists(st.sampled_from([*EVERYTHING, *DEFAULT, "ghcr.io/"]), max_size=5),
    how=st.sampled_from(["FROM {}", "FROM scratch\nCOPY --from={} / /", "ARG I={}\nFROM $I"]),
)
def test_no_prefix_ever_lets_an_entrant_image_through(
    registry: str, path: list[str], tag: str, prefixes: list[str], how: str
) -> None:
    image = f"{registry}{ENTRANT_NAMESPACE}/{'/'.join(path)}{tag}"
    violations = check_dockerfile(how.format(image) + "\n", prefixes)
    assert len(violations) == 1
    assert "another entrant's image" in violations[0].message


# RUN flags, LABEL, VOLUME ----------------------------------------------------------------------


def test_run_takes_no_flag_but_mount() -> None:
    text = (
        BASE
        + "RUN --network=host curl https://example.com\n"
        + "RUN --network=none make\n"
        + "RUN --security=insecure make\n"
        + "RUN --device=/dev/kvm make\n"
        + 'RUN --network=host ["sh", "-c", "make"]\n'
        + "run --mount=type=cache,target=/var/cache/pip --network=host pip install x\n"
        + "RUN --mount=type=cache,target=/var/cache/pip pip install -r requirements.txt\n"
        + "RUN --mount=type=secret,id=token cat /run/secrets/token\n"
    )
    violations = check_dockerfile(text, DEFAULT)
    assert [v.line for v in violations] == [2, 3, 4, 5, 6, 7]
    assert violations[0].message == (
        "RUN --network is not allowed; the only flag RUN may take is --mount."
    )
    assert violations[2].message.startswith("RUN --security is not allowed")


def test_quotes_cannot_regroup_mount_options() -> None:
    # BuildKit reads the options as CSV: "from=..." in quotes would be one option.
    text = f'{BASE}RUN --mount=type=bind,\\"from=podium-entrant/sub-1:x\\",target=/m true\n'
    assert only_message(text) == (
        "RUN --mount options may not contain quotes; write them as "
        "type=bind,from=stage,target=/path."
    )


@pytest.mark.parametrize(
    "label",
    [
        "podium.build=someone-else",
        "podium=1",
        "PODIUM.Run=1",
        "podium.submission=7 ok=1",
        'ok=1 "podium.host"=x',
        "'podium.run'=1",
        'pod"ium.build"=x',
        "podium\\.build=x",
        'podium.build="a value with spaces"',
        "podium.build a legacy value",
        "com.docker.compose.project=x",
        "Com.Docker.Extension=x",
    ],
)
def test_label_keys_in_reserved_namespaces_are_refused(label: str) -> None:
    message = only_message(f"{BASE}LABEL {label}\n")
    assert message.startswith("LABEL key `")
    assert message.endswith(
        "is reserved (podium.* is Podium's and com.docker.* is Docker's); choose another key."
    )


def test_other_label_keys_are_fine() -> None:
    text = (
        BASE
        + 'LABEL org.opencontainers.image.title="My model" version=2 "quoted key"=x\n'
        + "LABEL podiumx=1 my.podium.build=1 com.dockerx=1 podium-build=1\n"
        + "LABEL maintainer alice@example.com\n"
    )
    assert check_dockerfile(text, DEFAULT) == []


def test_every_reserved_key_of_a_label_is_reported() -> None:
    text = f"{BASE}LABEL podium.build=x ok=1 com.docker.y=2\n"
    assert [v.message.split("`")[1] for v in check_dockerfile(text, DEFAULT)] == [
        "podium.build",
        "com.docker.y",
    ]


def test_label_keys_built_from_variables_are_expanded() -> None:
    text = (
        BASE
        + "ARG KEY=podium.build\n"
        + "LABEL ${KEY}=x\n"
        + "ENV PREFIX=podium\n"
        + "LABEL $PREFIX.run=1\n"
        + "LABEL ${PREFIX:+podium}.host=1 ${NOPE:-com.docker}.x=1\n"
        + "LABEL ${UNKNOWN}.build=1\n"
        + "LABEL org.example.${PREFIX}=1\n"
    )
    violations = check_dockerfile(text, DEFAULT)
    assert [v.line for v in violations] == [3, 5, 6, 6, 7]
    assert violations[0].message.startswith("LABEL key `podium.build` is reserved")
    assert violations[4].message == (
        "LABEL key `${UNKNOWN}.build` uses the variable `UNKNOWN`, which has no value; "
        "write the key directly."
    )


def test_variables_in_a_stage_follow_docker_scoping() -> None:
    # A global ARG is visible in a stage only when declared again there.
    assert lines_of("ARG X=foo.\n" + BASE + "LABEL ${X}podium.build=1\n") == [3]
    assert lines_of("ARG K=podium.build\n" + BASE + "ARG K\nLABEL $K=1\n") == [4]
    # ENV wins over an ARG of the same name, whichever comes first.
    assert lines_of(BASE + "ENV K=podium.build\nARG K=fine\nLABEL $K=1\n") == [4]
    assert lines_of(BASE + "ARG K=fine\nENV K=podium.build\nLABEL $K=1\n") == [4]
    # ENV carries into a stage built FROM an earlier one; ARG does not.
    text = (
        BASE.replace("\n", " AS base\n")
        + "ENV K=podium.build\nARG A=podium.run\nFROM base\nLABEL $K=1\nLABEL $A=1\n"
    )
    violations = check_dockerfile(text, DEFAULT)
    assert [v.line for v in violations] == [5, 6]
    assert "is reserved" in violations[0].message
    assert "which has no value" in violations[1].message


def test_volume_is_refused() -> None:
    text = f'{BASE}VOLUME /data\nvolume ["/a", "/b"]\nONBUILD VOLUME /x\n'
    violations = check_dockerfile(text, DEFAULT)
    assert [v.line for v in violations] == [2, 3, 4]
    assert violations[0].message == (
        "VOLUME is not allowed: files written to a volume escape the build's disk cap and "
        "the scored run's read-only root, so remove it."
    )
    assert violations[2].message.startswith("ONBUILD VOLUME is not allowed")


def test_base_images_are_the_allowed_from_images_the_build_looks_at_for_volumes() -> None:
    text = (
        "ARG TAG=bookworm\n"
        "FROM localhost/podium/python:${TAG} AS tools\n"
        "FROM tools\n"
        "FROM scratch\n"
        "FROM docker.io/python:3.11\n"
        "FROM evil.example/x:1\n"
        "FROM localhost/podium/python:bookworm\n"
    )
    assert base_images(text, DEFAULT) == [
        "localhost/podium/python:bookworm",
        "docker.io/library/python:3.11",
    ]
    assert base_images(text, DEFAULT, {"TAG": "slim"})[0] == "localhost/podium/python:slim"
    assert base_images("", DEFAULT) == []


# ADD never fetches ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "http://example.com/model.bin",
        "https://example.com/model.bin",
        "HTTPS://EXAMPLE.COM/model.bin",
        "Http://example.com/model.bin",
        "ftp://example.com/model.bin",
        "s3://bucket/model.bin",
        "git@github.com:someone/repo.git",
        "someone@example.com:repo.git",
        "git://example.com/repo.git",
        "ssh://git@example.com/repo.git",
        "github.com/someone/repo",
        "https://github.com/someone/repo.git#main",
        '"https://example.com/quoted"',
    ],
)
def test_add_from_the_network_is_refused(source: str) -> None:
    message = only_message(f"{BASE}ADD {source} /opt/\n")
    assert message.startswith("ADD cannot fetch")
    assert message.endswith(
        "from the network; COPY a local file or download it in a RUN step instead."
    )
    assert lines_of(f"{BASE}ADD {source} /opt/\n") == [2]


def test_add_remote_in_every_spelling() -> None:
    text = """\
FROM localhost/podium/python
ARG WEIGHTS=https://example.com/w.bin
add --chown=1000 local.txt $WEIGHTS /opt/
ADD ["https://example.com/x", "/x"]
ADD --checksum=sha256:24454f830cdb571e2c4ad15481119c43b3cafd48dd869a9b2945d1036d1dc68d w.bin /w
ONBUILD ADD https://example.com/y /y
ENV HOST=example.com
ADD https://${HOST}/z /z
ADD ["$WEIGHTS", "/w"]
ADD ${SCHEME:-https}://example.com/x /x
ADD local.tar.gz /opt/
COPY model/ /opt/model/
"""
    assert lines_of(text) == [3, 4, 5, 6, 8, 9, 10]


def test_add_flags_that_fetch_are_refused() -> None:
    text = f"{BASE}ADD --keep-git-dir=true https://example.com/r.git /src\n"
    assert [v.message for v in check_dockerfile(text, DEFAULT)] == [
        "ADD --keep-git-dir fetches a remote source, which is not allowed; download it in a "
        "RUN step instead.",
        "ADD cannot fetch `https://example.com/r.git` from the network; COPY a local file or "
        "download it in a RUN step instead.",
    ]


def test_add_with_a_variable_without_value_is_refused() -> None:
    assert "uses the variable `SRC`" in only_message(f"{BASE}ADD $SRC /x\n")
    assert lines_of(f"{BASE}ARG SRC=src\nADD $SRC /x\n") == []
    assert lines_of(f"{BASE}ENV SRC=src\nADD ${{SRC}}/a.txt /x\n") == []


# ONBUILD -------------------------------------------------------------------------------------


def test_onbuild_triggers_are_held_to_the_same_rules() -> None:
    text = (
        BASE.replace("\n", " AS builder\n")
        + "ONBUILD RUN make\n"
        + "ONBUILD COPY --from=localhost/podium/tools:1 /bin/t /bin/t\n"
        + "ONBUILD COPY --from=builder /out /out\n"
        + "ONBUILD COPY --from=0 /out /out\n"
        + "ONBUILD COPY --from=python:3.11 /usr /usr\n"
        + "ONBUILD RUN --mount=type=bind,from=3fa9,target=/m ls\n"
        + "ONBUILD RUN --network=host curl x\n"
        + "ONBUILD LABEL podium.build=x\n"
        + "ONBUILD ADD https://example.com/x /x\n"
        + "ONBUILD FROM localhost/podium/a\n"
        + "ONBUILD ONBUILD RUN true\n"
    )
    violations = check_dockerfile(text, DEFAULT)
    assert [v.line for v in violations] == [4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert violations[0].message == (
        "ONBUILD COPY --from names the stage `builder`, but an ONBUILD trigger runs in a later "
        "build without this file's stages; name a full image reference."
    )
    assert violations[2].message.startswith("ONBUILD COPY --from names `python:3.11`")
    assert violations[3].message.startswith("ONBUILD RUN --mount names `3fa9`, an image id")
    assert violations[4].message.startswith("ONBUILD RUN --network is not allowed")
    assert violations[5].message.startswith("ONBUILD LABEL key `podium.build` is reserved")
    assert violations[6].message.startswith("ONBUILD ADD cannot fetch")
    assert violations[7].message == "ONBUILD FROM is not allowed; remove it."


def test_onbuild_variables_are_refused_where_a_name_is_checked() -> None:
    # The trigger runs in a later build, whose variables this file does not decide.
    text = (
        BASE
        + "ENV SRC=local.txt KEY=ok IMG=localhost/podium/tools:1\n"
        + "ONBUILD ADD $SRC /x\n"
        + "ONBUILD LABEL ${KEY}=1\n"
        + "ONBUILD COPY --from=${IMG} /x /x\n"
        + "ONBUILD RUN echo $SRC\n"
    )
    violations = check_dockerfile(text, DEFAULT)
    assert [v.line for v in violations] == [3, 4, 5]
    assert violations[0].message == (
        "ONBUILD ADD source `$SRC` uses the variable `SRC`, whose value in the build that runs "
        "it is unknown; write the local path directly."
    )


# Variables ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "FROM ${TAG}\n",
        "ARG BASE\nFROM $BASE\n",
        "FROM localhost/podium/python:${VERSION}\n",
        "FROM localhost/podium/a\nARG LATER=localhost/podium/b\nFROM ${LATER}\n",  # not global
        "ARG A=x\nFROM ${A#x}\n",  # a substitution the policy cannot check
    ],
)
def test_a_from_with_a_variable_without_value_is_refused(text: str) -> None:
    violations = check_dockerfile(text, DEFAULT)
    assert len(violations) == 1
    assert violations[0].line == text.count("\n")
    assert "FROM uses the variable" in violations[0].message


def test_variable_forms_resolve() -> None:
    assert lines_of("ARG BASE\nFROM $BASE\n", LOCAL, BASE="localhost/podium/x") == []
    assert lines_of("FROM ${BASE:-localhost/podium/python:bookworm}\n", LOCAL) == []
    assert lines_of("ARG V=\nFROM localhost/podium/python${V:+:${V}}\n", LOCAL) == []
    text = 'ARG REG=localhost/podium\nARG BASE="${REG}/python"\nFROM $BASE\n'
    assert lines_of(text, LOCAL) == []
    assert lines_of("ARG REG=evil.example\nFROM ${REG}/python\n", LOCAL) == [2]
    assert lines_of("ARG REG=podium\nFROM ${REG}/python\n", LOCAL) == [2]
    assert lines_of("FROM ${BASE:-evil.example/python}\n", LOCAL) == [1]


# Reading the file like Docker does -----------------------------------------------------------


def test_line_numbers_survive_continuations_and_comments() -> None:
    text = """\
# A comment
FROM localhost/podium/python

RUN apt-get update && \\
    # a comment inside the continuation
    apt-get install -y gcc \\

    && rm -rf /var/lib/apt/lists/*
ADD \\
    https://example.com/x /x
FROM evil.example/one
"""
    assert lines_of(text) == [9, 11]


def test_a_continuation_joins_words_like_docker() -> None:
    assert lines_of("FROM localhost/pod\\\nium/python\n", LOCAL) == []
    assert lines_of("FROM podium-ent\\\nrant/sub-1:x\n", ["docker.io/"]) == [1]
    assert lines_of("FROM localhost/ev\\\nil/python\n", LOCAL) == [1]


def test_the_escape_directive() -> None:
    text = """\
# escape=`
FROM localhost/podium/python
ADD `
    https://example.com/x C:\\x
RUN echo C:\\
FROM evil.example/one
"""
    assert lines_of(text) == [3, 6]


def test_the_escape_directive_only_counts_at_the_top() -> None:
    text = f"{BASE}# escape=`\nADD `\nhttps://example.com/x /x\n"
    # Here ` is no escape: line 4 is an instruction of its own (Docker would refuse it).
    assert lines_of(text) == []


def test_case_insensitive_instructions() -> None:
    assert lines_of("from evil.example/x\nAdd https://example.com/x /x\nVolume /v\n") == [1, 2, 3]


def test_heredoc_bodies_are_skipped_and_do_not_shift_line_numbers() -> None:
    text = (
        "FROM localhost/podium/python\n"
        "RUN <<EOF\n"
        "FROM evil/inside-heredoc\n"
        "ADD https://example.com/inside /x\n"
        "EOF\n"
        'COPY <<-"CONF" /etc/app.conf\n'
        "\tFROM evil/also-inside\n"
        "\tLABEL podium.build=inside\n"
        "\tCONF\n"
        "RUN <<ONE cat <<TWO > /dev/null\n"
        "ADD http://inside/one /x\n"
        "ONE\n"
        "VOLUME /inside\n"
        "TWO\n"
        "FROM evil/after\n"
    )
    assert lines_of(text) == [15]


def test_a_quoted_heredoc_marker_is_not_a_heredoc() -> None:
    text = f'{BASE}RUN echo "<<EOF"\nFROM evil/x\nEOF\n'
    assert lines_of(text) == [3]


def test_empty_files_and_files_without_from() -> None:
    assert check_dockerfile("", DEFAULT) == [
        Violation(1, "The Dockerfile is empty; it needs at least a FROM line.")
    ]
    assert lines_of("# only a comment\n\n   \n") == [1]
    assert check_dockerfile("\n\nRUN echo hi\n", DEFAULT) == [
        Violation(3, "The Dockerfile has no FROM instruction.")
    ]


# The syntax directive ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frontend",
    [
        "docker/dockerfile:1",
        "docker/dockerfile",
        "docker/dockerfile:1.7-labs",
        "docker.io/docker/dockerfile:1",
        f"docker.io/docker/dockerfile:1.7@sha256:{HEX64}",
        f"docker/dockerfile@sha256:{HEX64}",
        "index.docker.io/docker/dockerfile:1",
        "localhost/podium/frontend:1",  # a full reference under an allowed prefix
    ],
)
def test_the_syntax_directive_may_name_the_official_frontend(frontend: str) -> None:
    assert lines_of(f"# syntax={frontend}\n{BASE}") == []
    assert lines_of(f"# syntax = {frontend}\n{BASE}") == []
    assert lines_of(f"// syntax={frontend}\n{BASE}") == []


@pytest.mark.parametrize(
    "frontend",
    [
        "evil/frontend",
        "docker/dockerfile-upstream:master",
        "docker.io/evil/dockerfile:1",
        "docker/Dockerfile:1",
        "localhost/docker/dockerfile:1",
        "3fa9",
        "podium/frontend:1",  # Podium's, but without its registry
    ],
)
def test_the_syntax_directive_may_not_name_another_frontend(frontend: str) -> None:
    assert only_message(f"# syntax={frontend}\n{BASE}") == (
        f"The syntax directive names the frontend `{frontend}`; only docker/dockerfile or a "
        "full reference under an allowed prefix may be used, so remove that line."
    )


def test_the_syntax_directive_is_found_where_buildkit_looks() -> None:
    assert lines_of(f"#!/usr/bin/env docker\n# syntax=evil/frontend\n{BASE}") == [2]
    assert lines_of(f"# check=skip=all\n# syntax=evil/frontend\n{BASE}") == [2]
    assert lines_of('{"syntax": "evil/frontend"}') == [1, 1]


def test_the_syntax_directive_never_names_an_entrant_image() -> None:
    for frontend in ("podium-entrant/fe:1", "localhost/podium-entrant/fe:1"):
        message = only_message(f"# syntax={frontend}\n{BASE}", EVERYTHING)
        assert message == (
            f"The syntax directive names `{frontend}`, another entrant's image "
            "(podium-entrant/), which no Dockerfile may use; remove that line."
        )


# Results ------------------------------------------------------------------------------------


def test_violations_come_sorted_by_line() -> None:
    text = "# syntax=evil/fe\nFROM evil/a\nADD https://x.example/y /y\nFROM 3fa9\nVOLUME /v\n"
    assert lines_of(text) == [1, 2, 3, 4, 5]


def test_format_violations() -> None:
    violations = [Violation(3, "FROM names `x`."), Violation(7, "ADD cannot fetch `y`.")]
    assert format_violations(violations) == "line 3: FROM names `x`; line 7: ADD cannot fetch `y`."
    assert format_violations([]) == ""


# Allowed-registries lines ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix",
    [
        "localhost/podium/",
        "docker.io/library/",
        "docker.io/",
        "localhost/",
        "ghcr.io/acme/",
        "localhost:5000/team/",
        "docker.io/library/python:",
        "  localhost/podium/  ",
    ],
)
def test_a_prefix_with_a_registry_is_fine(prefix: str) -> None:
    assert prefix_problem(prefix) is None


@pytest.mark.parametrize(
    ("prefix", "problem"),
    [
        (
            "podium/",
            "`podium/` does not start with a registry host; write it with its registry, "
            "like localhost/podium/ or docker.io/library/.",
        ),
        (
            "ghcr.io",
            "`ghcr.io` does not start with a registry host; write it with its registry, "
            "like localhost/podium/ or docker.io/library/.",
        ),
        (
            "localhost/podium-entrant/",
            "`localhost/podium-entrant/` names the entrant namespace (podium-entrant/), "
            "whose images no Dockerfile may use; remove it.",
        ),
        (
            "docker.io/podium-entrant/sub-",
            "`docker.io/podium-entrant/sub-` names the entrant namespace (podium-entrant/), "
            "whose images no Dockerfile may use; remove it.",
        ),
        (
            "localhost/podium",
            "`localhost/podium` would also match the entrant namespace (podium-entrant/); "
            "end it with a slash, like localhost/podium/.",
        ),
    ],
)
def test_a_prefix_without_a_registry_or_into_the_entrant_namespace_is_a_problem(
    prefix: str, problem: str
) -> None:
    assert prefix_problem(prefix) == problem


# Robustness ------------------------------------------------------------------------------------

DOCKERFILE_TOKENS = st.sampled_from(
    [
        "FROM ",
        "ARG ",
        "ADD ",
        "COPY ",
        "RUN ",
        "ONBUILD ",
        "ENV ",
        "LABEL ",
        "VOLUME ",
        "from ",
        "AS ",
        "--from=",
        "--mount=type=bind,from=",
        "--network=",
        "--platform=",
        "--checksum=",
        "localhost/podium/x",
        "podium-entrant/y",
        "docker.io/",
        "evil/y",
        "3fa9",
        "sha256:",
        ":tag",
        "@sha256:" + HEX64,
        "scratch",
        "podium.build=",
        "https://h/x",
        "git@h:x",
        "$A",
        "${A}",
        "${A:-",
        "${A-x}",
        "${A:+",
        "}",
        "${",
        "$",
        "=",
        "0",
        "99999999999999999999999",
        "A=localhost/podium/z",
        "<<EOF",
        "<<-EOF",
        "<<'E'",
        "EOF",
        "\tEOF",
        "\\",
        "`",
        "#",
        "# escape=`",
        "# syntax=",
        "//",
        "[",
        "]",
        '"',
        "'",
        ",",
        " ",
        "\t",
        "\n",
        "\r\n",
        "\\\n",
        "\ufeff",
        "\x00",
        "\u2028",
        "é",
        '["https://h", "/x"]',
    ]
)


@settings(max_examples=300, deadline=None)
@given(text=st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    violations = check_dockerfile(text, DEFAULT, {"A": "localhost/podium/a"})
    assert isinstance(violations, list)
    assert all(isinstance(v, Violation) and v.line >= 1 for v in violations)


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(DOCKERFILE_TOKENS, max_size=40), prefixes=st.lists(st.text(max_size=8)))
def test_dockerfile_like_text_never_raises_and_points_at_real_lines(
    tokens: list[str], prefixes: list[str]
) -> None:
    text = "".join(tokens)
    violations = check_dockerfile(text, prefixes)
    last_line = max(1, text.count("\n") + (0 if text.endswith("\n") else 1))
    assert all(1 <= v.line <= last_line for v in violations), (text, violations)
    assert violations == sorted(violations, key=lambda v: v.line)
    assert isinstance(format_violations(violations), str)


@settings(max_examples=200, deadline=None)
@given(prefix=st.text(max_size=30))
def test_prefix_problem_never_raises(prefix: str) -> None:
    problem = prefix_problem(prefix)
    assert problem is None or problem.endswith(".")


# Bounded work: any text up to the upload limit is judged in bounded time and memory ---------

KIB64 = 64 * 1024


def doubling_chain(lines: int) -> str:
    """``ENV V1=${V0}${V0}``, V2 from V1...: each line doubles the value (V0 is 16 bytes)."""
    chain = [f"ENV V{i}=${{V{i - 1}}}${{V{i - 1}}}\n" for i in range(1, lines)]
    return BASE + "ENV V0=xxxxxxxxxxxxxxxx\n" + "".join(chain)


def up_to(size: int, head: str, line: str) -> str:
    return head + line * ((size - len(head)) // len(line))


def peak_bytes(text: str) -> tuple[list[Violation], int]:
    tracemalloc.start()
    try:
        violations = check_dockerfile(text, DEFAULT)
        return violations, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_doubling_env_chain_is_refused_at_the_line_past_the_word_bound() -> None:
    # 24 lines (549 bytes) once asked for 686 MiB; V12 is 64 KiB, V13 would be 128 KiB.
    violations, peak = peak_bytes(doubling_chain(24))

    assert [v.line for v in violations] == [15]  # ENV V13
    assert "ENV substitutes more than 64 KiB of variable values into one word" in (
        violations[0].message
    )
    assert "xxxx" not in violations[0].message
    assert peak < 8 * 2**20


def test_substitution_in_the_whole_file_is_bounded_and_the_check_stops_there() -> None:
    value = "x" * 60_000  # under the word bound: each line alone is fine
    text = BASE + f"ENV A={value}\n" + "ENV B=$A\n" * 18 + "VOLUME /data\n"

    violations = check_dockerfile(text, DEFAULT)

    # 17 copies are 1,020,000 characters, the 18th passes 1 MiB: line 2 + 18.
    assert [v.line for v in violations] == [20]
    assert "past 1 MiB in all" in violations[0].message


def test_stages_carrying_many_variables_over_count_against_the_file_bound() -> None:
    head = "FROM localhost/podium/python:bookworm AS s0\n" + "".join(
        f"ENV E{i}={i}\n" for i in range(1_600)
    )
    stages = "".join(f"FROM s{i} AS s{i + 1}\n" for i in range(2_000))

    violations, peak = peak_bytes(head + stages)

    assert len(violations) == 1
    assert violations[0].message.startswith("FROM takes the file's variable substitution past")
    assert peak < 32 * 2**20


def test_a_refusal_repeats_only_the_start_of_a_long_expansion() -> None:
    text = BASE + "ENV A=" + "x" * 60_000 + "\nCOPY --from=$A a b\n"

    (violation,) = check_dockerfile(text, DEFAULT)

    assert violation.line == 3
    assert "`$A` (that is, `" + "x" * 512 + "...`)" in violation.message
    assert len(violation.message) < 800


@pytest.mark.parametrize(
    "text",
    [
        doubling_chain(2_500),
        up_to(KIB64, BASE + "ENV A=" + "x" * 30_000 + "\n", "ADD $A$A x\n"),
        up_to(KIB64, BASE + "RUN echo \\\n", "  a \\\n") + "  end\n",
        up_to(KIB64 // 2, BASE + "RUN", " <<h") + "\n" + "body\n" * (KIB64 // 10),
        up_to(KIB64, BASE + "ARG", " a") + "\n",
        BASE + "COPY --from=" + "${A:-" * 6_000 + "}" * 6_000 + " a b\n",
        BASE + "ONBUILD " * 8_000 + "RUN <<EOF\nFROM scratch\nEOF\n",
        BASE + "FROM " + "a." * 30_000 + "!\n",
        "FROM " + "a" * (KIB64 - 6) + "\n",
    ],
    ids=[
        "doubling",
        "wide",
        "continuation",
        "heredocs",
        "args",
        "nesting",
        "onbuild",
        "domain-regex",
        "long-word",
    ],
)
def test_a_64_kib_worst_case_is_judged_in_bounded_memory_without_raising(text: str) -> None:
    assert len(text.encode()) <= KIB64 + 100

    violations, peak = peak_bytes(text)

    assert all(isinstance(v, Violation) for v in violations)
    assert all(len(v.message) < 1_200 for v in violations)
    assert peak < 16 * 2**20


def test_onbuild_of_onbuild_holds_no_heredoc_as_in_docker() -> None:
    # Docker looks for heredocs in an ONBUILD's own instruction only, one level down.
    # So the VOLUME below is an instruction of its own (and EOF one Docker rejects).
    text = BASE + "ONBUILD ONBUILD RUN <<EOF\nVOLUME /x\nEOF\n"

    assert lines_of(text) == [2, 3]
    assert lines_of(BASE + "ONBUILD RUN <<EOF\nVOLUME /x\nEOF\n") == []


def test_honest_dockerfiles_with_variables_and_stages_still_pass() -> None:
    text = (
        "ARG BASE=localhost/podium/python:bookworm\n"
        "FROM ${BASE} AS deps\n"
        "ENV PIP_NO_CACHE_DIR=1 VENV=/opt/venv\n"
        "ENV PATH=${VENV}/bin:${PATH:-/usr/bin}\n"
        "RUN python -m venv $VENV\n"
        "FROM deps AS final\n"
        "LABEL org.example.path=$PATH\n"
        "COPY --from=deps ${VENV} ${VENV}\n"
    )

    assert check_dockerfile(text, DEFAULT) == []
    kit = (Path(__file__).resolve().parents[2] / "examples/starter-kit/Dockerfile").read_text()
    assert check_dockerfile(kit, DEFAULT) == []
