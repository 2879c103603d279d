"""Entrants' Docker environments (attempt-free builds) and their timelines."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Environment(models.Model):
    QUEUED = "queued"
    BUILDING = "building"
    READY = "ready"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    TOO_LARGE = "too_large"
    REMOVED = "removed"
    STATUSES = [(s, s) for s in (QUEUED, BUILDING, READY, FAILED, TIMED_OUT, TOO_LARGE, REMOVED)]
    RETRYABLE = (FAILED, TIMED_OUT, TOO_LARGE)

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="environments"
    )
    benchmark = models.ForeignKey(
        "contests.Benchmark", on_delete=models.CASCADE, related_name="environments"
    )
    name = models.CharField(max_length=100)
    status = models.CharField(max_length=16, choices=STATUSES, default=QUEUED)
    dockerfile = models.TextField()
    has_context = models.BooleanField(default=False)
    image_tag = models.CharField(max_length=200, blank=True)
    image_digest = models.CharField(max_length=100, blank=True)
    image_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    failure_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    build_started_at = models.DateTimeField(null=True, blank=True)
    build_finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.owner})"


class EnvironmentEvent(models.Model):
    """One status change of an environment: its timeline."""

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="events")
    status = models.CharField(max_length=16)
    at = models.DateTimeField()
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.environment_id} {self.status} at {self.at}"


class BuildNetworkCheck(models.Model):
    """What the latest live check of one build host's firewall found: one row per host.

    The worker checks, before each build, that every rule of the build network's policy
    is in place, and records the result through ``build_network_record``. ``policy``
    holds ``network``, ``subnet`` and ``bridge`` (strings) and ``blocked``, ``dns`` and
    ``allowed`` (lists of strings), as computed by the worker.
    """

    host = models.CharField(max_length=100, unique=True)
    checked_at = models.DateTimeField()
    enforced = models.BooleanField()
    problems = models.TextField(blank=True)
    policy = models.JSONField(default=dict)

    class Meta:
        ordering = ["host"]

    def __str__(self) -> str:
        verdict = "enforced" if self.enforced else "not enforced"
        return f"{self.host}: {verdict} at {self.checked_at}"

    def problem_lines(self) -> list[str]:
        return [line for line in self.problems.splitlines() if line.strip()]
