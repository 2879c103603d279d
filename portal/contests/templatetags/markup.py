"""``{% load markup %}``: ``{{ text|markdown }}`` renders staff Markdown, sanitised by
``portal.contests.markup`` (the only place that makes it safe HTML)."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString, mark_safe

from portal.contests.markup import markdown_html

register = template.Library()


@register.filter(name="markdown")
def markdown_filter(text: str | None) -> SafeString:
    return mark_safe(markdown_html(text or ""))  # noqa: S308 (sanitised by nh3 just above)
