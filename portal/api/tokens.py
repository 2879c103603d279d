"""API tokens (``/api/v1/tokens/``): exchanging a username and password for a token,
listing the caller's tokens and revoking one. Views and their serializers.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import AllowAny, BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.accounts.models import ApiToken
from portal.accounts.services import token_create, token_revoke
from portal.api.common import NOT_FOUND, OffsetDateTimeField, caller_id, error_responses
from portal.core.login_limits import DEVICE_HEADER, LoginLimited, issue_device, login_authenticate
from portal.core.throttles import PostRateThrottle


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


class TokenListCreateView(APIView):
    """POST: exchange username and password for a new token. GET: your tokens.

    POSTs are throttled per client address (``tokens`` scope), and failed ones count
    toward the same per-account and per-address limits as the browser sign-in form
    (``portal.core.login_limits``): past either, even the right password is 429 ``throttled``.
    A success also answers a device string (and sets it as the device cookie); a client that
    sends it back in ``X-Podium-Device`` is counted as that known device of the account.
    """

    throttle_scope = "tokens"
    throttle_classes = [PostRateThrottle]

    def get_permissions(self) -> list[BasePermission]:
        if self.request.method == "POST":
            return [AllowAny()]
        return [IsAuthenticated()]

    @extend_schema(
        operation_id="tokens_create",
        tags=["tokens"],
        request=TokenCreateSerializer,
        parameters=[
            OpenApiParameter(
                DEVICE_HEADER,
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="The device string an earlier sign-in of this client answered: "
                "failed sign-ins then count at this device only.",
            )
        ],
        responses={201: TokenCreatedSerializer, **error_responses(400, 401, 415, 429)},
        auth=[],
    )
    def post(self, request: Request) -> Response:
        serializer = TokenCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            user = login_authenticate(
                request=request._request, username=data["username"], password=data["password"]
            )
        except LoginLimited as refusal:
            detail = "Too many failed sign-ins at this account or from this address."
            raise exceptions.Throttled(wait=refusal.retry_after_s, detail=detail) from None
        if user is None:
            raise exceptions.AuthenticationFailed("Wrong username or password.")
        token = token_create(user=user, label=data["label"])
        device = issue_device(request._request, user)
        return Response(
            {"token": token.key, "id": token.pk, "label": token.label, "device": device},
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(
        operation_id="tokens_list",
        tags=["tokens"],
        responses={200: TokenSerializer(many=True), **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        tokens = ApiToken.objects.filter(user_id=caller_id(request)).order_by("-created_at", "-id")
        return Response(TokenSerializer(tokens, many=True).data)


class TokenDetailView(APIView):
    """Revoke one of your tokens."""

    @extend_schema(
        operation_id="tokens_destroy", tags=["tokens"], responses={204: None, **NOT_FOUND}
    )
    def delete(self, request: Request, token_id: int) -> Response:
        token_revoke(user=request.user, token_id=token_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
