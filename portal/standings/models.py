"""Final standings: nominations, a benchmark's final settings, the final rerun and the
published (frozen) standings with their corrections (docs/rules.md, "Final standings").

Kept out of ``portal.contests`` (its benchmark settings) on purpose: this app sits above
submissions and reads them; nothing below imports it.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


class FinalSettings(models.Model):
    """A benchmark's numbers for its end; a benchmark without a row has the defaults."""

    DEFAULT_FINAL_RUNS = 3
    DEFAULT_EXTRA_RUNS = 2
    DEFAULT_PRIZE_POSITIONS = 3

    benchmark = models.OneToOneField(
        "contests.Benchmark", on_delete=models.CASCADE, related_name="final_settings"
    )
    nomination_deadline = models.DateTimeField(
        null=True,
        blank=True,
        help_text="First instant nominations are refused; empty: the benchmark's closes_at.",
    )
    final_runs = models.PositiveSmallIntegerField(
        default=DEFAULT_FINAL_RUNS,
        validators=[MinValueValidator(1), MaxValueValidator(15)],
        help_text="Final runs of each nominated submission; ranked by their median.",
    )
    extra_runs = models.PositiveSmallIntegerField(
        default=DEFAULT_EXTRA_RUNS,
        validators=[MaxValueValidator(15)],
        help_text="More runs each for neighbours within the noise band; 0: tie at once.",
    )
    prize_positions = models.PositiveSmallIntegerField(
        default=DEFAULT_PRIZE_POSITIONS,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Ranks 1 to this are prize positions: on a benchmark with a validation-data "
        "boundary each such row must clear provenance review before publishing.",
    )

    class Meta:
        verbose_name_plural = "final settings"

    def __str__(self) -> str:
        return f"final settings of {self.benchmark}"

    def deadline(self, closes_at: dt.datetime) -> dt.datetime:
        return self.nomination_deadline or closes_at


class Nomination(models.Model):
    """One submission a team nominated for the final standings (at most two each; an
    entrant on their own is a team of one, ``team`` empty). ``entrant``: the member who
    named it."""

    benchmark = models.ForeignKey(
        "contests.Benchmark", on_delete=models.CASCADE, related_name="nominations"
    )
    team = models.ForeignKey(
        "teams.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    entrant = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    submission = models.ForeignKey(
        "submissions.Submission", on_delete=models.CASCADE, related_name="+"
    )
    nominated_at = models.DateTimeField()

    class Meta:
        ordering = ["benchmark", "entrant", "id"]
        constraints = [
            models.UniqueConstraint(fields=["submission"], name="one_nomination_per_submission")
        ]

    def __str__(self) -> str:
        return f"{self.entrant_id} nominates {self.submission_id}"


class FinalRerun(models.Model):
    """The final rerun of a benchmark: its cohort and runs per submission as started."""

    benchmark = models.OneToOneField(
        "contests.Benchmark", on_delete=models.CASCADE, related_name="final_rerun"
    )
    cohort = models.ForeignKey("contests.Cohort", on_delete=models.PROTECT, related_name="+")
    final_runs = models.PositiveSmallIntegerField()
    extra_runs = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField()
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"final rerun of {self.benchmark_id}"


class FinalEntry(models.Model):
    """A submission in the final rerun (its runs are ``Run`` rows of purpose ``final``)."""

    rerun = models.ForeignKey(FinalRerun, on_delete=models.CASCADE, related_name="entries")
    submission = models.ForeignKey(
        "submissions.Submission", on_delete=models.CASCADE, related_name="+"
    )
    extra_requested = models.BooleanField(default=False)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["rerun", "submission"], name="one_final_entry")
        ]

    def __str__(self) -> str:
        return f"{self.submission_id} in {self.rerun_id}"


class Standings(models.Model):
    """A benchmark's published final standings: frozen rows, their digest, corrections.

    A timed benchmark's rows are :class:`StandingRow`; a metered-estimation phase's
    (source ``estimation_final``) are ``estimation.EstimationStandingRow``."""

    FINAL_RERUN = "final_rerun"
    BOARD = "board"
    ESTIMATION_FINAL = "estimation_final"
    SOURCES = [
        (FINAL_RERUN, "the final rerun"),
        (BOARD, "the provisional board"),
        (ESTIMATION_FINAL, "the final rerun of the estimators"),
    ]

    benchmark = models.OneToOneField(
        "contests.Benchmark", on_delete=models.CASCADE, related_name="standings"
    )
    source = models.CharField(max_length=16, choices=SOURCES)
    published_at = models.DateTimeField()
    published_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField()
    digest = models.CharField(max_length=71)  # "sha256:" + 64 hex

    class Meta:
        verbose_name_plural = "standings"
        permissions = [
            (
                "publish_standings",
                "Can start the final rerun, publish and correct final standings (audited)",
            )
        ]

    def __str__(self) -> str:
        return f"standings of {self.benchmark_id}"


class StandingRow(models.Model):
    """One frozen row; ids and names are copied so that later changes never reach it."""

    standings = models.ForeignKey(Standings, on_delete=models.CASCADE, related_name="rows")
    position = models.PositiveIntegerField()
    rank = models.PositiveIntegerField()
    entrant = models.CharField(max_length=150)
    submission_id = models.PositiveBigIntegerField()
    wall_time_ns = models.BigIntegerField()
    runs = models.PositiveSmallIntegerField()
    tied = models.BooleanField(default=False)

    class Meta:
        ordering = ["standings", "position"]
        constraints = [
            models.UniqueConstraint(fields=["standings", "position"], name="one_row_per_position")
        ]

    def __str__(self) -> str:
        return f"{self.rank}. {self.entrant}"


class Correction(models.Model):
    """A change to published standings: who, when, why, and the digests before and after."""

    standings = models.ForeignKey(Standings, on_delete=models.CASCADE, related_name="corrections")
    at = models.DateTimeField()
    by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField()
    previous_digest = models.CharField(max_length=71)
    digest = models.CharField(max_length=71)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"correction of {self.standings_id} at {self.at}"


class WriteUp(models.Model):
    """An entrant's write-up (a PDF) of one of their graded official submissions: at most
    one per entrant per benchmark; uploading again replaces it, on the same submission or
    another of theirs. The file lives under the data folder
    (``storage.writeup_path``); staff read it audited, everyone when it is public."""

    benchmark = models.ForeignKey(
        "contests.Benchmark", on_delete=models.CASCADE, related_name="writeups"
    )
    entrant = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    submission = models.OneToOneField(
        "submissions.Submission", on_delete=models.CASCADE, related_name="writeup"
    )
    file_name = models.CharField(max_length=200)
    size_bytes = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=64)
    public = models.BooleanField(default=False)
    uploaded_at = models.DateTimeField()

    class Meta:
        ordering = ["benchmark", "entrant"]
        constraints = [
            models.UniqueConstraint(fields=["benchmark", "entrant"], name="one_writeup_per_entrant")
        ]

    def __str__(self) -> str:
        return f"write-up of {self.submission_id}"
