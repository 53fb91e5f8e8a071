"""The API tokens endpoint's serializers: they validate and present, never write."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from .. import tokens
from ..models import ApiToken


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
