"""Final settings (nomination deadline, runs), the published standings and the entrants'
write-ups in the admin.

Staff with ``standings.publish_standings`` start the final rerun, publish and correct
from the final settings' list (one row per benchmark; add one with the defaults to act on
a benchmark that has none). Each action asks for a reason and goes through the same
audited service as the API's staff endpoints; the frozen rows are read-only. Creating,
editing and deleting final settings is audited (``final_settings``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.template.response import TemplateResponse

from portal.audit.reasons import reasoned_action
from portal.audit.services import Origin
from portal.contests.models import Benchmark
from portal.core.admin_helpers import ReadOnlyMixin
from portal.standings import publishing, rerun
from portal.standings.final_settings import final_settings_delete, final_settings_save
from portal.standings.models import Correction, FinalSettings, StandingRow, Standings, WriteUp
from portal.standings.selectors import board_state

StandingsStep = Callable[..., object]
CONFIRM = "confirm_official_cohort"


@admin.register(FinalSettings)
class FinalSettingsAdmin(admin.ModelAdmin[FinalSettings]):
    list_display = [
        "benchmark",
        "nomination_deadline",
        "final_runs",
        "extra_runs",
        "prize_positions",
        "state",
    ]
    list_select_related = ["benchmark"]
    actions = ["start_final_rerun", "publish", "correct"]

    @admin.display(description="Board")
    def state(self, settings: FinalSettings) -> str:
        return board_state(settings.benchmark)

    def has_publish_standings_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(rerun.PUBLISH))

    def save_model(
        self, request: HttpRequest, obj: FinalSettings, form: ModelForm[Any], change: bool
    ) -> None:
        before = None
        if change:
            stored = FinalSettings.objects.filter(pk=obj.pk).values(*form.changed_data).first()
            before = stored or {}
        final_settings_save(
            settings=obj, before=before, actor=request.user, origin=Origin.of(request)
        )

    def delete_model(self, request: HttpRequest, obj: FinalSettings) -> None:
        final_settings_delete(settings=obj, actor=request.user, origin=Origin.of(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[FinalSettings]) -> None:
        for settings in queryset.select_related("benchmark"):
            self.delete_model(request, settings)

    @admin.action(
        description="Start the final rerun of the selected benchmarks (audited)",
        permissions=["publish_standings"],
    )
    def start_final_rerun(
        self, request: HttpRequest, queryset: QuerySet[FinalSettings]
    ) -> TemplateResponse | None:
        confirmation = request.POST.get(CONFIRM, "")
        return self._step(
            request,
            queryset,
            action="start_final_rerun",
            step=functools.partial(rerun.final_rerun_start, confirm_official_cohort=confirmation),
            title="Start the final rerun",
            explanation="Queue the final runs of every counted submission on the final "
            "cohort. Only after the benchmark closes and its nomination deadline passes. A "
            "benchmark without a final cohort reruns on its official cohort, whose images "
            "are not fresh, only when you type the words below.",
            fields=[
                (
                    CONFIRM,
                    "Without a final cohort, type "
                    f'"{rerun.OFFICIAL_COHORT_CONFIRMATION}" to rerun on the official one',
                )
            ],
        )

    @admin.action(
        description="Publish the final standings of the selected benchmarks (audited)",
        permissions=["publish_standings"],
    )
    def publish(
        self, request: HttpRequest, queryset: QuerySet[FinalSettings]
    ) -> TemplateResponse | None:
        return self._step(
            request,
            queryset,
            action="publish",
            step=publishing.standings_publish,
            title="Publish the final standings",
            explanation="Freeze the standings (the final rerun's result when one was "
            "started, else the board; a metered-estimation phase's final rerun of its "
            "estimators) with their digest. A later change is a correction. Refused, naming "
            "the rows, while a prize position is not cleared by review (the reviews missing "
            "are opened).",
        )

    @admin.action(
        description="Correct the published standings of the selected benchmarks (audited)",
        permissions=["publish_standings"],
    )
    def correct(
        self, request: HttpRequest, queryset: QuerySet[FinalSettings]
    ) -> TemplateResponse | None:
        return self._step(
            request,
            queryset,
            action="correct",
            step=publishing.standings_correct,
            title="Correct the published standings",
            explanation="Compute the standings again from their source and freeze the "
            "result; the old digest stays on the correction, shown on the page.",
        )

    def _step(
        self,
        request: HttpRequest,
        queryset: QuerySet[FinalSettings],
        *,
        action: str,
        step: StandingsStep,
        title: str,
        explanation: str,
        fields: Sequence[tuple[str, str]] = (),
    ) -> TemplateResponse | None:
        """Ask why (and ``fields``, read by ``step``'s caller), then take the step on each
        selected row's benchmark."""

        def apply(settings: FinalSettings, reason: str, origin: Origin) -> object:
            benchmark: Benchmark = settings.benchmark
            return step(benchmark=benchmark, actor=request.user, reason=reason, origin=origin)

        return reasoned_action(
            request,
            self,
            queryset.select_related("benchmark"),
            action=action,
            title=title,
            explanation=explanation,
            reason_required=True,
            apply=apply,
            done=lambda count: f"{title}: {count} benchmark(s).",
            fields=fields,
        )


class StandingRowInline(admin.TabularInline[StandingRow, Standings]):
    model = StandingRow
    extra = 0
    can_delete = False
    readonly_fields = [
        "position",
        "rank",
        "entrant",
        "submission_id",
        "wall_time_ns",
        "runs",
        "tied",
    ]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class CorrectionInline(admin.TabularInline[Correction, Standings]):
    model = Correction
    extra = 0
    can_delete = False
    readonly_fields = ["at", "by", "reason", "previous_digest", "digest"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Standings)
class StandingsAdmin(admin.ModelAdmin[Standings]):
    list_display = ["benchmark", "source", "published_at", "digest"]
    readonly_fields = ["benchmark", "source", "published_at", "published_by", "reason", "digest"]
    inlines = [StandingRowInline, CorrectionInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WriteUp)
class WriteUpAdmin(ReadOnlyMixin, admin.ModelAdmin[WriteUp]):
    """Who wrote up which submission; the PDF itself is read through the API, with a
    reason when it is not public (audited)."""

    list_display = ["submission", "entrant", "benchmark", "public", "size_bytes", "uploaded_at"]
    list_filter = ["benchmark", "public"]
    search_fields = ["entrant__username", "submission__id"]
    readonly_fields = [
        "benchmark",
        "entrant",
        "submission",
        "file_name",
        "size_bytes",
        "sha256",
        "public",
        "uploaded_at",
    ]
