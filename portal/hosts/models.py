"""The scoring fleet: one row per scoring host, its machine's facts and its heartbeat."""

from __future__ import annotations

from django.db import models


class ScoringHost(models.Model):
    """One machine that scores runs, alone on it, for one hardware class.

    A scoring worker registers its host at start (``services.host_register``: upsert by
    ``name``, facts refreshed) and heartbeats while it runs. ``status`` is staff's word:
    ``active`` hosts take work; ``draining`` hosts finish what they hold and take no more;
    ``retired`` hosts are gone from the fleet (and from the API's list). Whether a host
    is *online* is read from its heartbeat (``selectors.host_state``), never stored.
    """

    ACTIVE = "active"
    DRAINING = "draining"
    RETIRED = "retired"
    STATUSES = [(ACTIVE, "active"), (DRAINING, "draining"), (RETIRED, "retired")]

    name = models.CharField(max_length=100, unique=True)
    hardware_class = models.CharField(
        max_length=64,
        db_index=True,
        help_text="The class of benchmarks this host scores (a benchmark's hardware_class).",
    )
    architecture = models.CharField(max_length=32, blank=True)
    cpu_model = models.CharField(max_length=200, blank=True)
    cpu_cores = models.PositiveIntegerField(default=0)
    memory_bytes = models.PositiveBigIntegerField(default=0)
    gpus = models.JSONField(
        default=list,
        blank=True,
        help_text='One {"index", "name", "uuid"} per GPU (nvidia-smi -L); empty when none.',
    )
    docker_version = models.CharField(max_length=64, blank=True)
    kernel_version = models.CharField(max_length=200, blank=True)
    supervisor_sha256 = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=16, choices=STATUSES, default=ACTIVE)
    registered_at = models.DateTimeField()
    last_heartbeat_at = models.DateTimeField()

    class Meta:
        ordering = ["hardware_class", "name"]
        permissions = [("manage_host", "Can drain, resume and retire scoring hosts")]

    def __str__(self) -> str:
        return self.name
