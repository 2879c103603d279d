"""Benchmarks (with every rule setting), the hardware classes they run on, their cohorts,
and the stored leaderboard."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from podium_policy import dockerfile_policy

GIB = 1024**3
POSITIVE = MinValueValidator(1)


def validate_timezone(name: str) -> None:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ValidationError(f"{name!r} is not a known timezone name (like Asia/Seoul).") from exc


class HardwareClass(models.Model):
    """What every host of one class is: its platform, its GPUs and their pinned software.

    A benchmark names its class (``Benchmark.hardware_class``, a foreign key on the name);
    the hosts of that class score it. Every class named by a benchmark, a host or a
    campaign has a row; one created only because something named it
    (``portal.contests.hardware.hardware_class_row``) has a blank platform and no GPUs: a
    CPU class of the engine's default platform, as a class with no row is.

    ``platform`` ("" for the engine's default: ``PODIUM_DOCKER_PLATFORM``) drives the
    environment build's platform, the Dockerfile policy's architecture check and the
    supervisor binary a host uses; a blank one is set by the class's first good
    calibration, to the platform it was measured on. ``gpus`` is how many GPUs each host
    of the class gives a scored container (its ``PODIUM_GPU_DEVICES``); a host of a GPU
    class must show the NVIDIA runtime and those devices, on the pinned driver and CUDA
    versions, or it refuses to register.

    The ``pin_*`` fields are the frozen software of every host of the class: a host whose
    version differs refuses to score (its health gate names the pin). A GPU class with
    any of them empty cannot open (:meth:`missing_pins`): no upload is accepted for its
    benchmarks until staff pin all five. It lives here, beside the benchmarks that name
    it, so the rules can ask about it; its table kept its first name.

    ``cpu_gate_busy_max`` and ``cpu_gate_noise_band`` are the class's CPU-idleness gate
    (``scoring.host.health.limits``): the most busy CPUs a host may show before a run
    (empty: ``PODIUM_GATE_CPU_BUSY_MAX``) and, when strict, no more than would slow a run
    on every CPU by the class's published noise band.
    """

    AMD64 = "linux/amd64"
    ARM64 = "linux/arm64"
    DEFAULT_PLATFORM = ""  # the engine's default (PODIUM_DOCKER_PLATFORM)
    PLATFORMS = [
        (DEFAULT_PLATFORM, "the engine's default"),
        (AMD64, "linux/amd64"),
        (ARM64, "linux/arm64"),
    ]

    name = models.CharField(max_length=64, unique=True)
    platform = models.CharField(max_length=16, choices=PLATFORMS, default=AMD64, blank=True)
    description = models.CharField(max_length=200, blank=True)
    gpus = models.PositiveSmallIntegerField(
        default=0, help_text="GPUs each host of this class gives a scored container."
    )
    gpu_model = models.CharField(
        max_length=100, blank=True, help_text='As nvidia-smi names it ("NVIDIA H200").'
    )
    pin_gpu_driver = models.CharField(max_length=32, blank=True)
    pin_cuda = models.CharField(max_length=16, blank=True)
    pin_kernel = models.CharField(
        max_length=200, blank=True, help_text="The hosts' kernel release (uname -r)."
    )
    pin_engine_version = models.CharField(
        max_length=64, blank=True, help_text="The hosts' Docker Engine version."
    )
    pin_supervisor_sha256 = models.CharField(
        max_length=64, blank=True, help_text="SHA-256 of the hosts' supervisor binary."
    )
    calibration_reference_ns = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="The calibration workload's reference median on this class (ns); empty: "
        "the first good calibration of the class sets it.",
    )
    cpu_gate_busy_max = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0)],
        help_text="The CPU-idleness gate: the most CPUs' worth of other work a host of this "
        "class may show before a run; empty: the platform's PODIUM_GATE_CPU_BUSY_MAX.",
    )
    cpu_gate_noise_band = models.BooleanField(
        default=False,
        help_text="Strict: also refuse while that work would slow a run that uses every CPU "
        "by more than the class's published noise band.",
    )

    # Each pin, as the gates and the refusals name it.
    PINS = {
        "pin_gpu_driver": "GPU driver",
        "pin_cuda": "CUDA",
        "pin_kernel": "kernel",
        "pin_engine_version": "engine",
        "pin_supervisor_sha256": "supervisor",
    }

    class Meta:
        db_table = "hosts_hardwareclass"  # where it was created; rows stay
        ordering = ["name"]
        verbose_name_plural = "hardware classes"

    def __str__(self) -> str:
        return self.name

    def missing_pins(self) -> list[str]:
        """The pins a GPU class still lacks, by name (none for a CPU class)."""
        if not self.gpus:
            return []
        return [label for field, label in self.PINS.items() if not getattr(self, field)]


class Benchmark(models.Model):
    """A timed contest. Every number of the rules is a field here, with its default
    (docs/rules.md, "The benchmark's settings")."""

    LEADERBOARD = "leaderboard"
    CAMPAIGN = "campaign"
    ESTIMATION = "estimation"
    # What the admin offers first for a new benchmark's class (the field has no default:
    # a class is a row, which whoever creates a benchmark names).
    DEFAULT_HARDWARE_CLASS = "cpu-x86_64"
    KINDS = [
        (LEADERBOARD, "leaderboard: one timed run per attempt, best run ranks"),
        (CAMPAIGN, "campaign: rounds against a pinned baseline, one leader"),
        (ESTIMATION, "estimation: metered estimators, error times compute (portal.estimation)"),
    ]

    slug = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(
        max_length=16,
        choices=KINDS,
        default=LEADERBOARD,
        help_text=(
            "The format: a leaderboard, a campaign scored in rounds (portal.campaigns), or "
            "metered estimation (portal.estimation)."
        ),
    )
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    opens_at = models.DateTimeField(help_text="Official uploads accepted from (inclusive).")
    closes_at = models.DateTimeField(help_text="Official uploads accepted until (exclusive).")
    pass_min_matches = models.PositiveIntegerField(default=9900, validators=[POSITIVE])
    cohort_size = models.PositiveIntegerField(default=10000, validators=[POSITIVE])
    attempts_per_day = models.PositiveIntegerField(default=2, validators=[POSITIVE])
    attempt_timezone = models.CharField(
        max_length=64, default="Asia/Seoul", validators=[validate_timezone]
    )
    practice_per_day = models.PositiveIntegerField(default=10, validators=[POSITIVE])
    max_environments = models.PositiveIntegerField(default=2, validators=[POSITIVE])
    build_timeout_s = models.PositiveIntegerField(default=30 * 60, validators=[POSITIVE])
    score_timeout_s = models.PositiveIntegerField(default=16 * 60, validators=[POSITIVE])
    max_image_bytes = models.PositiveBigIntegerField(default=16 * GIB, validators=[POSITIVE])
    max_concurrent_builds = models.PositiveIntegerField(default=2, validators=[POSITIVE])
    max_upload_bytes = models.PositiveBigIntegerField(default=2 * GIB, validators=[POSITIVE])
    allowed_registries = models.TextField(
        default="localhost/podium/\ndocker.io/library/\n",
        help_text=(
            "One image-name prefix per line, registry included (localhost/podium/, "
            "docker.io/library/, ghcr.io/org/), that a Dockerfile's FROM may name."
        ),
    )
    run_memory_bytes = models.PositiveBigIntegerField(default=8 * GIB, validators=[POSITIVE])
    run_pids_limit = models.PositiveIntegerField(default=512, validators=[POSITIVE])
    run_tmpfs_bytes = models.PositiveBigIntegerField(default=1 * GIB, validators=[POSITIVE])
    run_output_tmpfs_bytes = models.PositiveBigIntegerField(
        default=64 * 1024 * 1024, validators=[POSITIVE]
    )
    run_shm_bytes = models.PositiveBigIntegerField(
        default=64 * 1024 * 1024,
        validators=[POSITIVE],
        help_text=(
            "The size of /dev/shm in a scored run: POSIX shared memory, through which "
            "PyTorch's DataLoader workers pass their batches. What is stored there counts "
            "against the run's memory, so it cannot exceed it."
        ),
    )
    runtime_tail_bytes = models.PositiveIntegerField(
        default=16 * 1024,
        validators=[POSITIVE],
        help_text=(
            "What an entrant may read of an official run's log: at most its last this many "
            "bytes, each line cut at 1,000 characters, so a log cannot carry a run's answers "
            "out for a later replay. Staff read the whole (bounded) log; practice runs are "
            "not cut."
        ),
    )
    verify_top = models.PositiveIntegerField(
        default=20,
        help_text=(
            "A passing official run that would become its entrant's best and place in this "
            "many top rows is run again off the board (shuffled order, fresh names and "
            "re-encoded images; up to PODIUM_VERIFY_MAX_RUNS times when its time is off) "
            "before it ranks; 0 verifies none."
        ),
    )
    verify_tolerance_pct = models.PositiveSmallIntegerField(
        default=10,
        validators=[POSITIVE],
        help_text=(
            "How much slower (in percent of the official wall time) the verification run "
            "may be for the run to rank; a faster one always confirms it."
        ),
    )
    validation_boundary = models.TextField(
        blank=True,
        help_text=(
            "The validation-data boundary in the benchmark's own words, shown on its rules "
            "page. When set, every official upload must confirm it, and apparent winners "
            "(a new first place; the top review_top rows at the close) enter provenance "
            "review."
        ),
    )
    review_top = models.PositiveSmallIntegerField(
        default=3,
        help_text=(
            "With a validation boundary: how many rows at the top of the board enter "
            "provenance review when the benchmark closes (0: only new first places)."
        ),
    )
    verify_self_agreement_pct = models.PositiveSmallIntegerField(
        default=98,
        validators=[POSITIVE, MaxValueValidator(100)],
        help_text=(
            "A verification run is correct when its answers agree with the entrant's own "
            "official answers for the same images on at least this percentage of them (its "
            "images are re-encoded, so the reference answers are not the yardstick)."
        ),
    )
    retention_days = models.PositiveIntegerField(
        default=90,
        help_text=(
            "Days after the close during which build logs, run logs, run outputs, source "
            "archives and Docker images are kept; from then on staff may purge them "
            "(manage.py purge_artifacts). Results, digests and the audit trail stay."
        ),
    )
    hardware_class = models.ForeignKey(
        HardwareClass,
        to_field="name",
        db_column="hardware_class",
        on_delete=models.PROTECT,
        related_name="benchmarks",
        db_index=False,  # a handful of rows; the column was never indexed
        help_text=(
            "The scoring hosts' hardware class its runs are scored on (a host's "
            "PODIUM_HARDWARE_CLASS: cpu-x86_64, cpu-aarch64, gpu-h200...); no run is scored "
            "on a host of another class."
        ),
    )
    reference_energy_per_image_j = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0)],
        help_text=(
            "The benchmark's reference kit's GPU energy per image, in joules, on its hardware "
            "class, as a run of that kit reports it (its resources' energy_per_image_j; "
            "manage.py set_reference_energy copies it from a run). Empty: no energy floor."
        ),
    )
    energy_floor_pct = models.PositiveSmallIntegerField(
        default=25,
        validators=[MaxValueValidator(100)],
        help_text=(
            "A passing official run on a GPU class whose energy per image is under this "
            "percentage of the reference's is flagged for staff (low_energy); 0 flags none."
        ),
    )
    artifacts_purged_at = models.DateTimeField(
        null=True, blank=True, help_text="When purge_artifacts last removed the artifacts."
    )
    contest = models.ForeignKey(
        "Contest",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="phases",
        help_text="The contest this benchmark is a phase of; empty: a contest of its own.",
    )
    phase_order = models.PositiveSmallIntegerField(
        default=1, help_text="Its place among the contest's phases (1 first)."
    )
    phase_name = models.CharField(
        max_length=100, blank=True, help_text='As the contest page names it ("Warm-up").'
    )
    team_size_max = models.PositiveSmallIntegerField(
        default=5,
        validators=[POSITIVE],
        help_text="How many entrants a team may have (portal.teams); 1: no teams.",
    )
    team_freeze_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=(
            "From this moment teams are fixed: no team is created, joined, left or "
            "changed. Empty: the close of the window."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-opens_at", "slug"]
        constraints = [
            models.UniqueConstraint(fields=["contest", "phase_order"], name="one_phase_per_place")
        ]

    def __str__(self) -> str:
        return self.slug

    @property
    def phase_label(self) -> str:
        """The phase's name on the contest page: its own, else "Phase N"."""
        return self.phase_name or f"Phase {self.phase_order}"

    def clean(self) -> None:
        # One prefix per line, as stored by default (forms strip the last newline). Each
        # names its registry and stays out of the entrant namespace (dockerfile_policy).
        lines = self.allowed_registries.splitlines()
        prefixes = [line.strip() for line in lines if line.strip()]
        self.allowed_registries = "".join(f"{prefix}\n" for prefix in prefixes)
        errors: dict[str, str | list[str]] = {}
        registry_errors = [
            f"Line {number}: {problem}"
            for number, line in enumerate(lines, start=1)
            if line.strip() and (problem := dockerfile_policy.prefix_problem(line))
        ]
        if registry_errors:
            errors["allowed_registries"] = registry_errors
        if self.opens_at and self.closes_at and self.opens_at >= self.closes_at:
            errors["closes_at"] = "The window must close after it opens."
        shm, memory = self.run_shm_bytes, self.run_memory_bytes
        if shm and memory and shm > memory:
            errors["run_shm_bytes"] = "Shared memory cannot exceed the run's memory."
        gate, size = self.pass_min_matches, self.cohort_size
        if gate and size and gate > size:
            errors["pass_min_matches"] = "The pass gate cannot exceed the cohort size."  # noqa: S105
        if errors:
            raise ValidationError(errors)

    def teams_frozen_at(self) -> dt.datetime:
        """When membership becomes fixed: the team freeze, or the close without one."""
        return self.team_freeze_at or self.closes_at

    def status_at(self, now: dt.datetime) -> str:
        """``upcoming``, ``open`` or ``closed``: opens inclusive, closes exclusive."""
        if now < self.opens_at:
            return "upcoming"
        if now < self.closes_at:
            return "open"
        return "closed"


class CohortFrozen(ValidationError):
    """A change of a used cohort's benchmark or kind (refused for good)."""


class Cohort(models.Model):
    """A frozen set of images with reference answers; files under ``storage.cohort_dir(id)``.

    Once any run has used it, its benchmark and kind are frozen: :meth:`clean` (forms)
    and :meth:`save` (anything else) refuse to change them, since turning a scored
    official cohort into a practice one would publish its answers. Before that, change
    them with ``cohorts.cohort_change``, which records the audit event.
    """

    OFFICIAL = "official"
    PRACTICE = "practice"
    FINAL = "final"  # a second private cohort for the final rerun (portal.standings)
    # Images no public set holds, with the reference model's answers: mixed among a
    # verification's and a final run's images (rules.canary_count), never run alone.
    CANARY = "canary"
    KINDS = [(OFFICIAL, "official"), (PRACTICE, "practice"), (FINAL, "final"), (CANARY, "canary")]

    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="cohorts")
    kind = models.CharField(max_length=16, choices=KINDS)
    created_at = models.DateTimeField(auto_now_add=True)
    # The public seed a practice cohort was drawn with (the ImageNet import), published on
    # the benchmark's page and API so anyone can redo the draw; empty for a prepared
    # cohort, and never kept on an official one (its seed is private).
    public_seed = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["benchmark", "kind"], name="one_cohort_per_kind")
        ]
        permissions = [
            ("export_cohort_members", "Can export a cohort's member list (audited)"),
            ("export_cohort_answers", "Can export a cohort's reference answers (audited)"),
        ]

    def __str__(self) -> str:
        return f"{self.benchmark.slug}/{self.kind}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        update_fields = kwargs.get("update_fields")
        if update_fields is None or set(update_fields) & {"benchmark", "benchmark_id", "kind"}:
            self.refuse_frozen_change()
        super().save(*args, **kwargs)

    def used(self) -> bool:
        """Whether any run has been staged on this cohort."""
        return self.pk is not None and self.run_set.exists()

    def frozen_field_changes(self) -> list[str]:
        """The frozen fields whose values here differ from the stored row's."""
        if self._state.adding or self.pk is None:
            return []
        stored = Cohort.objects.filter(pk=self.pk).values_list("benchmark_id", "kind").first()
        if stored is None:
            return []
        benchmark_id, kind = stored
        changed = {"benchmark": benchmark_id != self.benchmark_id, "kind": kind != self.kind}
        return [name for name, differs in changed.items() if differs]

    def refuse_frozen_change(self) -> None:
        """Raise :class:`CohortFrozen` for a change of benchmark or kind once used."""
        changed = self.frozen_field_changes()
        if changed and self.used():
            message = "This cohort has been used by a run; its benchmark and kind cannot change."
            raise CohortFrozen(dict.fromkeys(changed, message))

    def clean(self) -> None:
        self.refuse_frozen_change()


class CohortItem(models.Model):
    """One member, at its fixed position in the cohort's scoring order."""

    cohort = models.ForeignKey(Cohort, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    canonical_name = models.CharField(max_length=255)
    sha256 = models.CharField(max_length=64)
    reference_class = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["cohort", "position"]
        constraints = [
            models.UniqueConstraint(fields=["cohort", "position"], name="one_item_per_position"),
            models.UniqueConstraint(fields=["cohort", "canonical_name"], name="unique_item_name"),
        ]

    def __str__(self) -> str:
        return f"{self.cohort_id}#{self.position}"


class LeaderboardEntry(models.Model):
    """An entrant's best passing official run on a benchmark (derived, kept in step by services).

    A team (``portal.teams``) has one row: its members' best run, on the row of the member
    whose run it is, shown under ``team_name`` (blank for an entrant on their own).
    """

    benchmark = models.ForeignKey(Benchmark, on_delete=models.CASCADE, related_name="leaderboard")
    entrant = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    submission = models.ForeignKey("submissions.Submission", on_delete=models.CASCADE)
    run = models.ForeignKey("submissions.Run", on_delete=models.CASCADE)
    wall_time_ns = models.BigIntegerField()
    matches = models.PositiveIntegerField()
    total = models.PositiveIntegerField()
    submitted_at = models.DateTimeField()
    team_name = models.CharField(max_length=100, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["benchmark", "entrant"], name="one_row_per_entrant")
        ]

    def __str__(self) -> str:
        return f"{self.benchmark_id}: {self.entrant_id} {self.wall_time_ns} ns"


class Contest(models.Model):
    """A contest of one or more phases: benchmarks shown together on one page, in
    ``Benchmark.phase_order``, with the facts staff keep (prizes, timeline, how the final
    ranking works) and dated announcements.

    A benchmark with no contest is a contest of one, as before: the hub lists it on its
    own. The facts are Markdown, rendered through ``portal.contests.markup`` (sanitised).
    """

    slug = models.SlugField(max_length=100, unique=True)
    title = models.CharField(max_length=200)
    summary = models.TextField(blank=True, help_text="One paragraph for the hub (Markdown).")
    prizes = models.TextField(blank=True, help_text="The prizes and who may win them (Markdown).")
    timeline = models.TextField(
        blank=True,
        help_text=(
            "Notes on the timeline (Markdown): what happens between and after the phases. "
            "Each phase's own window is shown from its benchmark."
        ),
    )
    final_ranking = models.TextField(
        blank=True, help_text="How the final ranking is decided, in the contest's words (Markdown)."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "slug"]

    def __str__(self) -> str:
        return self.slug


class Announcement(models.Model):
    """A dated announcement of a contest, by staff: shown newest first on its page, the hub
    and its Atom feed, and mailed once to its participants (``mailed_at`` is set by the
    one send that claims it, ``portal.notifications.announcement_mail``)."""

    contest = models.ForeignKey(Contest, on_delete=models.CASCADE, related_name="announcements")
    title = models.CharField(max_length=200)
    body = models.TextField(help_text="Markdown; rendered sanitised (no scripts, no raw HTML).")
    posted_at = models.DateTimeField(db_index=True)
    posted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    mailed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-posted_at", "-id"]

    def __str__(self) -> str:
        return f"{self.contest_id}: {self.title}"
