"""Scoring hosts (``/api/v1/hosts/``): the scoring fleet as any signed-in user may see it.

Views and their serializers.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.common import OffsetDateTimeField, error_responses
from portal.hosts.selectors import HostRow, host_rows


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


class HostListView(APIView):
    """Every scoring host that is not retired, with its state and its class's queue
    length (a plain list: staff bound the fleet). Nothing says what a host runs."""

    @extend_schema(
        operation_id="hosts_list",
        tags=["hosts"],
        responses={200: HostSerializer(many=True), **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        # The stubs type a plain Serializer's instance as one item even with many=True
        # (typeddjango/djangorestframework-stubs#260).
        return Response(HostSerializer(host_rows(timezone.now()), many=True).data)  # type: ignore[arg-type]
