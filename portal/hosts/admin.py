"""Scoring hosts in the admin: the fleet with each machine's facts (read-only; hosts
register themselves), and the drain, resume and retire actions.

Each action asks for a reason on an intermediate page (optional, kept in the audit log)
and needs ``hosts.manage_host`` (held by the "contest staff" group): it is offered only
to those who hold it, and refuses anyone else (403) before anything is read or written.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone

from portal.audit.reasons import reasoned_action
from portal.core import errors
from portal.core.admin_helpers import ReadOnlyMixin, preformatted
from portal.hosts import calibrations, services
from portal.hosts.models import CalibrationFlag, HostCalibration, ReferenceSpread, ScoringHost
from portal.hosts.selectors import host_state_label, memory_text
from portal.submissions.staff import RESCORE

HostService = Callable[..., ScoringHost]


@admin.register(ScoringHost)
class ScoringHostAdmin(ReadOnlyMixin, admin.ModelAdmin[ScoringHost]):
    list_display = [
        "name",
        "hardware_class",
        "architecture",
        "cpu_cores",
        "memory",
        "state",
        "tools_missing",
        "disk_total",
        "last_heartbeat_at",
    ]
    list_filter = ["hardware_class", "status", "architecture"]
    search_fields = ["name", "hardware_class__name", "cpu_model"]
    fields = [
        "name",
        "hardware_class",
        "status",
        "state",
        "tools_missing",
        "registered_at",
        "last_heartbeat_at",
        "architecture",
        "cpu_model",
        "cpu_cores",
        "memory",
        "gpu_list",
        "docker_version",
        "kernel_version",
        "supervisor_sha256",
        "disk_report",
    ]
    readonly_fields = ["state", "tools_missing", "memory", "gpu_list", "disk_total", "disk_report"]
    actions = ["drain", "resume", "retire"]

    def has_manage_host_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(services.MANAGE_HOST)

    @admin.display(description="State")
    def state(self, host: ScoringHost) -> str:
        return host_state_label(host, timezone.now())

    @admin.display(description="Missing tools")
    def tools_missing(self, host: ScoringHost) -> str:
        """The host tools it lacks: it refused to register and takes no run (its worker's
        log says how to install them)."""
        return ", ".join(map(str, host.missing_tools or [])) or "none"

    @admin.display(description="Memory", ordering="memory_bytes")
    def memory(self, host: ScoringHost) -> str:
        return memory_text(host.memory_bytes)

    @admin.display(description="Engine disk")
    def disk_total(self, host: ScoringHost) -> str:
        """All the engine's images, containers, build cache and volumes take together."""
        parts = _disk_parts(host.disk)
        return memory_text(sum(size for _, _, size in parts)) if parts else "not reported"

    @admin.display(description="Engine disk use")
    def disk_report(self, host: ScoringHost) -> str:
        """The engine's ``docker system df``, as the host last recorded it."""
        parts = _disk_parts(host.disk)
        if not parts:
            return "not reported yet"
        lines = [f"{what:<12} {count:>6}  {memory_text(size)}" for what, count, size in parts]
        total = memory_text(sum(size for _, _, size in parts))
        lines.append(f"{'total':<12} {'':>6}  {total}")
        lines.append(f"recorded at {host.disk.get('at', '?')}")
        return preformatted("\n".join(lines))

    @admin.display(description="GPUs")
    def gpu_list(self, host: ScoringHost) -> str:
        return preformatted(json.dumps(host.gpus, indent=2) if host.gpus else "none")

    @admin.action(
        description="Drain the selected hosts (finish the current run, take no more)",
        permissions=["manage_host"],
    )
    def drain(
        self, request: HttpRequest, queryset: QuerySet[ScoringHost]
    ) -> TemplateResponse | None:
        return self._host_action(
            request,
            queryset,
            action="drain",
            service=services.host_drain,
            title="Drain",
            explanation="These hosts finish the run they hold and claim no new one until "
            "they are resumed.",
        )

    @admin.action(
        description="Resume the selected hosts (draining or retired: take work again)",
        permissions=["manage_host"],
    )
    def resume(
        self, request: HttpRequest, queryset: QuerySet[ScoringHost]
    ) -> TemplateResponse | None:
        return self._host_action(
            request,
            queryset,
            action="resume",
            service=services.host_resume,
            title="Resume",
            explanation="These draining or retired hosts become active and claim work again.",
        )

    @admin.action(
        description="Retire the selected hosts (leave the fleet)",
        permissions=["manage_host"],
    )
    def retire(
        self, request: HttpRequest, queryset: QuerySet[ScoringHost]
    ) -> TemplateResponse | None:
        return self._host_action(
            request,
            queryset,
            action="retire",
            service=services.host_retire,
            title="Retire",
            explanation="These hosts leave the fleet: they claim no work, count as offline "
            "and are no longer listed by the API. A worker starting on one does not bring it "
            "back; resuming it does.",
        )

    def _host_action(
        self,
        request: HttpRequest,
        queryset: QuerySet[ScoringHost],
        *,
        action: str,
        service: HostService,
        title: str,
        explanation: str,
    ) -> TemplateResponse | None:
        """Ask for a reason on an intermediate page, then call the service per host."""
        try:
            errors.staff_permission_check(request.user, services.MANAGE_HOST)
        except errors.PermissionDenied as exc:
            raise PermissionDenied(exc.detail) from exc
        return reasoned_action(
            request,
            self,
            queryset,
            action=action,
            title=title,
            explanation=explanation,
            reason_required=False,
            apply=lambda host, reason, origin: service(
                name=host.name, actor=request.user, reason=reason, origin=origin
            ),
            done=lambda count: f"{title}: {count} host(s).",
        )


@admin.register(HostCalibration)
class HostCalibrationAdmin(ReadOnlyMixin, admin.ModelAdmin[HostCalibration]):
    """Each host's calibrations, as recorded (hosts write them; nobody edits them)."""

    list_display = [
        "host",
        "hardware_class",
        "finished_at",
        "trigger",
        "median_ns",
        "noise",
        "drift",
        "ok",
        "reason",
    ]
    list_filter = ["ok", "hardware_class", "trigger"]
    search_fields = ["host__name", "hardware_class"]
    list_select_related = ["host"]
    date_hierarchy = "finished_at"

    @admin.display(description="Noise (±%)", ordering="noise_pct")
    def noise(self, calibration: HostCalibration) -> str:
        return "" if calibration.noise_pct is None else f"{calibration.noise_pct:.2f}"

    @admin.display(description="Drift (%)", ordering="drift_pct")
    def drift(self, calibration: HostCalibration) -> str:
        return "" if calibration.drift_pct is None else f"{calibration.drift_pct:+.2f}"


@admin.register(ReferenceSpread)
class ReferenceSpreadAdmin(ReadOnlyMixin, admin.ModelAdmin[ReferenceSpread]):
    """Each measurement of a reference kit's spread, as recorded (hosts write them; nobody
    edits them). The latest good one of a class and cohort size is its verification
    tolerance (docs/rules.md, "Verification before ranking")."""

    list_display = [
        "hardware_class",
        "cohort_size",
        "finished_at",
        "spread",
        "median",
        "runs",
        "ok",
        "host",
        "image",
        "reason",
    ]
    list_filter = ["ok", "hardware_class", "cohort_size"]
    search_fields = ["hardware_class", "host", "image"]
    date_hierarchy = "finished_at"

    @admin.display(description="Spread (%)", ordering="spread_pct")
    def spread(self, row: ReferenceSpread) -> str:
        return "" if row.spread_pct is None else f"{row.spread_pct:.2f}"

    @admin.display(description="Median (ms)", ordering="median_ns")
    def median(self, row: ReferenceSpread) -> str:
        return "" if row.median_ns is None else f"{row.median_ns / 1e6:.1f}"

    @admin.display(description="Runs")
    def runs(self, row: ReferenceSpread) -> int:
        return len(row.wall_ns)


FlagService = Callable[..., CalibrationFlag]


@admin.register(CalibrationFlag)
class CalibrationFlagAdmin(ReadOnlyMixin, admin.ModelAdmin[CalibrationFlag]):
    """Runs of hosts whose calibration drifted, for staff to rescore (free) or dismiss.

    Both actions need ``submissions.rescore_submission`` (the "contest staff" group) and
    are audited; a rescore also writes the submission's own ``submission.rescore`` event.
    """

    list_display = [
        "run",
        "submission",
        "host",
        "drift",
        "created_at",
        "resolution",
        "resolved_at",
        "resolved_by",
    ]
    list_filter = ["resolution", "calibration__hardware_class"]
    search_fields = ["calibration__host__name", "run__submission__id"]
    list_select_related = ["run__submission", "calibration__host", "resolved_by"]
    actions = ["rescore_for_free", "dismiss"]

    def has_rescore_submission_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(RESCORE)

    @admin.display(description="Submission", ordering="run__submission")
    def submission(self, flag: CalibrationFlag) -> str:
        return f"#{flag.run.submission_id}"

    @admin.display(description="Host", ordering="calibration__host__name")
    def host(self, flag: CalibrationFlag) -> str:
        return flag.calibration.host.name

    @admin.display(description="Drift (%)")
    def drift(self, flag: CalibrationFlag) -> str:
        drift = flag.calibration.drift_pct
        return "" if drift is None else f"{drift:+.2f}"

    @admin.action(
        description="Rescore the flagged runs' submissions (free: charges nothing)",
        permissions=["rescore_submission"],
    )
    def rescore_for_free(
        self, request: HttpRequest, queryset: QuerySet[CalibrationFlag]
    ) -> TemplateResponse | None:
        return self._flag_action(
            request,
            queryset,
            action="rescore_for_free",
            service=calibrations.calibration_flag_rescore,
            title="Rescore for free",
            reason_required=False,
            explanation="Queue a new scored run of each flagged run's submission, charging "
            "nothing; the board keeps the entrant's best passing run. Every open flag of the "
            "same submission is resolved with it.",
        )

    @admin.action(
        description="Dismiss the selected flags (the times stand)",
        permissions=["rescore_submission"],
    )
    def dismiss(
        self, request: HttpRequest, queryset: QuerySet[CalibrationFlag]
    ) -> TemplateResponse | None:
        return self._flag_action(
            request,
            queryset,
            action="dismiss",
            service=calibrations.calibration_flag_dismiss,
            title="Dismiss",
            reason_required=True,
            explanation="Keep these runs' times as they are (say why).",
        )

    def _flag_action(
        self,
        request: HttpRequest,
        queryset: QuerySet[CalibrationFlag],
        *,
        action: str,
        service: FlagService,
        title: str,
        reason_required: bool,
        explanation: str,
    ) -> TemplateResponse | None:
        """Ask for a reason on an intermediate page, then call the service per flag."""
        try:
            errors.staff_permission_check(request.user, RESCORE)
        except errors.PermissionDenied as exc:
            raise PermissionDenied(exc.detail) from exc
        return reasoned_action(
            request,
            self,
            queryset,
            action=action,
            title=title,
            explanation=explanation,
            reason_required=reason_required,
            apply=lambda flag, reason, origin: service(
                flag_id=flag.pk, actor=request.user, reason=reason, origin=origin
            ),
            done=lambda count: f"{title}: {count} flag(s).",
        )


DISK_PARTS = (
    ("images", "images"),
    ("containers", "containers"),
    ("build_cache", "build cache"),
    ("volumes", "volumes"),
)


def _disk_parts(disk: object) -> list[tuple[str, int, int]]:
    """A host's recorded disk use as (what, count, bytes), in report order; [] when none."""
    if not isinstance(disk, dict):
        return []
    parts = []
    for key, what in DISK_PARTS:
        part = disk.get(key)
        if isinstance(part, dict):
            parts.append((what, int(part.get("count") or 0), int(part.get("bytes") or 0)))
    return parts
