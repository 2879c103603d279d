"""API tokens in the admin: listed and revocable (deleted), never created or shown in full."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from portal.accounts.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    list_display = ["user", "label", "key_prefix", "created_at", "last_used_at"]
    search_fields = ["user__username", "label"]
    list_select_related = ["user"]
    fields = ["user", "label", "key_prefix", "created_at", "last_used_at"]
    readonly_fields = ["user", "label", "key_prefix", "created_at", "last_used_at"]

    @admin.display(description="key")
    def key_prefix(self, token: ApiToken) -> str:
        return f"{token.key[:6]}…"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
