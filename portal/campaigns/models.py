"""Campaigns: a benchmark scored in rounds against a pinned baseline, with one leader.

A benchmark of kind ``campaign`` has one :class:`Campaign`. Official submissions of it
wait ``bench_queued`` after their build; a :class:`Round` takes the leader (the
:class:`Crown`'s submission, if any) plus up to five of them, first queued first
(:class:`QueuePlace`), runs every
image on the same request set on one host of the campaign's class, and records one
:class:`RoundEntry` per image. Scores compare only within a round.

Reading these rows for pages and the API: use ``portal.campaigns.selectors``.
Writing them: the write modules of ``portal.campaigns`` only (see its docstring).
"""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

POSITIVE = MinValueValidator(1)
FRACTION = [MinValueValidator(0.0), MaxValueValidator(1.0)]


class Campaign(models.Model):
    """What a campaign pins, for every round it runs.

    ``slug`` is the benchmark's; the hardware class is the benchmark's too, copied here
    when the campaign is created so a later edit of the benchmark cannot move rounds to
    other machines mid-campaign. No round runs before the baseline image is recorded
    (``baseline_image_digest``: ``manage.py campaign_baseline SLUG``).

    The request pool is the benchmark's official cohort. Each round records the cohort it
    drew from (``Round.cohort``, protected), so the cohort can be replaced only until the
    first round is created.
    """

    MEDIAN_SPEEDUP = "median_speedup"
    SCORING_RULES = [(MEDIAN_SPEEDUP, "median over slices of (baseline - candidate) / baseline")]

    benchmark = models.OneToOneField(
        "contests.Benchmark", on_delete=models.CASCADE, related_name="campaign"
    )
    hardware_class = models.ForeignKey(
        "contests.HardwareClass",
        to_field="name",
        db_column="hardware_class",
        on_delete=models.PROTECT,
        related_name="campaigns",
        db_index=False,  # a handful of rows; the column was never indexed
        help_text="The benchmark's hardware class, pinned at creation.",
    )
    baseline_image_tag = models.CharField(max_length=200, blank=True)
    baseline_image_digest = models.CharField(
        max_length=100, blank=True, help_text="The starter kit's image, built once (image ID)."
    )
    # With a registry: where the baseline was pushed, by manifest digest ("" otherwise).
    baseline_image_ref = models.CharField(max_length=300, blank=True)
    baseline_recorded_at = models.DateTimeField(null=True, blank=True)
    round_size = models.PositiveIntegerField(
        default=1000, validators=[POSITIVE], help_text="Images in each round's request set."
    )
    slice_count = models.PositiveIntegerField(
        default=10,
        validators=[POSITIVE],
        help_text="Contiguous slices of the request set; one timed invocation each.",
    )
    slice_repeats = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(5)],
        help_text=(
            "Timed invocations of each slice in every pass, one after another; the fastest "
            "clean one counts (a process's start only ever slows it). A crash or a "
            "malformed output in any of them counts as it is."
        ),
    )
    scoring_rule = models.CharField(max_length=32, choices=SCORING_RULES, default=MEDIAN_SPEEDUP)
    drift_ceiling = models.FloatField(
        default=0.05,
        validators=FRACTION,
        help_text="A round is void when the closing baseline drifts more than this.",
    )
    reproducibility_ceiling = models.FloatField(
        default=0.335,
        validators=[MinValueValidator(0.0)],
        help_text="An entry whose slice times' (max - min) / median exceeds this is infra_failed.",
    )
    moat = models.FloatField(
        default=0.01,
        validators=FRACTION,
        help_text="A challenger takes the crown by beating the leader's score times (1 + moat).",
    )
    min_agreement = models.FloatField(
        default=0.99,
        validators=FRACTION,
        help_text="Correctness gate: share of the round's requests equal to the reference.",
    )
    trigger_queued = models.PositiveIntegerField(
        default=5, validators=[POSITIVE], help_text="A round starts when this many are queued,"
    )
    trigger_wait_s = models.PositiveIntegerField(
        default=6 * 3600,
        validators=[POSITIVE],
        help_text="... or when the oldest queued event is this many seconds old.",
    )
    max_challengers = models.PositiveIntegerField(
        default=5, validators=[POSITIVE], help_text="Challengers per round, beside the leader."
    )
    leader_void_limit = models.PositiveIntegerField(
        default=2,
        validators=[POSITIVE],
        help_text=(
            "A leader whose own entry voids this many rounds in a row (its own exit, its "
            "slices over the reproducibility ceiling, its deadline) loses the crown."
        ),
    )
    paused = models.BooleanField(
        default=False, help_text="A paused campaign starts no round (running ones finish)."
    )
    # Why the crown is vacant (or why its last holder lost it); "" while someone holds it.
    crown_note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["benchmark__slug"]
        permissions = [("manage_campaign", "Can start, void and pause campaign rounds (audited)")]

    def __str__(self) -> str:
        return self.slug

    @property
    def slug(self) -> str:
        return self.benchmark.slug

    @property
    def has_baseline(self) -> bool:
        return bool(self.baseline_image_digest)


class Round(models.Model):
    """One round: created ``pending`` with everything fixed (entries, request set), then
    ``running`` on a host, then ``scored`` or ``void``.

    A round waiting for a host of its class goes back to ``pending`` (``tries``,
    ``next_try_at``) keeping its ordinal, entries and request set. A void round consumes
    its ordinal; a later round gets the next one.

    ``material`` is fixed at creation: the evidence digest of the campaign's latest
    finished round, or :data:`portal.campaigns.rules.GENESIS` for the first. The request
    set (``request_positions``: cohort item positions, in run order) is drawn from
    ``sha256(material || campaign id)`` and ``request_digest`` is its digest
    (``rules.request_digest``).
    """

    PENDING = "pending"
    RUNNING = "running"
    SCORED = "scored"
    VOID = "void"
    STATUSES = [(s, s) for s in (PENDING, RUNNING, SCORED, VOID)]
    OPEN = (PENDING, RUNNING)

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="rounds")
    ordinal = models.PositiveIntegerField()
    cohort = models.ForeignKey(
        "contests.Cohort",
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The request pool the request set was drawn from (official cohort).",
    )
    status = models.CharField(max_length=16, choices=STATUSES, default=PENDING)
    void_reason = models.TextField(blank=True)
    # Who caused a void (``rules.VOID_CAUSES``) and the submissions whose own entry did.
    void_cause = models.CharField(max_length=16, blank=True)
    void_by = models.JSONField(default=list, blank=True)
    material = models.CharField(max_length=64)
    request_positions = models.JSONField(default=list)
    request_digest = models.CharField(max_length=64)
    slice_count = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Waiting for capacity: how many claims found no host, and when the next try is due.
    tries = models.PositiveIntegerField(default=0)
    next_try_at = models.DateTimeField(null=True, blank=True)
    # The host it ran on, by name: a record that outlives the host's row.
    host = models.CharField(max_length=100, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    evidence_digest = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["campaign", "-ordinal"]
        constraints = [
            models.UniqueConstraint(fields=["campaign", "ordinal"], name="one_round_per_ordinal"),
            # One round at a time: the next one's material is this one's evidence digest.
            models.UniqueConstraint(
                fields=["campaign"],
                condition=models.Q(status__in=["pending", "running"]),
                name="one_open_round_per_campaign",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.campaign_id} round {self.ordinal} ({self.status})"


class RoundEntry(models.Model):
    """One image in a round: the leader or a challenger, in run order (``position``).

    ``verdict`` stays ``none`` until the round is scored, and in a void round for good
    (its ``reason`` then says what was seen). ``slices`` holds one row per slice:
    ``{"slice", "baseline_s", "candidate_s", "speedup", "reason"}``.
    """

    LEADER = "leader"
    CHALLENGER = "challenger"
    ROLES = [(LEADER, "leader"), (CHALLENGER, "challenger")]

    PASSED = "passed"
    FAILED_CORRECTNESS = "failed_correctness"
    DISQUALIFIED = "disqualified"
    INFRA_FAILED = "infra_failed"
    NONE = "none"
    VERDICTS = [(v, v) for v in (PASSED, FAILED_CORRECTNESS, DISQUALIFIED, INFRA_FAILED, NONE)]

    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="entries")
    submission = models.ForeignKey(
        "submissions.Submission", on_delete=models.CASCADE, related_name="round_entries"
    )
    role = models.CharField(max_length=16, choices=ROLES)
    position = models.PositiveIntegerField()
    image_digest = models.CharField(max_length=100)
    verdict = models.CharField(max_length=32, choices=VERDICTS, default=NONE)
    score = models.FloatField(null=True, blank=True)
    agreement = models.FloatField(null=True, blank=True)
    slices = models.JSONField(default=list, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["round", "position"]
        verbose_name_plural = "round entries"
        constraints = [
            models.UniqueConstraint(fields=["round", "position"], name="one_entry_per_position"),
            models.UniqueConstraint(fields=["round", "submission"], name="one_entry_per_image"),
        ]

    def __str__(self) -> str:
        return f"round {self.round_id} #{self.position} {self.role} {self.verdict}"


class Crown(models.Model):
    """The campaign's leader. A vacant crown has no row.

    ``score`` is the leader's score in ``round``, the latest round it ran in: a leader
    is re-measured every round, and scores compare only within a round.
    """

    campaign = models.OneToOneField(Campaign, on_delete=models.CASCADE, related_name="crown")
    submission = models.ForeignKey(
        "submissions.Submission", on_delete=models.PROTECT, related_name="+"
    )
    score = models.FloatField()
    round = models.ForeignKey(Round, on_delete=models.PROTECT, related_name="+")
    since = models.DateTimeField(help_text="When this submission took the crown.")
    own_voids = models.PositiveIntegerField(
        default=0, help_text="Voids its own entry caused in a row (a scored round resets it)."
    )

    def __str__(self) -> str:
        return f"crown of {self.campaign_id}: submission {self.submission_id}"


class QueuePlace(models.Model):
    """A campaign submission's place in the queue: when it was first queued.

    Rounds take entries by it (then by id), so a requeued entry (after a void, or after
    an infrastructure failure) keeps its place; only the wait trigger restarts, from the
    submission's latest queued event (``Submission.queued_at``). A challenger whose own
    entry voided a round loses its place: ``since`` moves to its requeue.
    """

    submission = models.OneToOneField(
        "submissions.Submission",
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="queue_place",
    )
    since = models.DateTimeField()

    def __str__(self) -> str:
        return f"submission {self.submission_id} queued since {self.since:%Y-%m-%d %H:%M}"
