"""Metered estimation (docs/rules.md, "Metered estimation"): a phase's rules, its suites
of generated MLPs, the entrants' estimators and what grading them found.

A benchmark of kind ``estimation`` is one phase; its :class:`PhaseRules` row holds every
number of the phase's rules. A :class:`Suite` is a whestbench dataset folder (MLPs and
their Monte Carlo reference) under ``PODIUM_DATA_DIR``: the phase suite scores every
entry (its first ``public_mlps`` MLPs feed the live board, the rest are withheld until
the close), the final suite, generated from held-out seeds, scores the final rerun, and
the public suite is for entrants to download and run locally.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from portal.contests.models import Benchmark

POSITIVE = MinValueValidator(1)


class PhaseRules(models.Model):
    """One phase's rules (seed contest's table: one row per phase)."""

    CAPPED = "capped"
    PRICED = "priced"
    RESIDUAL_RULES = [
        (CAPPED, "capped: residual time over the cap fails the MLP; C = F"),
        (PRICED, "priced: residual time is charged at lambda FLOPs per second; C = F + lambda R"),
    ]

    benchmark = models.OneToOneField(
        Benchmark, on_delete=models.CASCADE, related_name="estimation_rules"
    )
    width = models.PositiveIntegerField(validators=[POSITIVE], help_text="MLP width n.")
    depth = models.PositiveIntegerField(
        validators=[POSITIVE], help_text="Hidden layers L (weight matrices)."
    )
    flop_budget = models.PositiveBigIntegerField(
        validators=[POSITIVE], help_text="The FLOP budget B per MLP."
    )
    residual_rule = models.CharField(max_length=8, choices=RESIDUAL_RULES, default=CAPPED)
    residual_cap_ms = models.PositiveIntegerField(
        default=400,
        validators=[POSITIVE],
        help_text="Under the capped rule: residual wall time per MLP above this fails it.",
    )
    lambda_flops_per_second = models.FloatField(
        default=1e11,
        validators=[MinValueValidator(0.0)],
        help_text="Under the priced rule: FLOPs charged per second of residual time.",
    )
    wall_cap_s = models.PositiveIntegerField(
        default=120, validators=[POSITIVE], help_text="Hard wall-clock cap per MLP (seconds)."
    )
    entrant_cores = models.PositiveSmallIntegerField(
        default=1,
        validators=[POSITIVE],
        help_text="Physical cores the entrant's process runs on (the meter runs beside it).",
    )
    public_mlps = models.PositiveIntegerField(
        default=50, validators=[POSITIVE], help_text="MLPs of the phase suite on the live board."
    )
    withheld_mlps = models.PositiveIntegerField(
        default=50, help_text="MLPs of the phase suite shown only after the close."
    )
    final_mlps = models.PositiveIntegerField(
        default=100,
        validators=[POSITIVE],
        help_text="MLPs of the final suite, generated from held-out seeds, for the rerun.",
    )
    local_mlps = models.PositiveIntegerField(
        default=100,
        validators=[POSITIVE],
        help_text="MLPs of the public suite that entrants download for their local runs.",
    )
    reference_samples = models.PositiveBigIntegerField(
        default=1_000_000,
        validators=[POSITIVE],
        help_text="Monte Carlo samples per MLP of the reference (generation's own).",
    )
    nominations_max = models.PositiveSmallIntegerField(
        default=2,
        validators=[POSITIVE],
        help_text="Submissions per team the final rerun scores (nominated, else its best).",
    )

    class Meta:
        verbose_name = "estimation phase rules"
        verbose_name_plural = "estimation phase rules"

    def __str__(self) -> str:
        return f"{self.benchmark.slug}: {self.width}x{self.depth}, B={self.flop_budget:.3g}"

    @property
    def suite_mlps(self) -> int:
        return self.public_mlps + self.withheld_mlps


class Suite(models.Model):
    """A whestbench dataset: generated from a private seed on a scoring host, or imported."""

    PHASE = "phase"
    FINAL = "final"
    PUBLIC = "public"
    ROLES = [
        (PHASE, "phase: public + withheld"),
        (FINAL, "final: the private rerun"),
        (PUBLIC, "public: downloadable, for entrants' local runs"),
    ]
    GENERATING = "generating"
    READY = "ready"
    FAILED = "failed"
    STATUSES = [(GENERATING, "generating"), (READY, "ready"), (FAILED, "failed")]
    GENERATED = "generated"
    IMPORTED = "imported"
    ORIGINS = [(GENERATED, "generated"), (IMPORTED, "imported")]

    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="suites")
    role = models.CharField(max_length=8, choices=ROLES)
    status = models.CharField(max_length=12, choices=STATUSES, default=GENERATING)
    origin = models.CharField(max_length=10, choices=ORIGINS)
    n_mlps = models.PositiveIntegerField()
    width = models.PositiveIntegerField()
    depth = models.PositiveIntegerField()
    n_samples = models.PositiveBigIntegerField()
    seed_sha256 = models.CharField(
        max_length=64, blank=True, help_text="SHA-256 of the private seed (never the seed)."
    )
    seeds_sha256 = models.CharField(
        max_length=64, blank=True, help_text="SHA-256 of the per-MLP seeds derived from it."
    )
    dataset_sha256 = models.CharField(
        max_length=64, blank=True, help_text="SHA-256 over the dataset folder's files."
    )
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    generated_on = models.CharField(max_length=100, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    stats = models.JSONField(
        default=dict,
        blank=True,
        help_text="What generation recorded: each MLP's mean final-layer variance (the "
        "Monte Carlo band), the generation's seconds.",
    )
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["benchmark", "role"], name="one_suite_per_role")
        ]

    def __str__(self) -> str:
        return f"{self.benchmark.slug}/{self.role}"


class Entry(models.Model):
    """An entrant's estimator (the tarball ``whest package`` makes), charged on acceptance."""

    ACCEPTED = "accepted"
    GRADING = "grading"
    GRADED = "graded"
    FAILED = "failed"
    STATUSES = [
        (ACCEPTED, "accepted"),
        (GRADING, "grading"),
        (GRADED, "graded"),
        (FAILED, "failed"),
    ]

    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="entries")
    entrant = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    team = models.ForeignKey(
        "teams.Team",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        help_text="The team it was charged to (its daily allowance), if any.",
    )
    status = models.CharField(max_length=10, choices=STATUSES, default=ACCEPTED)
    submitted_at = models.DateTimeField(db_index=True)
    archive_name = models.CharField(max_length=255)
    archive_sha256 = models.CharField(max_length=64)
    archive_bytes = models.PositiveBigIntegerField()
    estimator_class = models.CharField(max_length=200, blank=True)
    failure_reason = models.TextField(blank=True)
    host = models.CharField(max_length=100, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    graded_at = models.DateTimeField(null=True, blank=True)
    public_score = models.FloatField(null=True, blank=True)
    withheld_score = models.FloatField(null=True, blank=True)
    public_mse = models.FloatField(null=True, blank=True)
    mean_flops = models.FloatField(null=True, blank=True)
    mean_effective_compute = models.FloatField(null=True, blank=True)
    fallbacks = models.PositiveIntegerField(null=True, blank=True)
    results = models.JSONField(
        default=dict, blank=True, help_text="Per MLP: what the grader measured and scored."
    )
    nominated = models.BooleanField(default=False)
    refunded = models.BooleanField(
        default=False, help_text="Not counted against the day's allowance (a grader fault)."
    )

    class Meta:
        verbose_name_plural = "entries"
        indexes = [models.Index(fields=["benchmark", "status", "public_score"])]

    def __str__(self) -> str:
        return f"entry {self.pk} ({self.benchmark.slug})"


class FinalScore(models.Model):
    """An entry's grade on the final suite (the private rerun that decides prizes)."""

    entry = models.OneToOneField(Entry, on_delete=models.CASCADE, related_name="final")
    suite = models.ForeignKey(Suite, on_delete=models.PROTECT)
    status = models.CharField(max_length=10, choices=Entry.STATUSES, default=Entry.ACCEPTED)
    score = models.FloatField(null=True, blank=True)
    fallbacks = models.PositiveIntegerField(null=True, blank=True)
    results = models.JSONField(default=dict, blank=True)
    failure_reason = models.TextField(blank=True)
    queued_at = models.DateTimeField()
    graded_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"final score of entry {self.entry_id}"


class EntryReview(models.Model):
    """The review before prizes of an entry in a prize position of the final standings
    (docs/rules.md, "Metered estimation"): staff read the estimator's source and clear it
    or disqualify it, with a reason, audited. A disqualified entry leaves the final
    standings (the next team moves up). Its states are those of the timed benchmarks'
    provenance review (``submissions.ProvenanceReview``)."""

    UNDER_REVIEW = "under_review"
    CLEARED = "cleared"
    DISQUALIFIED = "disqualified"
    STATUSES = [(s, s) for s in (UNDER_REVIEW, CLEARED, DISQUALIFIED)]

    entry = models.OneToOneField(Entry, on_delete=models.CASCADE, related_name="review")
    status = models.CharField(max_length=16, choices=STATUSES, default=UNDER_REVIEW)
    opened_at = models.DateTimeField()
    opened_because = models.CharField(max_length=200)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decision_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        permissions = [
            ("decide_entry_review", "Can clear or disqualify an estimation entry under review")
        ]

    def __str__(self) -> str:
        return f"review of entry {self.entry_id} ({self.status})"


class EstimationStandingRow(models.Model):
    """One frozen row of a phase's published final standings (``standings.Standings``):
    names and ids copied, so that later changes never reach it."""

    standings = models.ForeignKey(
        "standings.Standings", on_delete=models.CASCADE, related_name="estimation_rows"
    )
    position = models.PositiveIntegerField()
    rank = models.PositiveIntegerField()
    team = models.CharField(max_length=150, blank=True)
    entrant = models.CharField(max_length=150)
    entry_id = models.PositiveBigIntegerField()
    score = models.FloatField()

    class Meta:
        ordering = ["standings", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["standings", "position"], name="one_estimation_row_per_position"
            )
        ]

    def __str__(self) -> str:
        return f"{self.rank}. {self.team or self.entrant}"
