"""Serializers validate and present; they never call services or Prometheus."""

from __future__ import annotations

from rest_framework import serializers

from ..models import Objectives


class ObjectivesSerializer(serializers.ModelSerializer):
    graph = serializers.CharField(source="graph.name", read_only=True)
    updated_by = serializers.CharField(source="updated_by.username", read_only=True, default=None, allow_null=True)
    effective_gpu_hour_price = serializers.DecimalField(source="price", max_digits=9, decimal_places=4,
                                                        read_only=True, allow_null=True,
                                                        help_text="This graph's price, or the global one.")

    class Meta:
        model = Objectives
        fields = ["graph", "ttft_ms", "itl_ms", "gpu_hour_price", "effective_gpu_hour_price", "updated_by",
                  "updated_at"]
        read_only_fields = ["updated_at"]
        extra_kwargs = {"updated_at": {"allow_null": True}}  # null until objectives are first set


class ObjectivesOutSerializer(serializers.Serializer):
    ttft_ms = serializers.FloatField(allow_null=True)
    itl_ms = serializers.FloatField(allow_null=True)
    gpu_hour_price = serializers.FloatField(allow_null=True, help_text="Effective price per GPU-hour.")
    price_is_default = serializers.BooleanField(help_text="True when the price is the global GPU_HOUR_PRICE.")
    currency = serializers.CharField()


class CostSerializer(serializers.Serializer):
    gpu_hour_price = serializers.FloatField(allow_null=True)
    currency = serializers.CharField()
    gpus = serializers.DictField(child=serializers.IntegerField(), help_text="GPUs per role as the revision asks.")
    per_million_input = serializers.FloatField(allow_null=True, help_text="Prefill GPUs x price / input tokens.")
    per_million_output = serializers.FloatField(allow_null=True, help_text="Decode GPUs x price / output tokens.")
    per_million_tokens = serializers.FloatField(allow_null=True, help_text="Aggregated workers: all tokens.")


class SummarySerializer(serializers.Serializer):
    """One graph now: the last five minutes."""

    graph = serializers.CharField()
    ttft_p90_ms = serializers.FloatField(allow_null=True)
    itl_p90_ms = serializers.FloatField(allow_null=True)
    request_rate = serializers.FloatField(allow_null=True, help_text="Requests per second.")
    in_flight = serializers.FloatField(allow_null=True)
    kv_hit_rate = serializers.FloatField(
        allow_null=True,
        help_text="KV cache hit rate, 0..1: share of routed prompt tokens the KV router found cached on the worker "
                  "it chose (Dynamo's router metrics). Null without KV routing or traffic.")
    slo = serializers.ChoiceField(choices=["met", "missed", "no_traffic", "not_set", "unknown"],
                                  help_text="Both p90s against their targets; unknown when Prometheus failed.")
    objectives = ObjectivesOutSerializer()
    cost = CostSerializer()
    error = serializers.CharField(allow_blank=True, help_text="Why Prometheus gave no answer, if it did not.")
    simulation = serializers.JSONField(allow_null=True, help_text=(
        "Set when the graph's workers are Dynamo's mocker or vLLM on CPU: {label, reason, services, note}; "
        "the note says what that means for every number above."))


class GoodputSerializer(serializers.Serializer):
    estimate = serializers.FloatField(help_text="Product of the TTFT and ITL shares (independence).")
    lower = serializers.FloatField()
    upper = serializers.FloatField()


class TargetsSerializer(serializers.Serializer):
    total = serializers.IntegerField()
    up = serializers.IntegerField()
    down = serializers.ListField(child=serializers.CharField())


class WindowSummarySerializer(serializers.Serializer):
    """The whole window in one number each. Latencies in ms, rates per second."""

    ttft_p50 = serializers.FloatField(allow_null=True)
    ttft_p90 = serializers.FloatField(allow_null=True)
    ttft_p99 = serializers.FloatField(allow_null=True)
    itl_p50 = serializers.FloatField(allow_null=True)
    itl_p90 = serializers.FloatField(allow_null=True)
    itl_p99 = serializers.FloatField(allow_null=True)
    request_rate = serializers.FloatField(allow_null=True)
    input_tokens = serializers.FloatField(allow_null=True, help_text="Input tokens per second.")
    output_tokens = serializers.FloatField(allow_null=True, help_text="Output tokens per second.")
    kv_hit_rate = serializers.FloatField(
        allow_null=True, help_text="KV cache hit rate over the window, 0..1 (the KV router's metrics).")
    cached_token_share = serializers.FloatField(
        allow_null=True, help_text="Share of prompt tokens the engines reported as cached, 0..1 (frontend metrics).")
    ttft_share = serializers.FloatField(allow_null=True, help_text="Share of requests within the TTFT target.")
    itl_share = serializers.FloatField(allow_null=True, help_text="Share of token gaps within the ITL target.")
    goodput = GoodputSerializer(allow_null=True)
    cost = CostSerializer()
    targets = TargetsSerializer()


class MarkerSerializer(serializers.Serializer):
    at = serializers.FloatField(help_text="Unix seconds.")
    kind = serializers.ChoiceField(choices=["apply", "scale"])
    state = serializers.CharField()
    label = serializers.CharField()
    by = serializers.CharField()
    operation = serializers.IntegerField()


class ChartSerializer(serializers.Serializer):
    """A graph's chart data: every series has one value (or null) per timestamp."""

    graph = serializers.CharField()
    runtime = serializers.CharField()
    simulation = serializers.JSONField(allow_null=True, help_text=(
        "Set when the graph's workers are Dynamo's mocker or vLLM on CPU: {label, reason, services, note}."))
    prometheus = serializers.CharField(help_text="The Prometheus server asked.")
    state = serializers.ChoiceField(choices=["ok", "no_data", "unreachable", "error"])
    message = serializers.CharField(allow_blank=True)
    window = serializers.CharField()
    window_seconds = serializers.IntegerField()
    start = serializers.IntegerField()
    end = serializers.IntegerField()
    step = serializers.IntegerField()
    rate_window = serializers.IntegerField(help_text="Seconds each rate and quantile averages over.")
    objectives = ObjectivesOutSerializer()
    timestamps = serializers.ListField(child=serializers.IntegerField())
    series = serializers.DictField(
        child=serializers.ListField(child=serializers.FloatField(allow_null=True)),
        help_text="ttft_p50..ttft_p99 and itl_p50..itl_p99 (ms), request_rate and output_tokens (per second), "
                  "in_flight, goodput (0..1); one value or null per timestamp, empty lists when state is "
                  "unreachable or error.")
    summary = WindowSummarySerializer(allow_null=True, help_text="Null when Prometheus gave no answer.")
    markers = MarkerSerializer(many=True)


class PodGpuSerializer(serializers.Serializer):
    pod = serializers.CharField()
    gpu_memory_bytes = serializers.IntegerField(allow_null=True)
    gpu_util = serializers.FloatField(allow_null=True, help_text="Percent.")
    gpu_devices = serializers.CharField(allow_blank=True, help_text="CUDA_VISIBLE_DEVICES (local GPU workers).")


class GpuUsageSerializer(serializers.Serializer):
    graph = serializers.CharField()
    runtime = serializers.CharField(allow_null=True)
    source = serializers.ChoiceField(choices=["", "dcgm", "nvml"])
    state = serializers.ChoiceField(choices=["ok", "no_data", "unreachable", "error", "not_deployed"])
    message = serializers.CharField(allow_blank=True)
    pods = PodGpuSerializer(many=True)
