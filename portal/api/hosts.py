"""``GET /api/v1/hosts/``: the scoring fleet as any signed-in user may see it."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import serializers as s
from portal.hosts.selectors import host_rows


class HostListView(APIView):
    """Every scoring host that is not retired, with its state and its class's queue
    length (a plain list: staff bound the fleet). Nothing says what a host runs."""

    @extend_schema(
        operation_id="hosts_list",
        tags=["hosts"],
        responses={200: s.HostSerializer(many=True), **s.error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        # The stubs type a plain Serializer's instance as one item even with many=True
        # (typeddjango/djangorestframework-stubs#260).
        return Response(s.HostSerializer(host_rows(timezone.now()), many=True).data)  # type: ignore[arg-type]
