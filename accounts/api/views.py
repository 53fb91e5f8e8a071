"""The API tokens endpoint: a user lists, creates and revokes their own tokens."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.response import Response

from .. import tokens
from ..roles import Role
from .serializers import NewTokenSerializer, TokenCreateSerializer, TokenSerializer


class NameTaken(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "name_taken"


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
