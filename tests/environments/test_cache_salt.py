"""The build cache salt: the per-entrant label Podium puts after every FROM (pure).

Two entrants who build the same lines must never share a cached step, or one could learn
the other's lines from "Using cache"; the label makes every stage's chain of images
different per entrant while one entrant's rebuilds stay cached.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podium_policy.dockerfile_policy import (
    build_cache_salt,
    check_dockerfile,
    salt_build_cache,
)

SALT = "0123456789abcdef" * 4
LABEL = f'LABEL podium.cache="{SALT}"\nENV NVIDIA_VISIBLE_DEVICES=void'
BUSYBOX = "localhost/podium/busybox:1"


# The salt ---------------------------------------------------------------------------


def test_one_entrant_always_gets_the_same_salt_and_two_entrants_never_share_one() -> None:
    alice = build_cache_salt("site-secret", 7)
    assert alice == build_cache_salt("site-secret", 7)
    assert alice != build_cache_salt("site-secret", 8)
    assert len(alice) == 64 and all(ch in "0123456789abcdef" for ch in alice)


def test_the_salt_depends_on_the_secret_so_nobody_can_compute_another_entrants() -> None:
    assert build_cache_salt("site-secret", 7) != build_cache_salt("another-secret", 7)


@settings(max_examples=200)
@given(st.integers(min_value=1, max_value=2**40), st.integers(min_value=1, max_value=2**40))
def test_distinct_entrants_get_distinct_salts(first: int, second: int) -> None:
    assert (build_cache_salt("k", first) == build_cache_salt("k", second)) == (first == second)


@pytest.mark.parametrize("salt", ["", "ABCDEF", 'ab"\nRUN id', "ab cd", "a" * 129])
def test_a_salt_that_is_not_lowercase_hex_is_refused(salt: str) -> None:
    with pytest.raises(ValueError, match="lowercase hex"):
        salt_build_cache(f"FROM {BUSYBOX}\n", salt)


def test_an_entrant_cannot_write_the_label_themselves() -> None:
    violations = check_dockerfile(f"FROM {BUSYBOX}\n{LABEL}\n", ["localhost/podium/"])
    assert [v.line for v in violations] == [2]
    assert "podium.cache" in violations[0].message


# The transform, by example ----------------------------------------------------------


def test_the_label_follows_the_from_line_and_nothing_else_changes() -> None:
    text = f"FROM {BUSYBOX}\nRUN echo a > /a\n"
    assert salt_build_cache(text, SALT) == f"FROM {BUSYBOX}\n{LABEL}\nRUN echo a > /a\n"


def test_directives_comments_and_args_before_the_first_from_stay_where_they_are() -> None:
    text = (
        "# syntax=docker/dockerfile:1\n"
        "# escape=\\\n"
        "# a comment\n"
        "\n"
        "ARG BASE=localhost/podium/busybox:1\n"
        "ARG TAG\n"
        "FROM ${BASE}\n"
        "RUN true\n"
    )
    assert salt_build_cache(text, SALT) == text.replace(
        "FROM ${BASE}\n", f"FROM ${{BASE}}\n{LABEL}\n"
    )


def test_every_stage_gets_the_label_whatever_its_form() -> None:
    text = (
        f"FROM --platform=linux/amd64 {BUSYBOX} AS build\n"
        "RUN echo built > /out\n"
        f"from {BUSYBOX} as tools\n"
        "From build\n"
        "COPY --from=build /out /out\n"
        "FROM 0\n"
    )
    assert salt_build_cache(text, SALT) == (
        f"FROM --platform=linux/amd64 {BUSYBOX} AS build\n{LABEL}\n"
        "RUN echo built > /out\n"
        f"from {BUSYBOX} as tools\n{LABEL}\n"
        f"From build\n{LABEL}\n"
        "COPY --from=build /out /out\n"
        f"FROM 0\n{LABEL}\n"
    )


def test_the_label_goes_after_the_last_line_of_a_continued_from() -> None:
    text = "\n".join(
        [
            "FROM \\",
            "  # a comment inside the continuation",
            "",
            f"  {BUSYBOX} \\",
            "  AS base",
            "RUN true\n",
        ]
    )
    assert salt_build_cache(text, SALT) == text.replace("  AS base\n", f"  AS base\n{LABEL}\n")


def test_the_escape_directive_decides_what_continues_a_line() -> None:
    text = f"# escape=`\nFROM `\n  {BUSYBOX}\nRUN dir c:\\\nRUN true\n"
    assert salt_build_cache(text, SALT) == (
        f"# escape=`\nFROM `\n  {BUSYBOX}\n{LABEL}\nRUN dir c:\\\nRUN true\n"
    )


def test_a_from_inside_a_heredoc_body_is_not_an_instruction() -> None:
    text = f"FROM {BUSYBOX}\nRUN <<EOF\nFROM {BUSYBOX}\nEOF\nRUN true\n"
    assert salt_build_cache(text, SALT) == (
        f"FROM {BUSYBOX}\n{LABEL}\nRUN <<EOF\nFROM {BUSYBOX}\nEOF\nRUN true\n"
    )


def test_line_endings_and_a_missing_final_newline_are_kept() -> None:
    assert salt_build_cache(f"FROM {BUSYBOX}", SALT) == f"FROM {BUSYBOX}\n{LABEL}"
    assert salt_build_cache(f"FROM {BUSYBOX}\r\nRUN true\r\n", SALT) == (
        f"FROM {BUSYBOX}\r\n{LABEL}\nRUN true\r\n"
    )


def test_a_from_continued_to_the_end_of_the_file_builds_nothing_and_gets_no_label() -> None:
    text = f"FROM {BUSYBOX}\nRUN true\nFROM {BUSYBOX} \\\n# only comments follow\n\n"
    assert salt_build_cache(text, SALT) == (
        f"FROM {BUSYBOX}\n{LABEL}\nRUN true\nFROM {BUSYBOX} \\\n# only comments follow\n\n"
    )


def test_a_file_without_from_is_unchanged() -> None:
    assert salt_build_cache("# nothing here\nRUN true\n", SALT) == "# nothing here\nRUN true\n"
    assert salt_build_cache("", SALT) == ""


# The transform, generated -----------------------------------------------------------
# Each generated Dockerfile is built together with the text the transform must give: the
# generator knows where every FROM instruction ends, the transform has to find it.

_CASES = ("FROM", "from", "From", "fRoM")
_IMAGES = (BUSYBOX, "${BASE}", "localhost/podium/busybox@sha256:" + "ab" * 32, "0", "build")
_FILLER = (
    "",
    "# a comment",
    "   # an indented comment",
    "RUN echo FROM busybox",
    "run true",
    "COPY --from=0 /a /b",
    "RUN <<EOF\nFROM not-an-instruction\necho hi\nEOF",
    "RUN <<-EOF\n\tFROM still-not-one\n\tEOF",
    "ENV A=1 \\\n    B=2",
    "RUN echo \\\n  # comments go on a continuation\n\n  FROM-looking-word",
    "LABEL x=y",
)
_TOP = ("# syntax=docker/dockerfile:1", "# check=skip=all", "# a comment", "", "ARG BASE=x")


@st.composite
def _from_instruction(draw: st.DrawFn) -> str:
    words = [draw(st.sampled_from(_CASES))]
    if draw(st.booleans()):
        words.append("--platform=linux/amd64")
    words.append(draw(st.sampled_from(_IMAGES)))
    if draw(st.booleans()):
        words += [draw(st.sampled_from(("AS", "as"))), draw(st.sampled_from(("build", "b2")))]
    breaks = draw(st.lists(st.booleans(), min_size=len(words) - 1, max_size=len(words) - 1))
    text = words[0]
    for word, broken in zip(words[1:], breaks, strict=True):
        if broken:
            gap = draw(st.sampled_from(("", "# inside\n", "\n", "  \n# x\n")))
            text += " \\\n" + gap + "  " + word
        else:
            text += " " + word
    return text + draw(st.sampled_from(("", " ", "\t")))


@st.composite
def _dockerfile(draw: st.DrawFn) -> tuple[str, str]:
    """(a Dockerfile, what ``salt_build_cache`` must make of it)."""
    top = draw(st.lists(st.sampled_from(_TOP), max_size=4))
    plain: list[str] = list(top)
    salted: list[str] = list(top)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        instruction = draw(_from_instruction())
        plain.append(instruction)
        salted += [instruction, LABEL]
        body = draw(st.lists(st.sampled_from(_FILLER), max_size=4))
        plain += body
        salted += body
    ending = draw(st.sampled_from(("\n", "")))
    return "\n".join(plain) + ending, "\n".join(salted) + ending


@settings(max_examples=300)
@given(_dockerfile())
def test_every_generated_from_gets_exactly_one_label_right_after_it(
    case: tuple[str, str],
) -> None:
    text, expected = case
    assert salt_build_cache(text, SALT) == expected


@settings(max_examples=300)
@given(st.text(alphabet=st.sampled_from("FROMfrom \\\n#<EOF`=ab\t\r"), max_size=80))
def test_any_text_gets_only_whole_label_lines_added(text: str) -> None:
    salted = salt_build_cache(text, SALT)
    lines = salted.split("\n")
    added = set(LABEL.split("\n"))
    assert [line for line in lines if line not in added] == [
        line for line in text.split("\n") if line not in added
    ]
