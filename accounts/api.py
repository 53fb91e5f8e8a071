"""The API tokens endpoint: a user lists, creates and revokes their own tokens."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.response import Response

from . import tokens
from .models import ApiToken
from .roles import Role


class NameTaken(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "name_taken"


class TokenSerializer(serializers.ModelSerializer):
    prefix = serializers.CharField(read_only=True, help_text="The key's first characters, to tell tokens apart.")
    expired = serializers.BooleanField(read_only=True)

    class Meta:
        model = ApiToken
        fields = ["prefix", "name", "created", "expiry", "expired"]
        read_only_fields = fields


class TokenCreateSerializer(serializers.Serializer):
    def to_internal_value(self, data):
        if isinstance(data, dict) and "name" in data and not isinstance(data["name"], str):
            raise ValidationError({"name": ["must be a string"]})  # DRF would turn 12 into "12"
        return super().to_internal_value(data)

    # Not blank (a pattern searched, as JSON Schema does); lengths counted on what was sent.
    name = serializers.RegexField(r"\S", max_length=100, trim_whitespace=False,
                                  error_messages={"invalid": "give the token a name (what or who uses it)"})
    days = serializers.IntegerField(min_value=1, max_value=tokens.MAX_DAYS, default=tokens.DEFAULT_DAYS)


class NewTokenSerializer(TokenSerializer):
    key = serializers.CharField(read_only=True, help_text="Shown once: send it as `Authorization: Token <key>`.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "key"]
        read_only_fields = fields


class TokenViewSet(mixins.ListModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """Your API tokens. Create one (the key is in the answer, once), list them (never the
    keys), revoke one by its prefix. Viewers and above; only your own."""

    serializer_class = TokenSerializer
    lookup_field = "prefix"
    lookup_value_regex = "[0-9a-f]{8}"
    # Tokens are the caller's own: reading and writing them needs any role, not the operator role.
    required_roles = {"list": Role.VIEWER, "create": Role.VIEWER, "destroy": Role.VIEWER}

    def get_queryset(self):
        return tokens.tokens_of(self.request.user)

    def get_object(self):
        token = self.get_queryset().filter(token_key__startswith=self.kwargs["prefix"]).first()
        if token is None:
            raise NotFound("you have no token with this prefix")
        return token

    @extend_schema(request=TokenCreateSerializer, responses={201: NewTokenSerializer})
    def create(self, request):
        body = TokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            token, key = tokens.token_create(user=request.user, name=body.validated_data["name"],
                                             days=body.validated_data["days"], via="api")
        except tokens.TokenNameTaken as exc:
            raise NameTaken({exc.field: [str(exc)]}) from None
        except tokens.TokenError as exc:
            raise ValidationError({exc.field: [str(exc)]}) from None
        token.key = key
        return Response(NewTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        tokens.token_revoke(token=instance, actor=self.request.user, via="api")
