"""Campaigns in the admin: their settings, the rounds (read-only) with their entries, the
crown, and the staff controls: start a round now, pause, resume (campaigns), void (rounds).

Each control asks for a reason on an intermediate page (required to void, optional
otherwise; kept in the audit log) and needs ``campaigns.manage_campaign``: it is offered
only to those who hold it, and refuses anyone else (403) before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from portal.audit.reasons import reasoned_action
from portal.audit.services import Origin
from portal.campaigns import controls
from portal.campaigns.models import Campaign, Crown, Round, RoundEntry
from portal.core import errors
from portal.core.admin_helpers import ReadOnlyMixin, preformatted

MANAGE_CAMPAIGN = "campaigns.manage_campaign"
# Fixed once the campaign exists (each round relies on them); the baseline is recorded
# by `manage.py campaign_baseline SLUG`, never typed in.
PINNED = [
    "benchmark",
    "hardware_class",
    "baseline_image_tag",
    "baseline_image_digest",
    "baseline_image_ref",
    "baseline_recorded_at",
    "paused",
]


def _require(request: HttpRequest) -> None:
    try:
        errors.staff_permission_check(request.user, MANAGE_CAMPAIGN)
    except errors.PermissionDenied as exc:
        raise PermissionDenied(exc.detail) from exc


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin[Campaign]):
    list_display = ["__str__", "hardware_class", "round_size", "slice_count", "paused", "baseline"]
    list_select_related = ["benchmark", "hardware_class"]
    actions = ["start_round", "pause", "resume"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return [name for name in PINNED if name != "benchmark"] + ["crown_note"]
        return [*PINNED, "crown_note"]

    def save_model(self, request: HttpRequest, obj: Campaign, form: Any, change: bool) -> None:
        """A new campaign runs on its benchmark's hardware class."""
        if not change:
            obj.hardware_class_id = obj.benchmark.hardware_class_id
        super().save_model(request, obj, form, change)

    def has_manage_campaign_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(MANAGE_CAMPAIGN)

    @admin.display(description="Baseline image", boolean=True)
    def baseline(self, campaign: Campaign) -> bool:
        return campaign.has_baseline

    @admin.action(
        description="Start a round now (whatever the trigger says)", permissions=["manage_campaign"]
    )
    def start_round(
        self, request: HttpRequest, queryset: QuerySet[Campaign]
    ) -> TemplateResponse | None:
        return self._control(
            request,
            queryset,
            action="start_round",
            title="Start a round now",
            explanation="A round starts with the leader and the oldest queued challengers.",
            service=lambda campaign, actor, reason, origin: controls.round_start_now(
                campaign=campaign, actor=actor, origin=origin
            ),
        )

    @admin.action(
        description="Pause the selected campaigns (no new round)", permissions=["manage_campaign"]
    )
    def pause(self, request: HttpRequest, queryset: QuerySet[Campaign]) -> TemplateResponse | None:
        return self._control(
            request,
            queryset,
            action="pause",
            title="Pause",
            explanation="No new round starts; an open round still runs (void it to stop it).",
            service=lambda campaign, actor, reason, origin: controls.campaign_pause(
                campaign=campaign, actor=actor, paused=True, reason=reason, origin=origin
            ),
        )

    @admin.action(description="Resume the selected campaigns", permissions=["manage_campaign"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Campaign]) -> TemplateResponse | None:
        return self._control(
            request,
            queryset,
            action="resume",
            title="Resume",
            explanation="Rounds start again when the trigger says so.",
            service=lambda campaign, actor, reason, origin: controls.campaign_pause(
                campaign=campaign, actor=actor, paused=False, reason=reason, origin=origin
            ),
        )

    def _control(
        self,
        request: HttpRequest,
        queryset: QuerySet[Campaign],
        *,
        action: str,
        title: str,
        explanation: str,
        service: Callable[[Campaign, Any, str, Origin], object],
    ) -> TemplateResponse | None:
        _require(request)
        return reasoned_action(
            request,
            self,
            queryset.select_related("benchmark"),
            action=action,
            title=title,
            explanation=explanation,
            reason_required=False,
            apply=lambda campaign, reason, origin: service(campaign, request.user, reason, origin),
            done=lambda count: f"{title}: {count} campaign(s).",
        )


class RoundEntryInline(ReadOnlyMixin, admin.TabularInline[RoundEntry, Round]):
    model = RoundEntry
    fields = ["position", "role", "submission", "verdict", "score", "agreement", "reason"]
    extra = 0


@admin.register(Round)
class RoundAdmin(ReadOnlyMixin, admin.ModelAdmin[Round]):
    list_display = [
        "__str__",
        "campaign",
        "ordinal",
        "status",
        "tries",
        "host",
        "created_at",
        "void_reason",
    ]
    list_filter = ["status", "campaign"]
    list_select_related = ["campaign__benchmark"]
    inlines = [RoundEntryInline]
    fields = [
        "campaign",
        "ordinal",
        "status",
        "void_reason",
        "void_cause",
        "void_by",
        "created_at",
        "started_at",
        "finished_at",
        "tries",
        "next_try_at",
        "host",
        "heartbeat_at",
        "material",
        "request_digest",
        "slice_count",
        "evidence_digest",
        "evidence_text",
    ]
    readonly_fields = ["evidence_text"]
    actions = ["void"]

    def has_manage_campaign_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(MANAGE_CAMPAIGN)

    @admin.display(description="Evidence")
    def evidence_text(self, round_: Round) -> str:
        return preformatted(json.dumps(round_.evidence, indent=2, sort_keys=True))

    @admin.action(
        description="Void the selected open rounds (asks for a reason)",
        permissions=["manage_campaign"],
    )
    def void(self, request: HttpRequest, queryset: QuerySet[Round]) -> TemplateResponse | None:
        _require(request)
        return reasoned_action(
            request,
            self,
            queryset,
            action="void",
            title="Void rounds",
            explanation="A void round records the reason, queues its challengers again "
            "and spends its ordinal; no submission's state and no leader change.",
            reason_required=True,
            apply=lambda round_, reason, origin: controls.round_void(
                round_=round_, reason=reason, actor=request.user, origin=origin
            ),
            done=lambda count: f"Voided {count} round(s).",
        )


@admin.register(Crown)
class CrownAdmin(ReadOnlyMixin, admin.ModelAdmin[Crown]):
    list_display = ["campaign", "submission", "score", "round", "since"]
    list_select_related = ["campaign__benchmark", "submission", "round"]
