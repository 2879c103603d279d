"""What the API reads from requests and renders in responses (summarised in docs/api.md).

Output serializers never reach reference classes, per-image results, staged names or a
cohort manifest: a submission shows only aggregates of its latest run.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.accounts.models import ApiToken
from portal.campaigns.api_selectors import TimelineEvent
from portal.contests.hardware import class_hardware
from portal.contests.models import Benchmark, CohortItem
from portal.contests.selectors import LeaderboardRow
from portal.environments.models import Environment, EnvironmentEvent
from portal.environments.selectors import BuildNetworkState
from portal.hosts.selectors import HostRow, NoiseBand, noise_band
from portal.submissions.attempts import Quota
from portal.submissions.leaderboard import VerifyingRow
from portal.submissions.models import AttemptLedger, Run, Submission, SubmissionEvent
from portal.submissions.selectors import (
    QueueStanding,
    queue_standing,
    resources_of,
    run_host,
    verification_progress,
    verification_summary,
)


def iso(value: dt.datetime | None) -> str | None:
    """ISO 8601 with an explicit offset (UTC), or None."""
    return None if value is None else value.astimezone(dt.UTC).isoformat()


def sha256_digest(hex_digest: str) -> str | None:
    return f"sha256:{hex_digest}" if hex_digest else None


class OffsetDateTimeField(serializers.DateTimeField):
    """A datetime as ISO 8601 with ``+00:00`` (DRF would write ``Z``)."""

    def to_representation(self, value: dt.datetime) -> str | None:  # type: ignore[override]
        return iso(value)


@extend_schema_field(OpenApiTypes.BINARY)
class UploadField(serializers.FileField):
    """A multipart file part (the schema says ``format: binary``, so clients send a file)."""


class ErrorSerializer(serializers.Serializer[dict[str, str]]):
    code = serializers.CharField()
    detail = serializers.CharField()


# Tokens -----------------------------------------------------------------------------


class TokenCreateSerializer(serializers.Serializer[dict[str, Any]]):
    username = serializers.CharField(min_length=1)
    password = serializers.CharField(
        min_length=1, style={"input_type": "password"}, trim_whitespace=False
    )
    # DRF pops declared fields off the class, so a name shadowing a Field attribute is fine.
    label = serializers.CharField(  # type: ignore[assignment]
        max_length=100, required=False, allow_blank=True, default=""
    )


class TokenCreatedSerializer(serializers.Serializer[dict[str, Any]]):
    token = serializers.CharField()
    id = serializers.IntegerField()
    label = serializers.CharField()  # type: ignore[assignment]
    device = serializers.CharField(
        help_text="This client's device string (also set as the podium_device cookie): send "
        "it back in the X-Podium-Device header on later sign-ins, which then count failures "
        "at this device only, so others' wrong passwords at your account do not lock it out."
    )


class TokenSerializer(serializers.ModelSerializer[ApiToken]):
    created_at = OffsetDateTimeField()
    last_used_at = OffsetDateTimeField(allow_null=True)

    class Meta:
        model = ApiToken
        fields = ["id", "label", "created_at", "last_used_at"]


# Benchmarks -------------------------------------------------------------------------

RULE_FIELDS = [
    "pass_min_matches",
    "cohort_size",
    "attempts_per_day",
    "attempt_timezone",
    "practice_per_day",
    "max_environments",
    "build_timeout_s",
    "score_timeout_s",
    "max_image_bytes",
    "max_concurrent_builds",
    "max_upload_bytes",
    "team_size_max",
    "team_freeze_at",
]


class BenchmarkSerializer(serializers.ModelSerializer[Benchmark]):
    status = serializers.SerializerMethodField()
    opens_at = OffsetDateTimeField()
    closes_at = OffsetDateTimeField()

    class Meta:
        model = Benchmark
        fields = ["slug", "title", "status", "opens_at", "closes_at"]

    def get_status(self, benchmark: Benchmark) -> str:
        now: dt.datetime = self.context["now"]
        return benchmark.status_at(now)


class BuildNetworkSerializer(serializers.Serializer[BuildNetworkState]):
    """The build network as the latest live check of every build host found it.

    Never checked: not enforced, ``checked_at`` null, empty lists. ``allowed`` (the
    operator's allow-list entries) is present only for staff callers.
    """

    # The serializer's context says whether the caller is staff: ``{"staff": bool}``.

    enforced = serializers.BooleanField(
        help_text="Every rule of every build host was in place at its latest check, "
        "and no check is stale; builds wait while this is false."
    )
    checked_at = OffsetDateTimeField(allow_null=True, help_text="The most recent check.")
    subnet = serializers.CharField()
    blocked = serializers.ListField(
        child=serializers.CharField(),
        help_text="Ranges builds cannot reach (CIDRs, IPv4 and IPv6).",
    )
    dns = serializers.ListField(
        child=serializers.CharField(), help_text="The only resolvers builds may send DNS to."
    )
    allowed_count = serializers.IntegerField(
        help_text="How many allow-list entries (mirrors, proxies) the operator admits."
    )
    allowed = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Staff only: the allow-list entries (CIDRs or host:port).",
    )

    def to_representation(self, instance: BuildNetworkState | None) -> dict[str, Any]:
        if instance is None:
            return {
                "enforced": False,
                "checked_at": None,
                "subnet": "",
                "blocked": [],
                "dns": [],
                "allowed_count": 0,
                **({"allowed": []} if self.context.get("staff") else {}),
            }
        data = dict(super().to_representation(instance))
        if not self.context.get("staff"):
            del data["allowed"]
        return data


class CpuGateSerializer(serializers.Serializer[dict[str, Any]]):
    """A hardware class's CPU-idleness gate (``portal.contests.hardware.class_cpu_gate``)."""

    busy_cpus_max = serializers.FloatField(
        help_text="The most CPUs' worth of other work a host may show before a run."
    )
    default = serializers.BooleanField(help_text="Whether that is the platform's default.")
    noise_band = serializers.BooleanField(
        help_text="Strict: also no more than would slow a run on every CPU by the class's "
        "published noise band."
    )


class HardwareSerializer(serializers.Serializer[dict[str, Any]]):
    """The benchmark's hardware class, as its hosts give it to a scored run."""

    name = serializers.CharField()
    platform = serializers.CharField(allow_null=True, help_text="linux/amd64 or linux/arm64.")
    gpus = serializers.IntegerField(help_text="GPUs a scored container gets (0: none).")
    gpu_model = serializers.CharField(allow_null=True)
    gpu_driver = serializers.CharField(allow_null=True, help_text="The pinned driver version.")
    cuda = serializers.CharField(allow_null=True, help_text="The pinned CUDA version.")
    kernel = serializers.CharField(allow_null=True, help_text="The pinned kernel release.")
    engine = serializers.CharField(allow_null=True, help_text="The pinned Docker Engine version.")
    supervisor_sha256 = serializers.CharField(
        allow_null=True, help_text="SHA-256 of the pinned supervisor binary."
    )
    unpinned = serializers.ListField(
        child=serializers.CharField(),
        help_text="The pins a GPU class still lacks; its benchmark accepts no upload until "
        "this is empty.",
    )
    cpu_gate = CpuGateSerializer()


class NoiseBandSerializer(serializers.Serializer[NoiseBand]):
    """A hardware class's timing noise (``portal.hosts.selectors.noise_band``)."""

    hardware_class = serializers.CharField()
    percent = serializers.FloatField(
        help_text="Every repetition of the class's recent good calibrations fell within "
        "± this percentage of their common median."
    )
    runs = serializers.IntegerField(help_text="How many calibrations it is drawn from.")


class BenchmarkPhaseSerializer(serializers.Serializer[Benchmark]):
    """The contest a benchmark is a phase of, and its place there."""

    slug = serializers.CharField(source="contest.slug", help_text="The contest's slug.")
    phase = serializers.IntegerField(source="phase_order", help_text="Its place (1 first).")
    name = serializers.CharField(source="phase_label", help_text='Its name, else "Phase N".')


class BenchmarkDetailSerializer(BenchmarkSerializer):
    """Context: ``now``, and ``build_network`` (the selector's state) with ``staff``."""

    build_network = serializers.SerializerMethodField()
    noise_band = serializers.SerializerMethodField()
    hardware = serializers.SerializerMethodField()
    contest = serializers.SerializerMethodField()
    team_freeze_at = OffsetDateTimeField(
        allow_null=True,
        help_text="From this moment teams are fixed; null: from the close (closes_at).",
    )
    kind = serializers.CharField(
        help_text="The format: leaderboard, campaign or estimation (a metered-estimation "
        "phase, whose entries go to .../estimation/entries/)."
    )

    class Meta(BenchmarkSerializer.Meta):
        fields = [
            *BenchmarkSerializer.Meta.fields,
            "kind",
            "description",
            *RULE_FIELDS,
            "build_network",
            "hardware",
            "noise_band",
            "contest",
        ]

    @extend_schema_field(BenchmarkPhaseSerializer(allow_null=True))
    def get_contest(self, benchmark: Benchmark) -> dict[str, Any] | None:
        if benchmark.contest_id is None:
            return None
        return dict(BenchmarkPhaseSerializer(benchmark).data)

    @extend_schema_field(HardwareSerializer)
    def get_hardware(self, benchmark: Benchmark) -> dict[str, Any]:
        return class_hardware(benchmark.hardware_class_id)

    @extend_schema_field(NoiseBandSerializer(allow_null=True))
    def get_noise_band(self, benchmark: Benchmark) -> dict[str, Any] | None:
        band = noise_band(benchmark.hardware_class_id)
        return None if band is None else dict(NoiseBandSerializer(band).data)

    @extend_schema_field(BuildNetworkSerializer)
    def get_build_network(self, benchmark: Benchmark) -> dict[str, Any]:
        state = self.context.get("build_network")
        staff = bool(self.context.get("staff"))
        # to_representation, not .data: ``.data`` of a None instance is the initial value.
        return BuildNetworkSerializer(context={"staff": staff}).to_representation(state)


class LeaderboardRowSerializer(serializers.Serializer[LeaderboardRow]):
    rank = serializers.IntegerField()
    entrant = serializers.CharField()
    wall_time_ns = serializers.IntegerField()
    matches = serializers.IntegerField()
    total = serializers.IntegerField()
    submission_id = serializers.IntegerField()
    submitted_at = OffsetDateTimeField()
    cpu_per_wall = serializers.FloatField(
        allow_null=True, help_text="The run's CPU seconds (user + system) per wall second."
    )
    energy_per_image_j = serializers.FloatField(
        allow_null=True,
        help_text="The run's GPU energy per image, joules (null on a class without GPUs).",
    )
    gpu_util_mean_pct = serializers.FloatField(
        allow_null=True,
        help_text="The run's mean GPU utilization, percent (null on a class without GPUs).",
    )
    review = serializers.ChoiceField(
        choices=["under_review", "cleared"],
        allow_null=True,
        help_text="The submission's provenance review: under review, cleared, or null (none).",
    )
    team = serializers.BooleanField(
        help_text="Whether the row is a team's: ``entrant`` is then the team's name."
    )


class VerifyingRowSerializer(serializers.Serializer[VerifyingRow]):
    entrant = serializers.CharField()
    wall_time_ns = serializers.IntegerField(help_text="The official run's wall time.")
    submission_id = serializers.IntegerField()
    submitted_at = OffsetDateTimeField()


class LeaderboardSerializer(serializers.Serializer[dict[str, Any]]):
    state = serializers.CharField(
        help_text=(
            "``live`` before the close, ``provisional`` from the close until final "
            "standings are published, ``final`` afterwards (see .../standings/)."
        )
    )
    rows = LeaderboardRowSerializer(many=True)
    verifying = VerifyingRowSerializer(
        many=True,
        help_text=(
            "Passing official runs held off the board until one more run off the board "
            "confirms them; each ranks (or is rejected) when it ends."
        ),
    )


class GradedAttemptSerializer(serializers.Serializer[dict[str, Any]]):
    submission_id = serializers.IntegerField()
    entrant = serializers.CharField(
        help_text="Who the board ranks it under: the uploader's team's name when they are in "
        "a team on the benchmark, else their username."
    )
    team = serializers.BooleanField(help_text="True when `entrant` is a team's name.")
    submitted_at = OffsetDateTimeField()
    wall_time_ns = serializers.IntegerField()
    passed = serializers.BooleanField(help_text="False: the run failed on accuracy.")


class AttemptsSerializer(serializers.Serializer[dict[str, Any]]):
    count = serializers.IntegerField()
    attempts = GradedAttemptSerializer(
        many=True, help_text="Every graded official attempt, by upload."
    )


# One kind's Quota; its subclass QuotaSerializer renders a dict (the official Quota's
# fields, both kinds and the timezone).
class QuotaKindSerializer(serializers.Serializer[Quota | dict[str, Any]]):
    attempts_per_day = serializers.IntegerField(source="per_day")
    used_today = serializers.IntegerField()
    remaining_today = serializers.IntegerField()
    resets_at = OffsetDateTimeField()
    next_available_at = OffsetDateTimeField(allow_null=True)  # null once the window closed


class QuotaSerializer(QuotaKindSerializer):
    """The official quota at the top level (as docs/api.md names it), both kinds nested."""

    official = QuotaKindSerializer()
    practice = QuotaKindSerializer()
    timezone = serializers.CharField()


class PracticeAnswerSerializer(serializers.Serializer[CohortItem]):
    path = serializers.CharField(source="canonical_name")
    # "class" is a keyword: declared below through the fields mapping.

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["class"] = serializers.IntegerField(source="reference_class")
        return fields


class PracticeSerializer(serializers.Serializer[dict[str, Any]]):
    download_url = serializers.URLField()
    answers = PracticeAnswerSerializer(many=True)
    count = serializers.IntegerField()
    seed = serializers.CharField(
        allow_null=True,
        help_text="The public seed the cohort was drawn with; null for a prepared cohort.",
    )


# Local runs: the Dockerfile dry-run and the published sandbox -------------------------


class DockerfileCheckUploadSerializer(serializers.Serializer[dict[str, Any]]):
    dockerfile = UploadField(help_text="The Dockerfile, UTF-8 text.")


class DockerfileCheckTextSerializer(serializers.Serializer[dict[str, Any]]):
    dockerfile = serializers.CharField(
        trim_whitespace=False, help_text="The Dockerfile's text (at most 256 KiB)."
    )


class DockerfileErrorSerializer(serializers.Serializer[dict[str, Any]]):
    line = serializers.IntegerField(
        allow_null=True, help_text="1-based line of the instruction; null for the whole file."
    )
    message = serializers.CharField()


class DockerfileCheckSerializer(serializers.Serializer[dict[str, Any]]):
    """The verdict an environment upload of the same Dockerfile would get."""

    ok = serializers.BooleanField(help_text="An upload would accept it.")
    code = serializers.CharField(
        allow_null=True, help_text="`dockerfile_policy` when an upload would refuse it."
    )
    detail = serializers.CharField(
        allow_blank=True, help_text="The upload's refusal, word for word; empty when ok."
    )

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        # ``errors`` is also the name of a serializer's validation errors, so the field
        # is added here rather than declared on the class.
        fields = super().get_fields()
        fields["errors"] = DockerfileErrorSerializer(many=True, help_text="The breaches.")
        return fields


class SandboxSupervisorSerializer(serializers.Serializer[dict[str, Any]]):
    available = serializers.BooleanField(help_text="The portal has a supervisor binary to give.")
    sha256 = serializers.CharField(allow_null=True)
    size = serializers.IntegerField(allow_null=True)
    platform = serializers.CharField(
        allow_null=True, help_text="What the binary is built for: linux/amd64 or linux/arm64."
    )
    pinned_sha256 = serializers.CharField(
        allow_null=True, help_text="The hardware class's pinned supervisor, when it has one."
    )
    download_url = serializers.URLField(allow_null=True)


class SandboxPracticeSerializer(serializers.Serializer[dict[str, Any]]):
    url = serializers.URLField(help_text="The practice endpoint (answers).")
    download_url = serializers.URLField(help_text="The practice images and answers.tsv.")
    count = serializers.IntegerField()
    needed = serializers.IntegerField(help_text="Matches a run on it needs to pass.")


class SandboxSerializer(serializers.Serializer[dict[str, Any]]):
    """The scored run's sandbox, generated by the code that creates scored containers."""

    benchmark = serializers.CharField()
    hardware = HardwareSerializer()
    noise_band = NoiseBandSerializer(allow_null=True)
    supervisor = SandboxSupervisorSerializer()
    seccomp = serializers.DictField(help_text="Which seccomp filters hold a scored run.")
    container = serializers.DictField(
        help_text="The scored container's create arguments (Docker SDK names), for the "
        "practice cohort; the placeholders stand for local paths and the image."
    )
    placeholders = serializers.DictField(child=serializers.CharField())
    runtime = serializers.DictField(child=serializers.CharField())
    limits = serializers.DictField(help_text="The benchmark's limits and the timers they give.")
    build = serializers.DictField(help_text="The container that runs build.sh.")
    scoring_host = serializers.DictField(help_text="What a scoring host adds to the container.")
    practice = SandboxPracticeSerializer(
        allow_null=True, help_text="Null while the benchmark has no practice cohort."
    )


# Environments -----------------------------------------------------------------------


class TimelineEventSerializer(
    serializers.Serializer[EnvironmentEvent | SubmissionEvent | TimelineEvent]
):
    status = serializers.CharField()
    at = OffsetDateTimeField()
    note = serializers.CharField()


class EnvironmentSerializer(serializers.ModelSerializer[Environment]):
    benchmark: serializers.SlugRelatedField[Benchmark] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    owner = serializers.CharField(
        source="owner.username", read_only=True, help_text="Whose it is (you, or a teammate)."
    )
    image_digest = serializers.SerializerMethodField()
    timeline = TimelineEventSerializer(many=True, source="events")
    created_at = OffsetDateTimeField()
    build_started_at = OffsetDateTimeField(allow_null=True)
    build_finished_at = OffsetDateTimeField(allow_null=True)

    class Meta:
        model = Environment
        fields = [
            "id",
            "name",
            "owner",
            "benchmark",
            "status",
            "image_digest",
            "image_bytes",
            "timeline",
            "created_at",
            "failure_reason",
            "build_started_at",
            "build_finished_at",
        ]

    def get_image_digest(self, environment: Environment) -> str | None:
        return environment.image_digest or None


class EnvironmentCreateSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField(min_length=1, max_length=100)
    dockerfile = UploadField(help_text="The Dockerfile, UTF-8 text.")
    context = UploadField(  # type: ignore[assignment]
        required=False, help_text="Optional build context archive (.tar.gz, .tar or .zip)."
    )


# Submissions ------------------------------------------------------------------------


class SubmissionCreateSerializer(serializers.Serializer[dict[str, Any]]):
    environment = serializers.IntegerField(help_text="Id of one of your ready environments.")
    source = UploadField(  # type: ignore[assignment]
        help_text="The source archive: .tar.gz, .tar or .zip."
    )
    kind = serializers.ChoiceField(
        choices=[Submission.OFFICIAL, Submission.PRACTICE], default=Submission.OFFICIAL
    )
    confirm_boundary = serializers.BooleanField(
        default=False,
        help_text="Confirms the benchmark's validation-data boundary (its validation_boundary); "
        "required for an official upload to a benchmark that states one.",
    )


class DigestsSerializer(serializers.Serializer[dict[str, str | None]]):
    source = serializers.CharField()  # type: ignore[assignment]
    environment_image = serializers.CharField(allow_null=True)
    submission_image = serializers.CharField(allow_null=True)
    output = serializers.CharField(allow_null=True)


class AttemptSerializer(serializers.Serializer[dict[str, bool]]):
    charged = serializers.BooleanField()
    refunded = serializers.BooleanField()


# [start_ns, end_ns] of one clock, null before the run has them.
INTERVAL_FIELD = serializers.ListField(
    child=serializers.IntegerField(allow_null=True), min_length=2, max_length=2, allow_null=True
)


def latest_run(submission: Submission, purpose: str = Run.SCORE) -> Run | None:
    """The scored (or verification) run with the highest try number (works on prefetched
    ``runs`` too). A submission's numbers are its scored run's; a verification run only
    confirms them."""
    runs = [run for run in submission.runs.all() if run.purpose == purpose]
    return max(runs, key=lambda run: run.try_number) if runs else None


class ResourcesSerializer(serializers.Serializer[dict[str, Any]]):
    """The meter: the scored container's cgroup, read after its process tree was reaped,
    and on a GPU class the GPU meter's figures."""

    cpu_user_s = serializers.FloatField(allow_null=True)
    cpu_system_s = serializers.FloatField(allow_null=True)
    cpu_per_wall = serializers.FloatField(
        allow_null=True, help_text="CPU seconds (user + system) per wall-clock second."
    )
    memory_peak_bytes = serializers.IntegerField(allow_null=True)
    pids_peak = serializers.IntegerField(allow_null=True)
    io_read_bytes = serializers.IntegerField(allow_null=True)
    io_write_bytes = serializers.IntegerField(allow_null=True)
    oom_events = serializers.IntegerField(allow_null=True)
    energy_per_image_j = serializers.FloatField(
        allow_null=True,
        help_text=(
            "The GPUs' energy over the run (NVML's energy counter, else power integrated "
            "over time), joules, per image of the run; null on a class without GPUs or when "
            "NVML gave no reading."
        ),
    )
    gpu_util_mean_pct = serializers.FloatField(
        allow_null=True,
        help_text=(
            "The GPUs' mean utilization over the run, percent (NVML, sampled from just before "
            "the start until the exit); null on a class without GPUs or when NVML gave no "
            "reading."
        ),
    )


class VerificationSerializer(serializers.Serializer[dict[str, Any]]):
    status = serializers.ChoiceField(choices=[s for s, _ in Run.STATUSES])
    passed = serializers.BooleanField(allow_null=True)
    wall_time_ns = serializers.IntegerField(allow_null=True)
    matches = serializers.IntegerField(allow_null=True)
    total = serializers.IntegerField(allow_null=True)
    run = serializers.IntegerField(
        help_text="Which verification run this is: a timing miss is measured again, on a "
        "fresh shuffle, and judged on the fastest run (2 while re-measuring a first miss)."
    )
    of = serializers.IntegerField(help_text="At most this many verification runs are judged.")


class SubmissionSerializer(serializers.ModelSerializer[Submission]):
    """One submission as its entrant sees it: aggregates only, never per-image data.

    Expects ``events``, ``ledger`` and ``runs`` prefetched when rendering many.
    """

    environment: serializers.PrimaryKeyRelatedField[Environment] = (
        serializers.PrimaryKeyRelatedField(read_only=True)
    )
    entrant = serializers.CharField(
        source="entrant.username", read_only=True, help_text="Who uploaded it (you, or a teammate)."
    )
    benchmark: serializers.SlugRelatedField[Benchmark] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    submitted_at = OffsetDateTimeField()
    timeline = TimelineEventSerializer(many=True, source="events")
    wall_time_ns = serializers.SerializerMethodField()
    matches = serializers.SerializerMethodField()
    total = serializers.SerializerMethodField()
    passed = serializers.SerializerMethodField()
    host_interval_ns = serializers.SerializerMethodField()
    trusted_interval_ns = serializers.SerializerMethodField()
    supervisor_sha256 = serializers.SerializerMethodField()
    digests = serializers.SerializerMethodField()
    attempt = serializers.SerializerMethodField()
    runs = serializers.SerializerMethodField()
    disqualified = serializers.SerializerMethodField()
    verification = serializers.SerializerMethodField()
    resources = serializers.SerializerMethodField()
    queue_position = serializers.SerializerMethodField()
    eta_seconds = serializers.SerializerMethodField()
    host = serializers.SerializerMethodField()

    class Meta:
        model = Submission
        fields = [
            "id",
            "entrant",
            "kind",
            "status",
            "environment",
            "benchmark",
            "submitted_at",
            "source_name",
            "source_bytes",
            "timeline",
            "wall_time_ns",
            "matches",
            "total",
            "passed",
            "failure_reason",
            "host_interval_ns",
            "trusted_interval_ns",
            "supervisor_sha256",
            "digests",
            "attempt",
            "runs",
            "disqualified",
            "verification",
            "resources",
            "queue_position",
            "eta_seconds",
            "host",
        ]

    def _run(self, submission: Submission) -> Run | None:
        cache: dict[int, Run | None] = self.context.setdefault("_latest_runs", {})
        if submission.pk not in cache:
            cache[submission.pk] = latest_run(submission)
        return cache[submission.pk]

    def get_wall_time_ns(self, submission: Submission) -> int | None:
        run = self._run(submission)
        return None if run is None else run.wall_time_ns

    def get_matches(self, submission: Submission) -> int | None:
        run = self._run(submission)
        return None if run is None else run.matches

    def get_total(self, submission: Submission) -> int | None:
        run = self._run(submission)
        return None if run is None else run.total

    def get_passed(self, submission: Submission) -> bool | None:
        run = self._run(submission)
        return None if run is None else run.passed

    @extend_schema_field(INTERVAL_FIELD)
    def get_host_interval_ns(self, submission: Submission) -> list[int | None] | None:
        run = self._run(submission)
        return None if run is None else [run.host_start_ns, run.host_end_ns]

    @extend_schema_field(INTERVAL_FIELD)
    def get_trusted_interval_ns(self, submission: Submission) -> list[int | None] | None:
        run = self._run(submission)
        return None if run is None else [run.trusted_start_ns, run.trusted_end_ns]

    def get_supervisor_sha256(self, submission: Submission) -> str | None:
        run = self._run(submission)
        return None if run is None else sha256_digest(run.supervisor_sha256)

    @extend_schema_field(DigestsSerializer)
    def get_digests(self, submission: Submission) -> dict[str, str | None]:
        run = self._run(submission)
        data = {
            "source": sha256_digest(submission.source_sha256),
            "environment_image": submission.environment_image_digest or None,
            "submission_image": submission.image_digest or None,
            "output": None if run is None else sha256_digest(run.output_sha256),
        }
        return DigestsSerializer(data).data

    @extend_schema_field(AttemptSerializer)
    def get_attempt(self, submission: Submission) -> dict[str, bool]:
        deltas = {entry.delta for entry in submission.ledger.all()}
        return {
            "charged": AttemptLedger.CHARGE in deltas,
            "refunded": AttemptLedger.REFUND in deltas,
        }

    def get_runs(self, submission: Submission) -> int:
        return len(submission.runs.all())

    def get_disqualified(self, submission: Submission) -> bool:
        return submission.disqualified_at is not None

    def _standing(self, submission: Submission) -> QueueStanding | None:
        cache: dict[int, QueueStanding | None] = self.context.setdefault("_standings", {})
        if submission.pk not in cache:
            cache[submission.pk] = queue_standing(submission)
        return cache[submission.pk]

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_queue_position(self, submission: Submission) -> int | None:
        """Its place in the fair order of its hardware class while it waits (1: next)."""
        standing = self._standing(submission)
        return standing.position if standing else None

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_eta_seconds(self, submission: Submission) -> int | None:
        """About when its run starts, while it waits; null when no host of its class is
        online (or none has finished a run to time)."""
        standing = self._standing(submission)
        return standing.eta_seconds if standing else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_host(self, submission: Submission) -> str | None:
        """The scoring host of its latest run, once staging started."""
        return run_host(self._run(submission), latest_run(submission, Run.VERIFY), submission)

    @extend_schema_field(VerificationSerializer(allow_null=True))
    def get_verification(self, submission: Submission) -> dict[str, Any] | None:
        """The latest verification run of its scored run (null when none was needed):
        aggregates only, and which measurement it is (``run`` of ``of``)."""
        return verification_summary(verification_progress(submission.runs.all()))

    @extend_schema_field(ResourcesSerializer(allow_null=True))
    def get_resources(self, submission: Submission) -> dict[str, Any] | None:
        """The meter's readings of the scored run (null before it ran)."""
        run = self._run(submission)
        return resources_of(run.resources) if run is not None else None


class StaffReasonSerializer(serializers.Serializer[dict[str, Any]]):
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class ReviewSerializer(serializers.Serializer[Any]):
    """A submission's provenance review as its entrant sees it (staff also see the image's
    artifacts as the worker listed them)."""

    status = serializers.ChoiceField(choices=["under_review", "cleared", "disqualified"])
    opened_at = OffsetDateTimeField()
    opened_because = serializers.CharField()
    statement = serializers.CharField(allow_blank=True)
    statement_at = OffsetDateTimeField(allow_null=True)
    decided_at = OffsetDateTimeField(allow_null=True)
    decision_reason = serializers.CharField(allow_blank=True)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = dict(super().to_representation(instance))
        if self.context.get("staff"):
            data["artifacts"] = instance.artifacts
        return data


class ReviewStatementSerializer(serializers.Serializer[dict[str, Any]]):
    statement = serializers.CharField(
        allow_blank=True,
        help_text="The data, the checkpoints with their sources and SHA-256 hashes, and the "
        "training code behind the submission (at most 20,000 characters).",
    )


class ReviewDecisionSerializer(serializers.Serializer[dict[str, Any]]):
    decision = serializers.ChoiceField(choices=["cleared", "disqualified"])
    reason = serializers.CharField(min_length=1, help_text="Why (recorded, shown to the entrant).")


class DisqualifySerializer(serializers.Serializer[dict[str, Any]]):
    reason = serializers.CharField(
        min_length=1, help_text="Why the submission is disqualified (recorded)."
    )


def error_responses(*statuses: int) -> dict[int, Any]:
    """The error body for the given statuses, for the schema."""
    return dict.fromkeys(statuses, ErrorSerializer)


# Scoring hosts ------------------------------------------------------------------------


class HostCalibrationSerializer(serializers.Serializer[dict[str, Any]]):
    """A host's latest calibration: the calibration workload, timed as a scored run."""

    median_ns = serializers.IntegerField(
        allow_null=True, help_text="The median of its repetitions; null: it could not be measured."
    )
    noise_pct = serializers.FloatField(
        allow_null=True,
        help_text="Half the repetitions' range, in percent of their median (± of one run).",
    )
    at = OffsetDateTimeField(help_text="When it finished.")
    ok = serializers.BooleanField(
        help_text="Measured and within the drift limit of its class's reference; a host "
        "that drifts is drained."
    )


class HostCpuIsolationSerializer(serializers.Serializer[dict[str, Any]]):
    """The CPUs a host keeps for scored runs, and the rest; or why it does not split them."""

    shared = serializers.BooleanField(
        help_text="Scored runs share every CPU with the web server, the workers and the "
        "engine (the machine is too small to split, or its operator chose so)."
    )
    scoring_cpus = serializers.CharField(
        allow_null=True, help_text='The scored runs\' CPUs ("2-3"); null when shared.'
    )
    other_cpus = serializers.CharField(
        allow_null=True, help_text="Where everything else runs; null when shared."
    )
    reason = serializers.CharField(help_text='Why the CPUs are shared; "" when split.')


class HostSerializer(serializers.Serializer[HostRow]):
    """One scoring host (``portal.hosts.selectors.HostRow``): its machine, its state and its
    class's queue; never what it runs or for whom."""

    name = serializers.CharField()
    hardware_class = serializers.CharField(
        help_text="The benchmarks it scores are those of this class."
    )
    architecture = serializers.CharField()
    gpus = serializers.ListField(
        child=serializers.CharField(), help_text="One GPU model per GPU; empty when none."
    )
    cpu_cores = serializers.IntegerField()
    memory_bytes = serializers.IntegerField()
    state = serializers.ChoiceField(
        choices=["online", "draining", "offline"],
        help_text="offline: no heartbeat within the stale time; draining: finishes its "
        "current run and takes no more.",
    )
    last_heartbeat_at = OffsetDateTimeField()
    queue_length = serializers.IntegerField(
        help_text="Official and practice submissions of its hardware class waiting for a "
        "scoring host (queued or verifying), plus final-rerun runs not yet claimed; the "
        "same for every host of the class."
    )
    calibration = HostCalibrationSerializer(
        allow_null=True,
        help_text="Its latest calibration; null before the first.",
    )
    missing_tools = serializers.ListField(
        child=serializers.CharField(),
        help_text="The host tools a scored run or its verification needs that it lacks "
        "(the supervisor, say): it refused to register and takes no run until they are "
        "installed. Empty when none.",
    )
    cpu_isolation = HostCpuIsolationSerializer(
        allow_null=True,
        help_text="Where its scored runs compute (PODIUM_SCORING_CPUS); null until it reports it.",
    )
