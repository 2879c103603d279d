"""Serializers of the final standings' endpoints (``standings``)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from portal.api.serializers import OffsetDateTimeField, UploadField
from portal.standings.models import Correction
from portal.standings.nominations import NominationState


class NominationStateSerializer(serializers.Serializer[NominationState]):
    deadline = OffsetDateTimeField(help_text="First instant nominations are refused.")
    open = serializers.BooleanField(help_text="Whether nominations may still change.")
    team = serializers.CharField(help_text="Your team's name; empty when you are on your own.")
    nominated = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="The submission ids your team (or you, on your own) named, if any.",
    )
    set_by = serializers.CharField(
        help_text="The username of the member who named them; empty while the default applies."
    )
    set_at = OffsetDateTimeField(
        allow_null=True, help_text="When they were named; null while the default applies."
    )
    counted = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="The submission ids that count now (the nomination, else the two best).",
    )
    default = serializers.BooleanField(help_text="True while nothing is named: the two best count.")
    eligible = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="Your team's (or your) passing official submissions, best first: what may "
        "be nominated.",
    )


class NominationsUpdateSerializer(serializers.Serializer[dict[str, Any]]):
    submission_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        allow_empty=True,
        help_text="Up to two of your team's (or your) passing official submissions; [] "
        "restores the default.",
    )


class StandingRowSerializer(serializers.Serializer[dict[str, Any]]):
    rank = serializers.IntegerField()
    entrant = serializers.CharField()
    wall_time_ns = serializers.IntegerField(
        help_text="The median of the passing final runs (the best official run without a rerun)."
    )
    runs = serializers.IntegerField(help_text="Passing runs the time is the median of.")
    submission_id = serializers.IntegerField()
    tied = serializers.BooleanField(
        help_text="Within the class's noise band of a neighbour after extra runs: same rank."
    )
    review = serializers.CharField(
        allow_null=True,
        help_text="The submission's provenance review: ``cleared``, ``under_review``, or "
        "null when it was never reviewed (a prize position is published only once cleared).",
    )


class CorrectionSerializer(serializers.Serializer[Correction]):
    at = OffsetDateTimeField()
    reason = serializers.CharField()
    previous_digest = serializers.CharField()
    digest = serializers.CharField()


class StandingsSerializer(serializers.Serializer[dict[str, Any]]):
    benchmark = serializers.CharField()
    state = serializers.CharField(help_text="Always ``final`` here.")
    source = serializers.CharField(help_text="``final_rerun`` or ``board``.")  # type: ignore[assignment]
    published_at = OffsetDateTimeField()
    digest = serializers.CharField(
        help_text="sha256:<hex> of the canonical CSV (``standings.csv``, byte for byte)."
    )
    cohort = serializers.CharField(
        help_text="The cohort that decided them: ``final`` (private, fresh) or ``official`` "
        "(not fresh: the rerun had no final cohort, or the board was published)."
    )
    previous_digests = serializers.ListField(child=serializers.CharField())
    rows = StandingRowSerializer(many=True)
    corrections = CorrectionSerializer(many=True)


class FinalRerunSerializer(serializers.Serializer[dict[str, Any]]):
    cohort = serializers.CharField(help_text="``final`` or ``official``.")
    final_runs = serializers.IntegerField()
    extra_runs = serializers.IntegerField()
    started_at = OffsetDateTimeField()
    complete = serializers.BooleanField()
    pending_extra = serializers.ListField(child=serializers.IntegerField())
    dropped = serializers.DictField(child=serializers.CharField())
    rows = StandingRowSerializer(many=True)


class ReasonSerializer(serializers.Serializer[dict[str, Any]]):
    reason = serializers.CharField(min_length=1, help_text="Why (recorded in the audit trail).")


class FinalRerunStartSerializer(ReasonSerializer):
    confirm_official_cohort = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="Without a final cohort: the words 'rerun on the official cohort', to "
        "confirm a rerun on images that are not fresh (ignored with a final cohort).",
    )


class WriteUpSerializer(serializers.Serializer[Any]):
    submission_id = serializers.IntegerField()
    benchmark = serializers.CharField(source="benchmark.slug")
    entrant = serializers.CharField(source="entrant.username")
    file_name = serializers.CharField()
    size_bytes = serializers.IntegerField()
    sha256 = serializers.CharField()
    public = serializers.BooleanField()
    uploaded_at = OffsetDateTimeField()


class WriteUpUploadSerializer(serializers.Serializer[dict[str, Any]]):
    writeup = UploadField(help_text="The write-up, a PDF of at most PODIUM_WRITEUP_MAX_BYTES.")
    public = serializers.BooleanField(
        default=False, help_text="Whether everyone may read it (default: staff and you only)."
    )


class WriteUpPublicSerializer(serializers.Serializer[dict[str, Any]]):
    public = serializers.BooleanField()
