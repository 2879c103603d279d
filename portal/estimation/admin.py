"""Metered estimation in the admin: a phase's rules (editable), its suites and the entries
with their grades (read-only: suites are generated or imported by ``manage.py
estimation_suite``, entries come from uploads and the grader)."""

from __future__ import annotations

from django.contrib import admin

from portal.core.admin_helpers import ReadOnlyMixin
from portal.estimation.models import Entry, FinalScore, PhaseRules, Suite


@admin.register(PhaseRules)
class PhaseRulesAdmin(admin.ModelAdmin[PhaseRules]):
    list_display = ["benchmark", "width", "depth", "flop_budget", "residual_rule", "wall_cap_s"]


@admin.register(Suite)
class SuiteAdmin(ReadOnlyMixin, admin.ModelAdmin[Suite]):
    list_display = [
        "benchmark",
        "role",
        "status",
        "origin",
        "n_mlps",
        "progress_done",
        "progress_total",
        "generated_on",
        "finished_at",
    ]
    list_filter = ["role", "status", "origin"]
    exclude = ["stats"]


@admin.register(Entry)
class EntryAdmin(ReadOnlyMixin, admin.ModelAdmin[Entry]):
    list_display = [
        "pk",
        "benchmark",
        "entrant",
        "team",
        "status",
        "public_score",
        "withheld_score",
        "fallbacks",
        "submitted_at",
    ]
    list_filter = ["benchmark", "status"]
    exclude = ["results"]


@admin.register(FinalScore)
class FinalScoreAdmin(ReadOnlyMixin, admin.ModelAdmin[FinalScore]):
    list_display = ["entry", "suite", "status", "score", "fallbacks", "graded_at"]
    exclude = ["results"]
