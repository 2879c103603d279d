"""What the apps' admin pages share: read-only model admins and preformatted text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.http import HttpRequest
from django.utils.html import format_html

from portal.core import storage


def preformatted(text: str) -> str:
    return format_html('<pre style="white-space: pre-wrap">{}</pre>', text or "(empty)")


def log_tail_html(path: Path) -> str:
    """The last lines of a log for a read-only admin page."""
    return preformatted(storage.read_tail(path, storage.LOG_TAIL_LINES))


class ReadOnlyMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
