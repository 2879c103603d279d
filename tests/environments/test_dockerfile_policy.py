"""The Dockerfile policy, checked before any environment build (pure: no database)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.environments.dockerfile_policy import (
    Violation,
    check_dockerfile,
    format_violations,
    normalize_image,
)

PODIUM = ["podium/"]
DEFAULT = ["podium/", "docker.io/library/"]  # the benchmark's default allowed_registries

STARTER_KIT = """\
ARG BASE=podium/python:bookworm
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
        ("podium/python:bookworm", "docker.io/podium/python:bookworm"),
        ("docker.io/python:3.11", "docker.io/library/python:3.11"),
        ("index.docker.io/library/python", "docker.io/library/python"),
        ("ghcr.io/a/b@sha256:" + "0" * 64, "ghcr.io/a/b@sha256:" + "0" * 64),
        ("python@sha256:" + "1" * 64, "docker.io/library/python@sha256:" + "1" * 64),
        ("localhost/x", "localhost/x"),
        ("localhost:5000/x:1", "localhost:5000/x:1"),
        ("registry.lab:443/team/img", "registry.lab:443/team/img"),
        ("podium/", "docker.io/podium/"),
        ("docker.io/", "docker.io/"),
    ],
)
def test_normalize_image(ref: str, expected: str) -> None:
    assert normalize_image(ref) == expected


# FROM ------------------------------------------------------------------------------------


def test_the_starter_kit_is_allowed_with_podium_images() -> None:
    assert check_dockerfile(STARTER_KIT, PODIUM) == []
    assert check_dockerfile(STARTER_KIT, DEFAULT) == []


def test_the_starter_kit_is_refused_when_only_docker_hub_library_is_allowed() -> None:
    assert check_dockerfile(STARTER_KIT, ["docker.io/library/"]) == [
        Violation(
            2,
            "FROM names `${BASE}` (that is, `podium/python:bookworm`), which is not from an "
            "allowed registry (docker.io/library/).",
        )
    ]


def test_build_args_override_arg_defaults() -> None:
    assert lines_of(STARTER_KIT, PODIUM, BASE="evil/python:3.11") == [2]
    assert lines_of(STARTER_KIT, ["docker.io/library/"], BASE="python:3.11") == []
    # A build argument for an undeclared ARG changes nothing.
    assert lines_of("FROM podium/python\n", PODIUM, OTHER="evil/x") == []


def test_a_refused_image_is_named_with_the_allowed_list() -> None:
    assert check_dockerfile("FROM evil/miner:latest\n", DEFAULT) == [
        Violation(
            1,
            "FROM names `evil/miner:latest`, which is not from an allowed registry "
            "(podium/, docker.io/library/).",
        )
    ]


@pytest.mark.parametrize(
    "text",
    [
        "FROM ${TAG}\n",
        "ARG BASE\nFROM $BASE\n",
        "FROM podium/python:${VERSION}\n",
        "FROM podium/a\nARG LATER=podium/b\nFROM ${LATER}\n",  # a stage ARG is not global
        "ARG A=x\nFROM ${A#x}\n",  # a substitution the policy cannot check
    ],
)
def test_a_from_with_a_variable_without_value_is_refused(text: str) -> None:
    violations = check_dockerfile(text, DEFAULT)
    assert len(violations) == 1
    assert violations[0].line == text.count("\n")
    assert "FROM uses the variable" in violations[0].message


def test_variable_forms_resolve() -> None:
    assert lines_of("ARG BASE\nFROM $BASE\n", PODIUM, BASE="podium/x") == []
    assert lines_of("FROM ${BASE:-podium/python:bookworm}\n", PODIUM) == []
    assert lines_of("ARG V=\nFROM podium/python${V:+:${V}}\n", PODIUM) == []
    assert lines_of('ARG REG=podium\nARG BASE="${REG}/python"\nFROM $BASE\n', PODIUM) == []
    assert lines_of("ARG REG=evil\nFROM ${REG}/python\n", PODIUM) == [2]
    assert lines_of("FROM ${BASE:-evil/python}\n", PODIUM) == [1]


def test_stages_scratch_digests_and_platform_flags() -> None:
    text = """\
FROM --platform=$BUILDPLATFORM podium/python:bookworm AS Builder
RUN make
FROM scratch AS empty
FROM builder
FROM BUILDER AS final
FROM python@sha256:3f1a2e9c0b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f
FROM ghcr.io/podium/runtime@sha256:3f1a2e9c0b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f
"""
    assert lines_of(text, ["podium/", "docker.io/library/python", "ghcr.io/podium/"]) == []
    assert lines_of(text, ["podium/"]) == [6, 7]


def test_a_stage_name_is_only_a_stage_after_it_is_defined() -> None:
    assert lines_of("FROM later\nFROM podium/a AS later\n", PODIUM) == [1]


def test_local_prefixes_match_local_names_but_never_a_registry_host() -> None:
    assert lines_of("FROM podium/python\n", ["podium"]) == []
    assert lines_of("FROM podium.evil.com/python\n", ["podium"]) == [1]
    assert lines_of("FROM podium:5000/python\n", ["podium/"]) == [1]
    assert lines_of("FROM ghcr.io/podium/python\n", ["podium/"]) == [1]
    assert lines_of("FROM docker.io/podium/python\n", ["podium/"]) == []
    assert lines_of("FROM ghcr.io/podium/python\n", ["ghcr.io/podium/"]) == []


def test_an_empty_prefix_allows_nothing() -> None:
    assert lines_of("FROM podium/python\n", ["", "  "]) == [1]


def test_from_without_an_image() -> None:
    assert only_message("FROM\n") == "FROM needs an image name."


# ADD, COPY, RUN --mount -------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "http://example.com/model.bin",
        "https://example.com/model.bin",
        "HTTPS://EXAMPLE.COM/model.bin",
        "git@github.com:someone/repo.git",
        "git://example.com/repo.git",
        "ssh://git@example.com/repo.git",
        "github.com/someone/repo",
        "https://github.com/someone/repo.git#main",
    ],
)
def test_add_from_the_network_is_refused(source: str) -> None:
    text = f"FROM podium/python\nADD {source} /opt/\n"
    message = only_message(text)
    assert message.startswith("ADD cannot fetch")
    assert lines_of(text) == [2]


def test_add_remote_in_every_spelling() -> None:
    text = """\
FROM podium/python
ARG WEIGHTS=https://example.com/w.bin
add --chown=1000 local.txt $WEIGHTS /opt/
ADD ["https://example.com/x", "/x"]
ADD --checksum=sha256:24454f830cdb571e2c4ad15481119c43b3cafd48dd869a9b2945d1036d1dc68d w.bin /w
ONBUILD ADD https://example.com/y /y
ADD local.tar.gz /opt/
COPY model/ /opt/model/
"""
    assert lines_of(text) == [3, 4, 5, 6]


def test_add_with_a_variable_without_value_is_refused() -> None:
    assert "uses the variable `SRC`" in only_message("FROM podium/a\nADD $SRC /x\n")
    assert lines_of("FROM podium/a\nARG SRC=src\nADD $SRC /x\n") == []
    assert lines_of("FROM podium/a\nENV SRC=src\nADD ${SRC}/a.txt /x\n") == []


def test_copy_and_mounts_from_stages_are_fine_but_images_are_checked() -> None:
    text = """\
FROM podium/python AS build
RUN make
FROM podium/python
COPY --from=build /out /opt
COPY --from=BUILD /out /opt
COPY --from=0 /out /opt
COPY --from=evil/tools:1 /bin/x /usr/bin/x
RUN --mount=type=bind,from=build,target=/b ls /b
RUN --mount=type=bind,from=evil/tools,target=/t ls /t
COPY --from=python:3.11 /usr/local /usr/local
"""
    violations = check_dockerfile(text, PODIUM)
    assert [v.line for v in violations] == [7, 9, 10]
    assert violations[0].message == (
        "COPY --from names the image `evil/tools:1`, which is not from an allowed registry "
        "(podium/)."
    )


def test_copy_from_a_later_stage_is_a_stage() -> None:
    text = "FROM podium/a AS one\nCOPY --from=two /x /x\nFROM podium/b AS two\n"
    assert lines_of(text, PODIUM) == []


# Reading the file like Docker does -----------------------------------------------------------


def test_line_numbers_survive_continuations_and_comments() -> None:
    text = """\
# A comment
FROM podium/python

RUN apt-get update && \\
    # a comment inside the continuation
    apt-get install -y gcc \\

    && rm -rf /var/lib/apt/lists/*
ADD \\
    https://example.com/x /x
FROM evil/one
"""
    assert lines_of(text) == [9, 11]


def test_a_continuation_joins_words_like_docker() -> None:
    assert lines_of("FROM pod\\\nium/python\n", PODIUM) == []
    assert lines_of("FROM ev\\\nil/python\n", PODIUM) == [1]


def test_the_escape_directive() -> None:
    text = """\
# escape=`
FROM podium/python
ADD `
    https://example.com/x C:\\x
RUN echo C:\\
FROM evil/one
"""
    assert lines_of(text) == [3, 6]


def test_the_escape_directive_only_counts_at_the_top() -> None:
    text = "FROM podium/python\n# escape=`\nADD `\nhttps://example.com/x /x\n"
    # Here ` is no escape: line 4 is an instruction of its own (Docker would refuse it).
    assert lines_of(text) == []


def test_case_insensitive_instructions() -> None:
    assert lines_of("from evil/x\nAdd https://example.com/x /x\n") == [1, 2]


def test_heredoc_bodies_are_skipped_and_do_not_shift_line_numbers() -> None:
    text = (
        "FROM podium/python\n"
        "RUN <<EOF\n"
        "FROM evil/inside-heredoc\n"
        "ADD https://example.com/inside /x\n"
        "EOF\n"
        'COPY <<-"CONF" /etc/app.conf\n'
        "\tFROM evil/also-inside\n"
        "\tCONF\n"
        "RUN <<ONE cat <<TWO > /dev/null\n"
        "ADD http://inside/one /x\n"
        "ONE\n"
        "ADD http://inside/two /x\n"
        "TWO\n"
        "FROM evil/after\n"
    )
    assert lines_of(text) == [14]


def test_a_quoted_heredoc_marker_is_not_a_heredoc() -> None:
    text = 'FROM podium/python\nRUN echo "<<EOF"\nFROM evil/x\nEOF\n'
    assert lines_of(text) == [3]


def test_empty_files_and_files_without_from() -> None:
    assert check_dockerfile("", DEFAULT) == [
        Violation(1, "The Dockerfile is empty; it needs at least a FROM line.")
    ]
    assert lines_of("# only a comment\n\n   \n") == [1]
    assert check_dockerfile("\n\nRUN echo hi\n", DEFAULT) == [
        Violation(3, "The Dockerfile has no FROM instruction.")
    ]


def test_the_syntax_directive_may_name_only_the_official_frontend() -> None:
    assert lines_of("# syntax=docker/dockerfile:1\nFROM podium/python\n") == []
    assert lines_of("# syntax = docker.io/docker/dockerfile:1.7-labs\nFROM podium/a\n") == []
    assert lines_of("# syntax=evil/frontend\nFROM podium/python\n") == [1]
    assert lines_of("#!/usr/bin/env docker\n# syntax=evil/frontend\nFROM podium/a\n") == [2]
    assert lines_of("// syntax=evil/frontend\nFROM podium/python\n") == [1]


def test_violations_come_sorted_by_line() -> None:
    text = "FROM evil/a\nADD https://x.example/y /y\nFROM evil/b\n"
    assert lines_of(text) == [1, 2, 3]


def test_format_violations() -> None:
    violations = [Violation(3, "FROM names `x`."), Violation(7, "ADD cannot fetch `y`.")]
    assert format_violations(violations) == "line 3: FROM names `x`; line 7: ADD cannot fetch `y`."
    assert format_violations([]) == ""


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
        "from ",
        "AS ",
        "--from=",
        "--mount=type=bind,from=",
        "--platform=",
        "--checksum=",
        "podium/x",
        "evil/y",
        "scratch",
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
        "A=podium/z",
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
    violations = check_dockerfile(text, DEFAULT, {"A": "podium/a"})
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
