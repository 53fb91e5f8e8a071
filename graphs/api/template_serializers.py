"""The API's graph from a template (``POST /api/graphs/from-template/``): its pools' fields, made
from core.pool's declarations, and its Planner's, made from core's PlannerSettings. Serializers
validate and present; they never call services or runtimes."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from rest_framework import serializers

from core.catalog import TEMPLATES
from core.facts import ENGINES, LATEST, ROUTER_MODES
from core.planner_config import PlannerSettings
from core.pool import POOL_FIELDS, PoolField
from core.spec import DNS1123_LABEL

from ..pool_rules import RULES as POOL_RULES
from ..pydantic_fields import serializer_class
from ..version_fields import DynamoVersionField

# What the schema can say about a name (core.spec's DNS-1123 label; the server checks the rest).
K8S_NAME = DNS1123_LABEL.pattern
NAME_MESSAGE = "must be a Kubernetes name: lower-case letters, digits and '-', starting and ending alphanumeric"


class _PoolValue:
    """A field of core.pool in the API: DRF reads the number or the string, the pool field's own
    check judges it, and the schema says what the pool field declares (PoolValueSchema)."""

    def __init__(self, pool_field: PoolField, **kwargs):
        self.pool_field = pool_field
        if not kwargs.get("required"):
            kwargs["default"] = pool_field.default
        super().__init__(help_text=pool_field.help_text or None, validators=[self._check], **kwargs)

    def _check(self, value):
        try:
            self.pool_field.check(value)
            if value and self.pool_field.name in POOL_RULES:
                POOL_RULES[self.pool_field.name](value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None


class PoolIntegerField(_PoolValue, serializers.IntegerField):
    pass


class PoolTextField(_PoolValue, serializers.CharField):
    def __init__(self, pool_field: PoolField):
        super().__init__(pool_field, allow_blank=True)


class PoolValueSchema(OpenApiSerializerFieldExtension):
    target_class = _PoolValue
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        return self.target.pool_field.json_schema()


class PoolSerializer(serializers.Serializer):
    """A worker pool of the template: omitted fields take their defaults."""

    # The fields are core.pool's, the same ones the create form is made from.
    def get_fields(self):
        return {f.name: PoolIntegerField(f) if f.is_integer else PoolTextField(f) for f in POOL_FIELDS}

    def to_internal_value(self, data):
        unknown = sorted(set(data) - set(self.fields)) if isinstance(data, dict) else []
        if unknown:  # a typo ("replica") would otherwise silently take the default
            raise serializers.ValidationError({unknown[0]: [f"unknown field; known: {', '.join(self.fields)}"]})
        return super().to_internal_value(data)


# Core's PlannerSettings declares each setting once: its fields here are made from it.
PlannerSettingsSerializer = serializer_class(
    PlannerSettings, "PlannerSettingsSerializer", module=__name__,
    doc="Dynamo's Planner as a component of the graph (core/planner_config.py checks the rules 1.6.1 applies "
        "across settings).")


class FromTemplateSerializer(serializers.Serializer):
    template = serializers.ChoiceField(choices=list(TEMPLATES))
    name = serializers.RegexField(K8S_NAME, max_length=63, error_messages={"invalid": NAME_MESSAGE})
    namespace = serializers.RegexField(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$", max_length=63, allow_blank=True,
                                       default="", error_messages={"invalid": NAME_MESSAGE})
    model = serializers.CharField(max_length=300, allow_blank=True, default="")
    backend = serializers.ChoiceField(choices=["", *ENGINES], default="", help_text="empty: the template's")
    # Only a release this control plane knows (core.facts.known_release), and the schema says which.
    dynamo_version = DynamoVersionField(known=True, default=LATEST)
    prefill = PoolSerializer(required=False)
    decode = PoolSerializer(required=False)
    planner = PlannerSettingsSerializer(required=False, help_text="add Dynamo's Planner with these settings")
    description = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")
    router_mode = serializers.ChoiceField(
        choices=ROUTER_MODES, required=False, allow_null=True, default=None,
        help_text="The Frontend's --router-mode (kv: KV-aware routing). Default: the template's, else round-robin.")


class TemplateSerializer(serializers.Serializer):
    key = serializers.CharField()
    title = serializers.CharField()
    description = serializers.CharField()
    backend = serializers.CharField()
    disaggregated = serializers.BooleanField()
    model = serializers.CharField()
    router_mode = serializers.CharField(help_text="The Frontend's router mode the template starts with.")
