"""The clusters API's serializers: they validate and present, never write."""

from __future__ import annotations

from rest_framework import serializers

from core.spec import DNS1123_LABEL
from core.untrusted import wrong_json_types

from .. import services
from ..models import Cluster

K8S_NAME = DNS1123_LABEL.pattern  # cluster and namespace names


class ClusterSerializer(serializers.ModelSerializer):
    namespaces = serializers.ListField(child=serializers.RegexField(K8S_NAME, max_length=63, error_messages={
        "invalid": "is not a valid namespace name (lower-case letters, digits and '-')"}), min_length=1)
    name = serializers.RegexField(K8S_NAME, max_length=63, error_messages={
        "invalid": "must be a Kubernetes name (lower-case letters, digits and '-')"})
    dynamo_installed = serializers.BooleanField(read_only=True)

    class Meta:
        model = Cluster
        fields = ["name", "description", "in_cluster", "kubeconfig", "context", "namespaces", "reachable",
                  "server_version", "dynamo_installed", "dgd_versions", "dgdsa_versions", "gpu_allocatable",
                  "gpu_free", "checked_at", "watched_at", "error", "created_at", "updated_at"]
        read_only_fields = ["reachable", "server_version", "dgd_versions", "dgdsa_versions", "gpu_allocatable",
                            "gpu_free", "checked_at", "watched_at", "error", "created_at", "updated_at"]
        # Uniqueness is the service's to check (one message); ``name`` is declared above. The
        # service strips paths itself: lengths are checked on what was sent.
        extra_kwargs = {"kubeconfig": {"trim_whitespace": False}, "context": {"trim_whitespace": False}}

    # The JSON types the schema states, held as stated: DRF would read 12 as "12" and "yes" as true.
    JSON_TYPES = {"name": str, "description": str, "in_cluster": bool, "kubeconfig": str, "context": str,
                  "namespaces": list}

    def to_internal_value(self, data):
        wrong = wrong_json_types(data, self.JSON_TYPES)
        namespaces = data.get("namespaces") if isinstance(data, dict) else None
        if isinstance(namespaces, list) and not all(isinstance(n, str) for n in namespaces):
            wrong["namespaces"] = ["must be a list of strings"]
        if wrong:
            raise serializers.ValidationError(wrong)
        return super().to_internal_value(data)


class HFTokenSerializer(serializers.Serializer):
    namespace = serializers.CharField(max_length=63)
    secret_name = serializers.CharField(max_length=253, default=services.HF_TOKEN_SECRET)
    key = serializers.CharField(max_length=253, default=services.HF_TOKEN_KEY)
    value = serializers.CharField(write_only=True, max_length=4096, style={"input_type": "password"})


class HFTokenResultSerializer(serializers.Serializer):
    namespace = serializers.CharField()
    secret_name = serializers.CharField()
    key = serializers.CharField()
    created = serializers.BooleanField()
