"""Staff Markdown as safe HTML: the one renderer of every text staff write in Markdown
(a contest's summary and facts, announcements), on the pages, in the Atom feed and the API.

Pure (no Django): Python-Markdown turns the text into HTML, then nh3 (the Rust ``ammonia``
sanitiser) keeps only an allow-list of tags and attributes, whatever made them (Markdown
or raw HTML in the text). Scripts and styles go with their content, every other tag off
the list (images, iframes, forms) and every attribute off it (``on*``, ``style``) are
dropped, a link whose scheme is not http, https or mailto loses its target, and every
link gets ``rel="nofollow noopener noreferrer"``. Mail carries the Markdown source itself,
which reads as plain text.
"""

from __future__ import annotations

import markdown
import nh3

TAGS = frozenset(
    {
        "a",
        "abbr",
        "b",
        "blockquote",
        "br",
        "code",
        "dd",
        "del",
        "dl",
        "dt",
        "em",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "hr",
        "i",
        "li",
        "ol",
        "p",
        "pre",
        "strong",
        "sub",
        "sup",
        "table",
        "tbody",
        "td",
        "th",
        "thead",
        "tr",
        "ul",
    }
)
ATTRIBUTES = {"a": {"href", "title"}, "abbr": {"title"}, "th": {"align"}, "td": {"align"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})
EXTENSIONS = ["tables", "fenced_code", "sane_lists"]


def markdown_html(text: str) -> str:
    """``text`` (Markdown) as sanitised HTML, safe to put in a page as it is."""
    rendered = markdown.markdown(text, extensions=EXTENSIONS, output_format="html")
    return nh3.clean(
        rendered,
        tags=set(TAGS),
        attributes={tag: set(names) for tag, names in ATTRIBUTES.items()},
        url_schemes=set(URL_SCHEMES),
        link_rel="nofollow noopener noreferrer",
        strip_comments=True,
    )
