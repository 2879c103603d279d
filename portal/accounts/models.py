"""Personal API tokens: an entrant may hold several, each revocable."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models


def new_token_key() -> str:
    return secrets.token_hex(20)


class ApiToken(models.Model):
    key = models.CharField(max_length=40, unique=True, default=new_token_key)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    label = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        db_table = "api_apitoken"  # its table since it lived in the api app

    def __str__(self) -> str:
        return f"{self.label or 'token'} ({self.user})"
