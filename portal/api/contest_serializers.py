"""The shapes of the contest endpoints: a contest with its phases in order, its facts and
its announcements. Markdown comes twice: as written (``body``, the facts) and as the
sanitised HTML the pages show (``body_html``, ``facts_html``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.api.serializers import OffsetDateTimeField
from portal.contests.markup import markdown_html
from portal.contests.models import Announcement
from portal.contests.phases import ContestView, Phase

FACTS = ("prizes", "timeline", "final_ranking")


class PhaseSerializer(serializers.Serializer[Phase]):
    """One phase: a benchmark of its own (see ``/api/v1/benchmarks/{slug}/``)."""

    order = serializers.IntegerField(source="benchmark.phase_order")
    name = serializers.CharField(source="label", help_text='Its name, else "Phase N".')
    slug = serializers.CharField(source="benchmark.slug")
    title = serializers.CharField(source="benchmark.title")
    status = serializers.CharField(
        source="schedule.status", help_text="upcoming, open or closed (its window at this moment)."
    )
    opens_at = OffsetDateTimeField(source="benchmark.opens_at")
    closes_at = OffsetDateTimeField(source="benchmark.closes_at")
    hardware_class = serializers.CharField(source="benchmark.hardware_class_id")


class AnnouncementSerializer(serializers.ModelSerializer[Announcement]):
    contest = serializers.CharField(source="contest.slug")
    posted_at = OffsetDateTimeField()
    body = serializers.CharField(help_text="As staff wrote it (Markdown).")
    body_html = serializers.SerializerMethodField(help_text="Sanitised HTML, as the pages show it.")

    class Meta:
        model = Announcement
        fields = ["id", "contest", "title", "body", "body_html", "posted_at"]

    @extend_schema_field(serializers.CharField())
    def get_body_html(self, announcement: Announcement) -> str:
        return markdown_html(announcement.body)


class AnnouncementCreateSerializer(serializers.Serializer[dict[str, Any]]):
    title = serializers.CharField(max_length=200)
    body = serializers.CharField(help_text="Markdown; shown sanitised.")


class FactsSerializer(serializers.Serializer[dict[str, str]]):
    prizes = serializers.CharField(allow_blank=True)
    timeline = serializers.CharField(
        allow_blank=True, help_text="Notes beside the phases' windows."
    )
    final_ranking = serializers.CharField(allow_blank=True)


class ContestSerializer(serializers.Serializer[ContestView]):
    """A contest in the list: its phases in order, each with its window and status."""

    slug = serializers.CharField(source="contest.slug")
    title = serializers.CharField(source="contest.title")
    status = serializers.CharField(
        help_text="open while a phase is open; upcoming while one is still to come; closed after."
    )
    opens_at = OffsetDateTimeField(allow_null=True, help_text="The first phase's opening.")
    closes_at = OffsetDateTimeField(allow_null=True, help_text="The last phase's close.")
    phases = PhaseSerializer(many=True)


class ContestDetailSerializer(ContestSerializer):
    """One contest: its phases, facts and latest announcements."""

    summary = serializers.CharField(source="contest.summary", help_text="Markdown.")
    facts = serializers.SerializerMethodField(help_text="As staff wrote them (Markdown).")
    facts_html = serializers.SerializerMethodField(help_text="Sanitised HTML of each fact.")
    announcements = serializers.SerializerMethodField(
        help_text="The latest, newest first (every one: the announcements endpoint)."
    )

    @extend_schema_field(FactsSerializer)
    def get_facts(self, view: ContestView) -> dict[str, str]:
        return {name: str(getattr(view.contest, name)) for name in FACTS}

    @extend_schema_field(FactsSerializer)
    def get_facts_html(self, view: ContestView) -> dict[str, str]:
        return {name: markdown_html(getattr(view.contest, name)) for name in FACTS}

    @extend_schema_field(AnnouncementSerializer(many=True))
    def get_announcements(self, view: ContestView) -> Any:
        return AnnouncementSerializer(self.context["announcements"], many=True).data
