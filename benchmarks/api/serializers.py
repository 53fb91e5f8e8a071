"""Serializers validate and present; they never start runs (the views call the services)."""

from __future__ import annotations

import annotated_types
from django.conf import settings
from django.core.validators import RegexValidator
from rest_framework import serializers
from rest_framework.exceptions import NotFound

from core.errors import UNPROCESSABLE
from graphs.models import Graph

from ..models import PROFILE_CHOICES, BenchmarkRun, Recommendation, Study
from ..profiles import ProfileError, RunParams, resolve
from ..shapes import SHAPE_WRITTEN

PARAM_FIELDS = ("input_tokens_mean", "input_tokens_stddev", "output_tokens_mean", "output_tokens_stddev",
                "concurrency", "request_rate", "sweep", "request_count", "duration_s", "warmup_requests",
                "streaming", "ignore_eos", "seed", "max_seconds")
# A run targets its graph's own frontend, found from the graph's deployment: never a URL given here.
TARGET_FIELDS = ("url", "urls", "endpoint", "host", "port", "base_url", "target")


def _opt(field_class, **kwargs):
    return field_class(required=False, allow_null=True, default=None, **kwargs)


# The host's limits (settings), named in the refusal as RunParams names them.
_LIMITS = {"concurrency": ("BENCHMARK_MAX_CONCURRENCY", "at most {max_value} requests in flight"),
           "request_count": ("BENCHMARK_MAX_REQUESTS", "at most {max_value} requests per invocation"),
           "max_seconds": ("BENCHMARK_MAX_SECONDS", "a run is bounded to at most {max_value} s")}


def _param(field_class, name: str, **kwargs):
    """A run parameter with RunParams' own bounds and the host's limit, so that the API's schema
    states what resolve() enforces (one declaration: benchmarks/profiles.py)."""
    for bound in RunParams.model_fields[name].metadata:
        if isinstance(bound, annotated_types.Ge):
            kwargs["min_value"] = bound.ge
        elif isinstance(bound, annotated_types.Gt):
            kwargs["min_value"] = bound.gt + 1 if field_class is serializers.IntegerField else kwargs.get(
                "min_value", bound.gt)
        elif isinstance(bound, annotated_types.Le):
            kwargs["max_value"] = bound.le
    if name in _LIMITS:
        setting, message = _LIMITS[name]
        kwargs["max_value"] = getattr(settings, setting)
        kwargs["error_messages"] = {"max_value": f"{message} ({setting})"}
    return _opt(field_class, **kwargs)


class GraphByName(serializers.SlugRelatedField):
    """The graph a request is about, by name: a name that matches no graph is a 404 (the
    resource acted on does not exist), not a malformed request."""

    def __init__(self, **kwargs):
        super().__init__(slug_field="name", queryset=Graph.objects.all(), **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, str) and not Graph.objects.filter(name=data).exists():
            raise NotFound(f"no graph named {data!r}")
        return super().to_internal_value(data)


class ParamsMixin(serializers.Serializer):
    """The run parameters, flat. Empty ones take the profile's defaults; cross-field and
    host-limit checks happen in profiles.resolve, whose errors name the field."""

    profile = serializers.ChoiceField(choices=PROFILE_CHOICES, default="custom",
                                      help_text="streaming-chat | long | short | custom")
    input_tokens_mean = _param(serializers.IntegerField, "input_tokens_mean")
    input_tokens_stddev = _param(serializers.FloatField, "input_tokens_stddev")
    output_tokens_mean = _param(serializers.IntegerField, "output_tokens_mean")
    output_tokens_stddev = _param(serializers.FloatField, "output_tokens_stddev")
    concurrency = _param(serializers.IntegerField, "concurrency", help_text="requests in flight")
    request_rate = _param(serializers.FloatField, "request_rate", min_value=0.001, help_text="requests per second")
    sweep = _opt(serializers.ListField, max_length=8, child=serializers.IntegerField(
        min_value=1, max_value=settings.BENCHMARK_MAX_CONCURRENCY,
        error_messages={"max_value": "at most {max_value} requests in flight (BENCHMARK_MAX_CONCURRENCY)"}),
                 help_text="concurrencies, one aiperf invocation each")
    request_count = _param(serializers.IntegerField, "request_count")
    duration_s = _opt(serializers.FloatField, min_value=1)
    warmup_requests = _param(serializers.IntegerField, "warmup_requests")
    streaming = _opt(serializers.BooleanField)
    ignore_eos = _opt(serializers.BooleanField)
    seed = _param(serializers.IntegerField, "seed")
    max_seconds = _param(serializers.IntegerField, "max_seconds", help_text="the run's wall-clock bound")

    def to_internal_value(self, data):
        if hasattr(data, "keys"):
            targets = [k for k in TARGET_FIELDS if k in data]
            if targets:
                raise serializers.ValidationError({targets[0]: [
                    "a benchmark targets only its graph's own frontend (from the graph's deployment); "
                    "no URL or host may be given"]})
            unknown = sorted(set(data.keys()) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({unknown[0]: [f"unknown field; known: {', '.join(self.fields)}"]})
        return super().to_internal_value(data)

    def validate(self, attrs):
        params = {k: attrs.get(k) for k in PARAM_FIELDS}
        try:
            attrs["run_params"] = resolve(attrs["profile"], params)
        except ProfileError as exc:
            # Each field is within its stated bounds here: what resolve() refuses is a rule across
            # fields (a spread above its mean, a count and a duration both), answered 422.
            raise serializers.ValidationError(exc.errors, code=UNPROCESSABLE) from None
        return attrs


class RunCreateSerializer(ParamsMixin):
    graph = GraphByName()


class RunSerializer(serializers.ModelSerializer):
    graph = serializers.SlugRelatedField(slug_field="name", read_only=True)
    revision = serializers.IntegerField(source="revision.number", read_only=True, allow_null=True, default=None)
    requested_by = serializers.CharField(source="requested_by.username", read_only=True, default=None, allow_null=True)
    cancel_requested_by = serializers.CharField(source="cancel_requested_by.username", read_only=True, default=None,
                                                allow_null=True)
    links = serializers.SerializerMethodField()

    class Meta:
        model = BenchmarkRun
        fields = ["id", "graph", "revision", "study", "label", "profile", "params", "state", "progress",
                  "progress_text", "config", "results", "error", "requested_by", "via", "cancel_requested_at",
                  "cancel_requested_by", "created_at", "started_at", "finished_at", "links"]
        read_only_fields = fields

    def get_links(self, run) -> dict[str, str]:
        base = f"/api/benchmarks/runs/{run.pk}"
        return {"self": f"{base}/", "cancel": f"{base}/cancel/", "artifacts": f"{base}/artifacts/",
                "log": f"{base}/log/", "csv": f"{base}/report/?type=csv", "html": f"{base}/report/?type=html",
                "page": f"/benchmarks/runs/{run.pk}/"}


class StudyCreateSerializer(ParamsMixin):
    graph = GraphByName()
    arms = _opt(serializers.ListField, child=serializers.CharField(max_length=12, validators=[RegexValidator(
                    SHAPE_WRITTEN, "a shape is written p<prefill>d<decode> (p2d1) or agg<workers> (agg2)")]),
                max_length=6,
                help_text="shapes like p1d1, p2d1, agg2; empty: every shape with the graph's current GPUs")
    keep_variants = serializers.BooleanField(default=False)

    def validate(self, attrs):
        arms = attrs.get("arms")
        attrs = super().validate(attrs)
        attrs["arms"] = arms
        return attrs


class StudySerializer(serializers.ModelSerializer):
    graph = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.CharField(source="requested_by.username", read_only=True, default=None, allow_null=True)
    runs = serializers.PrimaryKeyRelatedField(many=True, read_only=True)

    class Meta:
        model = Study
        fields = ["id", "graph", "profile", "params", "arms", "keep_variants", "state", "message", "error",
                  "requested_by", "via", "cancel_requested_at", "created_at", "finished_at", "teardown_pending",
                  "runs"]
        read_only_fields = fields


class RecommendSerializer(serializers.Serializer):
    graph = GraphByName()
    ttft_ms = _opt(serializers.FloatField, min_value=0.1, max_value=480_000,
                   help_text="TTFT p90 target; empty: the graph's objectives")
    itl_ms = _opt(serializers.FloatField, min_value=0.1, max_value=60_000,
                  help_text="ITL p90 target; empty: the graph's objectives")
    runs = _opt(serializers.ListField, child=serializers.IntegerField(min_value=1), max_length=100,
                help_text="the evidence; empty: every run under the load of the graph's latest run")


class RecommendationSerializer(serializers.ModelSerializer):
    graph = serializers.SlugRelatedField(slug_field="name", read_only=True)
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None, allow_null=True)
    applied_by = serializers.CharField(source="applied_by.username", read_only=True, default=None, allow_null=True)
    runs = serializers.PrimaryKeyRelatedField(many=True, read_only=True)

    class Meta:
        model = Recommendation
        fields = ["id", "graph", "ttft_ms", "itl_ms", "targets_from", "current", "recommended", "shape", "met",
                  "reasons", "runs", "state", "operations", "result", "created_by", "via", "created_at",
                  "applied_by", "applied_at"]
        read_only_fields = fields


class CompareSerializer(serializers.Serializer):
    runs = RunSerializer(many=True)
    rows = serializers.ListField(child=serializers.DictField())
    series = serializers.ListField(child=serializers.DictField())
    predicted = serializers.ListField(child=serializers.DictField(), help_text=(
        "runs of graphs made from an AIConfigurator configuration: predicted against simulated"))


class ProfileSerializer(serializers.Serializer):
    key = serializers.CharField()
    title = serializers.CharField()
    description = serializers.CharField()
    defaults = serializers.DictField()
