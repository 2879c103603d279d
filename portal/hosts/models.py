"""The scoring fleet: one row per scoring host, its machine's facts and its heartbeat."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ScoringHost(models.Model):
    """One machine that scores runs, alone on it, for one hardware class.

    A scoring worker registers its host at start (``services.host_register``: upsert by
    ``name``, facts refreshed) and heartbeats while it runs. ``status`` is staff's word:
    ``active`` hosts take work; ``draining`` hosts finish what they hold and take no more;
    ``retired`` hosts are gone from the fleet (and from the API's list). Whether a host
    is *online* is read from its heartbeat (``selectors.host_state``), never stored. A
    host with ``missing_tools`` takes no work whatever its status, and is not counted as
    online for its class.
    """

    ACTIVE = "active"
    DRAINING = "draining"
    RETIRED = "retired"
    STATUSES = [(ACTIVE, "active"), (DRAINING, "draining"), (RETIRED, "retired")]

    name = models.CharField(max_length=100, unique=True)
    hardware_class = models.ForeignKey(
        "contests.HardwareClass",
        to_field="name",
        db_column="hardware_class",
        on_delete=models.PROTECT,
        related_name="hosts",
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
    cpu_isolation = models.JSONField(
        default=dict,
        blank=True,
        help_text='Where scored runs compute (portal/core/cpus.py): {"shared", "scoring_cpus", '
        '"other_cpus", "reason"}; both lists null when runs share every CPU, and the '
        "reason says why. Empty until the host registers with it.",
    )
    missing_tools = models.JSONField(
        default=list,
        blank=True,
        help_text="The host tools a scored run or its verification needs that this host "
        "lacked when it last tried to register (the supervisor, say): it refused to register "
        "and takes no run until they are installed. Empty when none.",
    )
    disk = models.JSONField(
        default=dict,
        blank=True,
        help_text='The engine\'s disk use (docker system df) when last recorded: {"at", '
        '"images", "containers", "build_cache", "volumes"}, each but "at" a {"count", '
        '"bytes"}. Recorded at registration and every few minutes of heartbeats; empty until '
        "then.",
    )
    status = models.CharField(max_length=16, choices=STATUSES, default=ACTIVE)
    registered_at = models.DateTimeField()
    last_heartbeat_at = models.DateTimeField()

    class Meta:
        ordering = ["hardware_class_id", "name"]
        permissions = [("manage_host", "Can drain, resume and retire scoring hosts")]

    def __str__(self) -> str:
        return self.name


class HostCalibration(models.Model):
    """One calibration of one host: the calibration workload run a few times, alone on the
    machine, in a scored run's sandbox and timed by its supervisor (``scoring.run.calibration``).

    ``median_ns`` is compared with the class's reference (``HardwareClass.
    calibration_reference_ns``, copied into ``reference_ns`` as it was then): ``drift_pct``
    is how far off it is, in percent of the reference. ``ok`` is false when the workload
    could not be measured (``median_ns`` null; ``reason`` says why) or when it drifted
    past ``PODIUM_CALIBRATION_DRIFT_PCT``; a drift drains the host and flags its runs.
    Rows are written once by ``portal.hosts.calibrations.calibration_record``.
    """

    REGISTRATION = "registration"
    RUNS = "runs"
    AGE = "age"
    RECHECK = "recheck"
    MANUAL = "manual"
    TRIGGERS = [
        (REGISTRATION, "never calibrated"),
        (RUNS, "runs since the last one"),
        (AGE, "time since the last one"),
        (RECHECK, "the last one was not good"),
        (MANUAL, "asked for"),
    ]

    host = models.ForeignKey(ScoringHost, on_delete=models.CASCADE, related_name="calibrations")
    # A record of the past: the class's name as it was, not a foreign key (the host may
    # have moved to another class since, and the record outlives the class's row).
    hardware_class = models.CharField(max_length=64, help_text="The host's class at the time.")
    trigger = models.CharField(max_length=16, choices=TRIGGERS)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(db_index=True)
    wall_ns = models.JSONField(
        default=list, blank=True, help_text="Each repetition's trusted wall time (ns), in order."
    )
    median_ns = models.PositiveBigIntegerField(null=True, blank=True)
    noise_pct = models.FloatField(
        null=True,
        blank=True,
        help_text="Half the repetitions' range, in percent of their median (the ± of one run).",
    )
    reference_ns = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The class's reference median when this ran (ns)."
    )
    drift_pct = models.FloatField(
        null=True, blank=True, help_text="(median - reference) / reference, in percent."
    )
    ok = models.BooleanField(default=False)
    reason = models.TextField(blank=True)
    workload_sha256 = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-finished_at", "-id"]
        indexes = [models.Index(fields=["host", "-finished_at"], name="hosts_calib_host_finished")]

    def __str__(self) -> str:
        return f"{self.host_id} calibration at {self.finished_at:%Y-%m-%d %H:%M}"


class CalibrationFlag(models.Model):
    """A scored run of a host whose calibration then drifted: staff decide whether to
    rescore its submission (free: ``calibrations.calibration_flag_rescore``) or dismiss
    it. The runs flagged are the host's timed runs since its last good calibration."""

    RESCORED = "rescored"
    DISMISSED = "dismissed"
    RESOLUTIONS = [(RESCORED, "rescored"), (DISMISSED, "dismissed")]

    run = models.ForeignKey(
        "submissions.Run", on_delete=models.CASCADE, related_name="calibration_flags"
    )
    calibration = models.ForeignKey(HostCalibration, on_delete=models.CASCADE, related_name="flags")
    created_at = models.DateTimeField(db_index=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    resolution = models.CharField(max_length=16, choices=RESOLUTIONS, blank=True)
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "calibration"], name="hosts_calib_flag_once")
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} (calibration {self.calibration_id})"


class MachineLease(models.Model):
    """The machine lock of one Docker Engine (``scoring/host/machine.py``).

    One row per engine: ``host`` holds the lock's key, ``scoring.host.machine.machine_key``
    (the engine's ID, name and data root), shared by every host name on that engine. It
    names an engine, not a :class:`ScoringHost`: two host names registered on one engine
    share one row, which is why it is a key and not a foreign key. Its rows are read and
    written only by ``portal.hosts.leases``.
    ``holder`` is empty when the lock is free; a holder keeps it by pushing
    ``expires_at`` forward (its heartbeat), and a lease past ``expires_at`` may be taken
    over (its holder is presumed dead) or freed by the reaper. Every change is a
    conditional update on ``holder`` / ``expires_at``.
    """

    host = models.CharField(max_length=100, unique=True)
    holder = models.CharField(max_length=200, blank=True)
    run = models.ForeignKey(
        "submissions.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    acquired_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "submissions_machinelease"  # where it was created; rows stay

    def __str__(self) -> str:
        return f"machine lock of {self.host} ({self.holder or 'free'})"


class ReferenceSpread(models.Model):
    """One measurement of how much a benchmark's reference kit (its starter kit image)
    spreads on a hardware class at a cohort size: the kit run ``wall_ns``'s count of times,
    back to back on one host, on that benchmark's official cohort, through a scored run's
    sandbox and timed by its supervisor (``scoring.run.reference``), after one warm-up run
    that is not counted.

    ``spread_pct`` (``noise.spread_pct``: the slowest run over the fastest, minus one) is
    the verification tolerance of every benchmark of the class with that cohort size
    (``rules.verification_tolerance_pct``), from the latest ``ok`` row. ``ok`` is false
    when the kit could not be measured or did not pass (``reason`` says why). Rows are
    written once by ``portal.hosts.reference.reference_spread_record``.
    """

    # A record of the past, like a calibration's: the names as they were.
    hardware_class = models.CharField(max_length=64)
    cohort_size = models.PositiveIntegerField(help_text="Images in each run.")
    benchmark = models.ForeignKey(
        "contests.Benchmark",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The benchmark whose official cohort the kit ran on.",
    )
    host = models.CharField(max_length=200)
    image = models.CharField(max_length=300, help_text="The reference kit image that ran.")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(db_index=True)
    wall_ns = models.JSONField(
        default=list, blank=True, help_text="Each counted run's trusted wall time (ns), in order."
    )
    median_ns = models.PositiveBigIntegerField(null=True, blank=True)
    spread_pct = models.FloatField(
        null=True, blank=True, help_text="The slowest run over the fastest, minus one, in percent."
    )
    ok = models.BooleanField(default=False)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-finished_at", "-id"]
        indexes = [
            models.Index(
                fields=["hardware_class", "cohort_size", "-finished_at"],
                name="hosts_refspread_class_size",
            )
        ]

    def __str__(self) -> str:
        return (
            f"{self.hardware_class} reference spread ({self.cohort_size} images) at "
            f"{self.finished_at:%Y-%m-%d %H:%M}"
        )
