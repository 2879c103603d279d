"""Staff Markdown is rendered sanitised: what a hostile (or careless) text carries never
runs in a visitor's browser, and ordinary Markdown still reads as intended."""

from __future__ import annotations

import re

import pytest

from portal.contests.markup import markdown_html

HOSTILE = [
    "<script>alert(document.cookie)</script>",
    "<SCRIPT SRC=//evil.example/x.js></SCRIPT>",
    '<img src="x" onerror="alert(1)">',
    '<a href="https://podium.example" onclick="alert(1)">prizes</a>',
    '<div onmouseover="alert(1)">hover</div>',
    "[click me](javascript:alert(1))",
    "[click me](JaVaScRiPt:alert(1))",
    '<a href="jav&#x09;ascript:alert(1)">tabbed</a>',
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    '<iframe src="https://evil.example"></iframe>',
    "<style>body { display: none }</style>",
    '<svg onload="alert(1)"><circle r="1"/></svg>',
    '<form action="https://evil.example"><input name="password"></form>',
    '<p style="position:fixed;top:0">overlay</p>',
]


@pytest.mark.parametrize("text", HOSTILE)
def test_scripts_handlers_and_dangerous_links_are_stripped(text):
    rendered = markdown_html(f"Before\n\n{text}\n\nAfter").lower()

    assert "<script" not in rendered
    assert "javascript:" not in rendered and "data:" not in rendered
    assert not re.search(r"\son\w+\s*=", rendered)  # no event handler attribute
    for tag in ("<iframe", "<style", "<svg", "<form", "<input", "<img"):
        assert tag not in rendered
    assert "style=" not in rendered
    assert "<p>before</p>" in rendered and "<p>after</p>" in rendered


def test_a_stripped_link_keeps_its_text_and_loses_its_target():
    rendered = markdown_html("[the rules](javascript:alert(1))")

    assert "the rules" in rendered
    assert "href" not in rendered


def test_ordinary_markdown_renders():
    text = (
        "## Prizes\n\n"
        "1. **First**: 5,000 USD\n"
        "2. *Second*: 2,000 USD\n\n"
        "See [the rules](https://podium.example/rules) or `podium submit`.\n\n"
        "| rank | prize |\n|---|---|\n| 1 | 5,000 |\n"
    )

    rendered = markdown_html(text)

    assert "<h2>Prizes</h2>" in rendered
    assert "<ol>" in rendered and "<strong>First</strong>" in rendered
    assert "<em>Second</em>" in rendered
    assert '<a href="https://podium.example/rules" rel="nofollow noopener noreferrer">' in rendered
    assert "<code>podium submit</code>" in rendered
    assert "<table>" in rendered and "<td>5,000</td>" in rendered


def test_markup_inside_code_is_shown_as_text():
    rendered = markdown_html("Write `<script>` in a code span.")

    assert "<code>&lt;script&gt;</code>" in rendered
