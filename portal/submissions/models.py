"""Submissions (official attempts and practice), the attempt ledger, scored runs, timelines."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class Submission(models.Model):
    ACCEPTED = "accepted"
    BUILDING = "building"
    BUILD_FAILED = "build_failed"
    QUEUED = "queued"
    STAGING = "staging"
    RUNNING = "running"
    VERIFYING = "verifying"
    PASSED = "passed"
    REJECTED_VERIFICATION = "rejected_verification"
    FAILED = "failed"
    ERRORED = "errored"
    INFRA_FAILED = "infra_failed"
    CANCELLED = "cancelled"
    # Campaign benchmarks (portal.campaigns): built and waiting for a round; or refused
    # because an earlier submission of the campaign has the same image (refunded).
    BENCH_QUEUED = "bench_queued"
    DUPLICATE_IMAGE = "duplicate_image"
    # A graded submission: its scored run gave a verdict on the answers (a point of the
    # every-attempt chart; what a write-up may describe).
    GRADED = (PASSED, FAILED)
    STATUSES = [
        (s, s)
        for s in (
            ACCEPTED,
            BUILDING,
            BUILD_FAILED,
            QUEUED,
            STAGING,
            RUNNING,
            VERIFYING,
            PASSED,
            REJECTED_VERIFICATION,
            FAILED,
            ERRORED,
            INFRA_FAILED,
            CANCELLED,
            BENCH_QUEUED,
            DUPLICATE_IMAGE,
        )
    ]
    # Waiting for a scoring host: a score, or a verification of a passing official run.
    WAITING_FOR_SCORE = (QUEUED, VERIFYING)
    FINAL = (
        BUILD_FAILED,
        PASSED,
        REJECTED_VERIFICATION,
        FAILED,
        ERRORED,
        INFRA_FAILED,
        CANCELLED,
        DUPLICATE_IMAGE,
    )

    OFFICIAL = "official"
    PRACTICE = "practice"
    KINDS = [(OFFICIAL, "official"), (PRACTICE, "practice")]

    entrant = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="submissions"
    )
    benchmark = models.ForeignKey(
        "contests.Benchmark", on_delete=models.CASCADE, related_name="submissions"
    )
    environment = models.ForeignKey(
        "environments.Environment", on_delete=models.PROTECT, related_name="submissions"
    )
    kind = models.CharField(max_length=16, choices=KINDS, default=OFFICIAL)
    status = models.CharField(max_length=32, choices=STATUSES, default=ACCEPTED)
    submitted_at = models.DateTimeField(db_index=True)
    source_name = models.CharField(max_length=255)
    source_format = models.CharField(max_length=8)  # "tar.gz", "tar" or "zip"
    source_sha256 = models.CharField(max_length=64)
    source_bytes = models.PositiveBigIntegerField()
    environment_image_digest = models.CharField(max_length=100, blank=True)
    image_tag = models.CharField(max_length=200, blank=True)
    image_digest = models.CharField(max_length=100, blank=True)
    # With a registry (PODIUM_REGISTRY): where the build pushed the image, by manifest
    # digest ("registry/podium-entrant/sub-N@sha256:..."); scoring hosts pull exactly this
    # and refuse it unless its image ID is ``image_digest``. "" when never pushed.
    image_ref = models.CharField(max_length=300, blank=True)
    image_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    failure_reason = models.TextField(blank=True)
    disqualified_at = models.DateTimeField(null=True, blank=True)
    disqualified_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    disqualification_reason = models.TextField(blank=True)
    # SHA-256 of the benchmark's validation-data boundary the entrant confirmed when it
    # was uploaded ("" when the benchmark states none, and for practice runs).
    boundary_sha256 = models.CharField(max_length=64, blank=True)
    # When it last entered a waiting status (queued, or verifying): the fair order's
    # "oldest first" (dispatch.py). A wait for the scoring machine keeps it.
    queued_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            # The waiting set that scoring hosts claim from (waiting.py), small however
            # long the contest's history grows.
            models.Index(
                fields=["queued_at", "id"],
                condition=models.Q(status__in=["queued", "verifying"]),
                name="submission_waiting_idx",
            )
        ]
        # Staff actions, each its own permission (see staff.py); "contest staff" holds them.
        permissions = [
            ("download_source", "Can download an entrant's source archive (audited)"),
            ("requeue_submission", "Can requeue a submission"),
            ("rescore_submission", "Can rescore a submission"),
            ("cancel_submission", "Can cancel a submission (refunds)"),
            ("disqualify_submission", "Can disqualify a submission"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} by {self.entrant}"


class ProvenanceReview(models.Model):
    """The review of an apparent winner: does it keep to the validation-data boundary?

    Opened for an official submission of a benchmark that states a boundary when it
    becomes first on the board, and for the top ``Benchmark.review_top`` rows at the
    close (``portal.submissions.review``). The entrant answers with a provenance
    statement (the data, the checkpoints with their sources and hashes, the training
    code); the worker side lists the image's artifacts for staff (largest files, their
    hashes, files shaped like a table with one entry per validation image). Staff clear
    it or disqualify the submission, with a reason, audited. The board marks its row
    ``under_review`` or ``cleared``.
    """

    UNDER_REVIEW = "under_review"
    CLEARED = "cleared"
    DISQUALIFIED = "disqualified"
    STATUSES = [(s, s) for s in (UNDER_REVIEW, CLEARED, DISQUALIFIED)]

    submission = models.OneToOneField(
        Submission, on_delete=models.CASCADE, related_name="provenance_review"
    )
    status = models.CharField(max_length=16, choices=STATUSES, default=UNDER_REVIEW)
    opened_at = models.DateTimeField()
    opened_because = models.CharField(max_length=200)
    statement = models.TextField(blank=True)
    statement_at = models.DateTimeField(null=True, blank=True)
    # The image's artifacts as the worker listed them (``scoring.images.artifacts``):
    # {"files", "bytes", "largest": [{path, bytes, sha256}], "tables": [{path, ...}]}.
    artifacts = models.JSONField(null=True, blank=True)
    artifacts_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decision_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        permissions = [("decide_review", "Can clear or disqualify a submission under review")]

    def __str__(self) -> str:
        return f"review of #{self.submission_id} ({self.status})"


class SubmissionEvent(models.Model):
    """One status change of a submission: its timeline."""

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="events")
    status = models.CharField(max_length=32)
    at = models.DateTimeField()
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.submission_id} {self.status} at {self.at}"


class AttemptLedger(models.Model):
    """Every charge (+1) and refund (-1) of an attempt, on the attempt day it belongs to.

    ``entrant``: the uploader; ``team``: the team they were in when it was charged (a
    refund's is its charge's; empty for an entrant on their own, or once the team was
    deleted). A charge counts against its uploader wherever they go, and against that
    team even after the uploader left it (``attempts``).
    """

    CHARGE = 1
    REFUND = -1

    entrant = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    team = models.ForeignKey(
        "teams.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    benchmark = models.ForeignKey("contests.Benchmark", on_delete=models.CASCADE)
    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="ledger")
    kind = models.CharField(max_length=16, choices=Submission.KINDS)
    attempt_day = models.DateField(help_text="Calendar day in the benchmark's attempt timezone.")
    delta = models.SmallIntegerField()
    reason = models.CharField(max_length=200)
    at = models.DateTimeField()

    class Meta:
        ordering = ["at", "id"]
        constraints = [
            # One charge and at most one refund per submission.
            models.UniqueConstraint(fields=["submission", "delta"], name="one_entry_per_delta")
        ]

    def __str__(self) -> str:
        return f"{self.submission_id} {self.delta:+d} ({self.reason})"


class Run(models.Model):
    """One scored run of a submission on a cohort. A platform failure retries as try 2.

    A *verification* run re-runs a passing official submission off the board, on the
    same cohort members shuffled and re-encoded, before that submission ranks; it is
    created ``queued`` when the official run passes (and again after a timing miss, up to
    ``PODIUM_VERIFY_MAX_RUNS``) and is claimed like a score. Its ``verification_note``
    says what it decided: confirmed, re-measure or rejected, and why.

    ``host`` is the name of the scoring host the run was scored on, not a foreign key: it
    is a record that outlives the host's row, and the hosts app sits above this one.
    """

    QUEUED = "queued"
    STAGING = "staging"
    RUNNING = "running"
    FINISHED = "finished"
    INFRA_FAILED = "infra_failed"
    STATUSES = [(s, s) for s in (QUEUED, STAGING, RUNNING, FINISHED, INFRA_FAILED)]

    SCORE = "score"
    VERIFY = "verify"
    # A run of the final rerun (``portal.standings``): a passed official submission scored
    # again on the final cohort after the close; its verdict changes neither the
    # submission's status nor the board (``final.run_record_final``).
    FINAL = "final"
    PURPOSES = [(SCORE, "score"), (VERIFY, "verification"), (FINAL, "final rerun")]

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="runs")
    cohort = models.ForeignKey("contests.Cohort", on_delete=models.PROTECT)
    try_number = models.PositiveSmallIntegerField(default=1)
    purpose = models.CharField(max_length=16, choices=PURPOSES, default=SCORE)
    host = models.CharField(max_length=100, blank=True)  # the scoring host that claimed it
    # The submission's entrant, copied on save: the fair claim counts each entrant's runs
    # started in the last 24 hours from this table alone (waiting.py).
    entrant = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,
    )
    status = models.CharField(max_length=16, choices=STATUSES, default=QUEUED)
    verdict = models.CharField(max_length=16, blank=True)  # passed / failed / errored
    verdict_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    container_id = models.CharField(max_length=100, blank=True)
    host_start_ns = models.BigIntegerField(null=True, blank=True)
    host_end_ns = models.BigIntegerField(null=True, blank=True)
    trusted_start_ns = models.BigIntegerField(null=True, blank=True)
    trusted_end_ns = models.BigIntegerField(null=True, blank=True)
    wall_time_ns = models.BigIntegerField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    exit_signal = models.IntegerField(null=True, blank=True)
    killed = models.BooleanField(default=False)
    rusage = models.JSONField(default=dict, blank=True)
    matches = models.PositiveIntegerField(null=True, blank=True)
    total = models.PositiveIntegerField(null=True, blank=True)
    passed = models.BooleanField(null=True)
    output_sha256 = models.CharField(max_length=64, blank=True)
    supervisor_sha256 = models.CharField(max_length=64, blank=True)
    readings = models.JSONField(default=dict, blank=True)  # health gates
    # The meter: the scored container's cgroup, read after its tree was reaped (see
    # scoring.run.meter): CPU seconds, peak memory and PIDs, bytes read and written, OOMs.
    resources = models.JSONField(default=dict, blank=True)
    # Where the host's time went, ms by phase: taking the machine (lock, freeze, gates,
    # calibration, reference, claim), the run off the clock (pull, staging, create, collect,
    # compare) and giving it back (release).
    overhead_ms = models.JSONField(default=dict, blank=True)
    # The host's own speed, probed off the clock before and after the run
    # (scoring.host.speed): each probed CPU's median loop time, the largest change, the
    # probe's own noise and the band it was judged against; {} when not probed.
    host_speed = models.JSONField(default=dict, blank=True)
    # The host changed speed beyond the class's noise band during the run: its time is not
    # the entry's alone (a free rescore is queued; docs/rules.md, "The scored run").
    host_speed_changed = models.BooleanField(default=False, db_index=True)
    # A verification run's decision (rules.verification_decision), for staff: "confirmed
    # (1 of 3): ...", "timing miss (1 of 3), re-measuring: ...", "rejected (3 of 3): ...".
    verification_note = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("download_evidence", "Can download a run's evidence bundle (audited)")]
        indexes = [
            # The fair claim (waiting.py): runs started in its 24-hour window, and the
            # few queued (verification) runs, found without reading the rest.
            models.Index(fields=["started_at", "entrant"], name="run_started_idx"),
            models.Index(
                fields=["submission"], condition=models.Q(status="queued"), name="run_queued_idx"
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["submission", "try_number"], name="one_run_per_try"),
            # Never two runs of one submission at once: the database backs up the services'
            # conditional updates. (A staff rescore adds a later finished run, so finished
            # runs are not unique per submission; each run's verdict is written once.)
            models.UniqueConstraint(
                fields=["submission"],
                condition=models.Q(status__in=["staging", "running"]),
                name="one_active_run_per_submission",
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} of submission {self.submission_id} (try {self.try_number})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.entrant_id is None and self.submission_id is not None:
            self.entrant_id = (
                Submission.objects.filter(pk=self.submission_id)
                .values_list("entrant_id", flat=True)
                .first()
            )
        super().save(*args, **kwargs)


class VerificationSet(models.Model):
    """One prepared verification cohort: every member of ``cohort`` re-encoded with a fresh
    imperceptible perturbation, in ``storage.verification_set_dir(id)``, made ahead of
    need on the builds side (``scoring.cohort.verifysets``) and used by exactly one verification
    run.

    ``preparing`` (its files being written) -> ``ready`` -> ``taken`` (claimed, with its
    run, in the run's claim; the scoring host copies its files into the run's input and
    deletes the set). A set whose preparation failed or stalled is deleted by the pool's
    sweep, files and row.
    """

    PREPARING = "preparing"
    READY = "ready"
    TAKEN = "taken"
    STATUSES = [(s, s) for s in (PREPARING, READY, TAKEN)]

    cohort = models.ForeignKey(
        "contests.Cohort", on_delete=models.CASCADE, related_name="verification_sets"
    )
    status = models.CharField(max_length=16, choices=STATUSES, default=PREPARING)
    run = models.OneToOneField(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="verification_set"
    )
    members = models.PositiveIntegerField(default=0)  # files written (all of them once ready)
    perturbed = models.PositiveIntegerField(default=0)  # of which re-encoded JPEGs
    prepare_ms = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    taken_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["cohort", "status"], name="verification_set_pool_idx")]

    def __str__(self) -> str:
        return f"verification set {self.pk} of cohort {self.cohort_id} ({self.status})"


class Anomaly(models.Model):
    """Something about a finished official run that staff should look at (``anomalies.py``).

    Found after the run's verdict commits, at most one row per run and kind; a signal
    for review, never a verdict: nothing here changes the run, the submission or the
    board. Staff holding ``review_anomaly`` mark it reviewed with a note (audited).
    """

    MUCH_FASTER = "much_faster"
    IDENTICAL_OUTPUT = "identical_output"
    IDLE_CPU = "idle_cpu"
    FAILED_VERIFICATION = "failed_verification"
    LOW_ENERGY = "low_energy"
    KINDS = [
        (MUCH_FASTER, "much faster than every other entrant"),
        (IDENTICAL_OUTPUT, "output identical to another entrant's"),
        (IDLE_CPU, "passed with the CPU nearly idle"),
        (FAILED_VERIFICATION, "failed its verification"),
        (LOW_ENERGY, "passed using implausibly little GPU energy"),
    ]

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="anomalies")
    kind = models.CharField(max_length=32, choices=KINDS)
    reason = models.TextField()
    details = models.JSONField(default=dict, blank=True)  # e.g. the other run's id
    detected_at = models.DateTimeField(db_index=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    review_note = models.TextField(blank=True)

    class Meta:
        ordering = ["-detected_at", "-id"]
        verbose_name_plural = "anomalies"
        permissions = [("review_anomaly", "Can mark an anomaly reviewed (audited)")]
        constraints = [
            models.UniqueConstraint(fields=["run", "kind"], name="one_anomaly_per_run_and_kind")
        ]

    def __str__(self) -> str:
        return f"{self.kind} on run {self.run_id}"
