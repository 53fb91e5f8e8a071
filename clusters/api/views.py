"""The clusters REST API, admins only, like the /clusters/ pages: a cluster's record holds its
connection details (kubeconfig path, context, the last error). The token endpoint is write-only."""

from __future__ import annotations

from django.views.decorators.debug import sensitive_variables
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from accounts.roles import Role
from availability.waiting import waits_on
from core.errors import RuntimeFailure

from .. import services
from ..kubernetes import UnusableSettings
from ..models import Cluster
from .serializers import ClusterSerializer, HFTokenResultSerializer, HFTokenSerializer


class NameTaken(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "name_taken"


class SettingsUnusable(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "cluster_settings"


class ClusterUnavailable(APIException):
    status_code = status.HTTP_502_BAD_GATEWAY
    default_code = "cluster_error"


def _fields(data: dict) -> dict:
    return {k: v for k, v in data.items() if k in services.EDITABLE}


@waits_on("a cluster's API server")
class ClusterViewSet(viewsets.ModelViewSet):
    """Registered Kubernetes clusters and their last health check."""

    queryset = Cluster.objects.all()
    serializer_class = ClusterSerializer
    lookup_field = "name"
    lookup_value_regex = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    renderer_classes = [JSONRenderer]  # no browsable forms echoing what was typed
    required_roles = {"list": Role.ADMIN, "retrieve": Role.ADMIN, "create": Role.ADMIN, "update": Role.ADMIN,
                      "partial_update": Role.ADMIN, "destroy": Role.ADMIN, "check": Role.ADMIN,
                      "hf_token": Role.ADMIN}

    def perform_create(self, serializer):
        if Cluster.objects.filter(name=serializer.validated_data["name"]).exists():
            raise NameTaken(f"a cluster named {serializer.validated_data['name']} is already registered")
        serializer.instance = services.cluster_create(**_fields(serializer.validated_data), user=self.request.user,
                                                      via="api")

    def perform_update(self, serializer):
        serializer.instance = services.cluster_update(
            cluster=serializer.instance, user=self.request.user, via="api", **_fields(serializer.validated_data))

    def perform_destroy(self, instance):
        services.cluster_delete(cluster=instance, user=self.request.user, via="api")

    @extend_schema(request=None, responses={202: ClusterSerializer})
    @action(detail=True, methods=["post"])
    def check(self, request, name=None):
        """Check the cluster again (a task): reachability, CRD versions, GPUs."""
        cluster = self.get_object()
        services.cluster_check_later(cluster)
        return Response(self.get_serializer(cluster).data, status=status.HTTP_202_ACCEPTED)

    @sensitive_variables("data", "v")
    @extend_schema(request=HFTokenSerializer, responses={
        201: HFTokenResultSerializer, 200: HFTokenResultSerializer,
        502: OpenApiResponse({"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]},
                             description="The cluster did not take the Secret: it could not be reached, or its "
                                         "connection settings could not be loaded; `detail` says which.")})
    @action(detail=True, methods=["post"], url_path="hf-token")
    def hf_token(self, request, name=None):
        """Create or replace the Hugging Face token Secret in a namespace. Write-only: the
        answer never contains the token."""
        cluster = self.get_object()
        data = HFTokenSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        try:
            created = services.hf_token_secret_put(
                cluster=cluster, namespace=v["namespace"], value=v["value"], via="api",
                secret_name=v["secret_name"], key=v["key"], user=request.user)
        except UnusableSettings as exc:  # the registration, not the cluster: fix it first
            raise SettingsUnusable(str(exc)) from None
        except RuntimeFailure as exc:
            raise ClusterUnavailable(str(exc)) from None
        result = {"namespace": v["namespace"], "secret_name": v["secret_name"], "key": v["key"], "created": created}
        return Response(result, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)
