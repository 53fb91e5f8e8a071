"""Serializers validate and present; they never run estimates (the views call the services)."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.exceptions import NotFound

from clusters.models import Cluster
from graphs.version_fields import DynamoVersionField

from ..aic import Inputs, support_matrix
from ..models import DeploymentRequest, Estimate

MAX_GPUS = 4096
MAX_TOKENS = 1_000_000


class EstimateRequestSerializer(serializers.Serializer):
    """``aiconfigurator cli default``'s inputs. ``itl`` is the inter-token latency target,
    AIConfigurator's TPOT. Whether the model, system and backend are supported is AIConfigurator's
    support matrix's to say (the service refuses, naming the field)."""

    model = serializers.ChoiceField(choices=support_matrix()["models"])
    system = serializers.ChoiceField(choices=support_matrix()["systems"])
    gpus = serializers.IntegerField(min_value=1, max_value=MAX_GPUS)
    isl = serializers.IntegerField(min_value=1, max_value=MAX_TOKENS)
    osl = serializers.IntegerField(min_value=1, max_value=MAX_TOKENS)
    ttft = serializers.FloatField(min_value=0.001, max_value=3_600_000)
    itl = serializers.FloatField(min_value=0.001, max_value=3_600_000)
    backend = serializers.ChoiceField(choices=support_matrix()["backends"], default="vllm")
    backend_version = serializers.CharField(max_length=40, required=False, allow_blank=True, default="")
    fresh = serializers.BooleanField(default=False, help_text="estimate again even when these inputs are cached")

    def inputs(self) -> Inputs:
        d = self.validated_data
        return Inputs(model=d["model"], system=d["system"], total_gpus=d["gpus"], isl=d["isl"], osl=d["osl"],
                      ttft=d["ttft"], tpot=d["itl"], backend=d["backend"], backend_version=d["backend_version"] or None)


class EstimateSerializer(serializers.ModelSerializer):
    cached = serializers.SerializerMethodField()
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Estimate
        fields = ("id", "state", "progress", "progress_text", "inputs", "result", "error", "elapsed_s",
                  "perf_db_version", "aiconfigurator_version", "via", "requested_by", "created_at",
                  "started_at", "finished_at", "cached")
        read_only_fields = fields

    def get_cached(self, obj) -> bool:
        return bool(self.context.get("cached", False))


class CompareQuerySerializer(serializers.Serializer):
    a = serializers.IntegerField(min_value=1)
    b = serializers.IntegerField(min_value=1)


class GraphFromEstimateSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=63)
    rank = serializers.IntegerField(min_value=1, default=1)
    mode = serializers.ChoiceField(choices=["agg", "disagg"], required=False,
                                   help_text="the experiment; default: the one AIConfigurator chose")
    # Only a release this control plane knows (core.facts.known_release), and the schema says which.
    dynamo_version = DynamoVersionField(known=True, required=False,
                                        help_text="the Dynamo release the graph is for; default: the latest")


class DgdrQuerySerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=63)
    namespace = serializers.SlugField(max_length=63, required=False)
    # Empty is as absent (a query string's empty optional value): the schema says so.
    dynamo_version = DynamoVersionField(known=False, required=False, allow_blank=True)
    # The same option and default as the POST that applies it: a preview is what would be applied.
    auto_apply = serializers.BooleanField(default=False, help_text="as the POST's auto_apply (default false)")


class ClusterByName(serializers.SlugRelatedField):
    """The cluster to apply to, by name: a name that matches no cluster is a 404."""

    def __init__(self, **kwargs):
        super().__init__(slug_field="name", queryset=Cluster.objects.all(), **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, str) and not Cluster.objects.filter(name=data).exists():
            raise NotFound(f"no cluster named {data!r}")
        return super().to_internal_value(data)


class DgdrApplySerializer(serializers.Serializer):
    cluster = ClusterByName()
    namespace = serializers.SlugField(max_length=63)
    name = serializers.SlugField(max_length=63)
    dynamo_version = DynamoVersionField(known=False, required=False)
    auto_apply = serializers.BooleanField(default=False, help_text=(
        "let the operator create the DGD (default: the control plane adopts it as a graph and applies it)"))


class DeploymentRequestSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    graph = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = DeploymentRequest
        fields = ("id", "estimate", "cluster", "namespace", "name", "phase", "message", "last_status", "read_at",
                  "graph", "manifest", "created_at")
        read_only_fields = fields


class AdoptSerializer(serializers.Serializer):
    graph = serializers.SlugField(max_length=63, help_text="the graph to create, or to add a revision to")
