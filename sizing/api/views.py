"""The sizing API: AIConfigurator's support matrix, estimates (ask, list, retrieve), two
estimates compared, and a graph made from one ranked configuration. Every write calls the same
service as the page; bad input is a 400 naming the field."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from graphs.models import Graph

from .. import aic, clusters, configurations, dgdr, services
from ..models import DeploymentRequest, Estimate
from .serializers import (
    AdoptSerializer,
    CompareQuerySerializer,
    DeploymentRequestSerializer,
    DgdrApplySerializer,
    DgdrQuerySerializer,
    EstimateRequestSerializer,
    EstimateSerializer,
    GraphFromEstimateSerializer,
)


class SupportView(APIView):
    """What AIConfigurator supports, from its own support matrix: models, systems, backends,
    each system's backends with their database versions, and each model's system/backend pairs."""

    @extend_schema(responses={200: dict})
    def get(self, request):
        return Response(aic.support_matrix())


class EstimateViewSet(mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                      viewsets.GenericViewSet):
    """AIConfigurator estimates. POST the inputs: the answer comes from a stored estimate of the
    same inputs when there is one (``cached``: true, 200), else a new estimate is recorded (201)
    and runs as a job: follow ``state`` and ``progress``."""

    serializer_class = EstimateSerializer
    queryset = Estimate.objects.select_related("requested_by")

    @extend_schema(request=EstimateRequestSerializer, responses={200: EstimateSerializer, 201: EstimateSerializer})
    def create(self, request, *args, **kwargs):
        body = EstimateRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        estimate, cached = services.estimate_request(inputs=body.inputs(), user=request.user, via="api",
                                                     fresh=body.validated_data["fresh"])
        estimate.refresh_from_db()
        return Response(EstimateSerializer(estimate, context={"cached": cached}).data,
                        status=status.HTTP_200_OK if cached else status.HTTP_201_CREATED)

    @extend_schema(request=GraphFromEstimateSerializer, responses={201: dict, 200: dict})
    @action(detail=True, methods=["post"])
    def graph(self, request, pk=None):
        """Make a graph from ranked configuration ``rank`` of experiment ``mode``: AIConfigurator's
        generated DGD through the importer, for the chosen Dynamo release, with its findings."""
        body = GraphFromEstimateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        before = Graph.objects.filter(name=d["name"]).values_list("head__number", flat=True).first()
        made = configurations.graph_from_estimate(estimate=self.get_object(), name=d["name"], rank=d["rank"],
                                                  mode=d.get("mode"), dynamo_version=d.get("dynamo_version"),
                                                  user=request.user, via="api")
        # The same configuration again makes no revision: 200 with "unchanged", as a graph import answers.
        unchanged = made.revision == before
        return Response({**made.as_dict(), "unchanged": unchanged},
                        status=status.HTTP_200_OK if unchanged else status.HTTP_201_CREATED)


    @extend_schema(parameters=[DgdrQuerySerializer], responses={200: dict}, methods=["GET"])
    @extend_schema(request=DgdrApplySerializer, responses={201: DeploymentRequestSerializer}, methods=["POST"])
    @action(detail=True, methods=["get", "post"])
    def dgdr(self, request, pk=None):
        """GET: the estimate's inputs as a DynamoGraphDeploymentRequest (nvidia.com/v1beta1) for the
        operator's profiler on a cluster, with the DGDR CRD's verdict on it (``errors``). POST:
        apply it to a registered cluster (server-side apply) and follow it under
        /api/sizing/requests/."""
        if request.method == "POST":
            body = DgdrApplySerializer(data=request.data)
            body.is_valid(raise_exception=True)
            d = body.validated_data
            req = clusters.dgdr_apply(estimate=self.get_object(), cluster=d["cluster"], namespace=d["namespace"],
                                      name=d["name"], dynamo_version=d.get("dynamo_version"),
                                      auto_apply=d["auto_apply"], user=request.user, via="api")
            return Response(DeploymentRequestSerializer(req).data, status=status.HTTP_201_CREATED)
        q = DgdrQuerySerializer(data=request.query_params)
        q.is_valid(raise_exception=True)
        d = q.validated_data
        obj = dgdr.render(self.get_object().estimate_inputs, name=d["name"], namespace=d.get("namespace") or None,
                          dynamo_version=d.get("dynamo_version") or None, auto_apply=d["auto_apply"])
        return Response({"manifest": obj, "errors": dgdr.schema_errors(obj)})


class DeploymentRequestViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """DGDRs applied from estimates. Retrieving one reads its status from the cluster (the
    operator's phase and message, the whole status kept); ``adopt`` imports the DGD the
    profiler chose as a graph revision."""

    serializer_class = DeploymentRequestSerializer
    queryset = DeploymentRequest.objects.select_related("cluster", "graph")

    def retrieve(self, request, *args, **kwargs):
        return Response(DeploymentRequestSerializer(clusters.dgdr_refresh(self.get_object())).data)

    @extend_schema(request=AdoptSerializer, responses={201: dict})
    @action(detail=True, methods=["post"])
    def adopt(self, request, pk=None):
        body = AdoptSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        graph, revision, report = clusters.dgdr_adopt(req=self.get_object(), graph_name=body.validated_data["graph"],
                                                      user=request.user, via="api")
        return Response({"graph": graph.name, "revision": revision.number,
                         "findings": [f.as_dict() for f in report.findings]}, status=status.HTTP_201_CREATED)


class CompareView(APIView):
    """Two estimates side by side: the inputs that differ, each one's choice and best configuration."""

    @extend_schema(parameters=[CompareQuerySerializer], responses={
        200: dict, 409: OpenApiResponse({"type": "object", "properties": {"detail": {"type": "string"}}},
                                        description="One of the two estimates has not finished.")})
    def get(self, request):
        q = CompareQuerySerializer(data=request.query_params)
        q.is_valid(raise_exception=True)
        a = get_object_or_404(Estimate, pk=q.validated_data["a"])
        b = get_object_or_404(Estimate, pk=q.validated_data["b"])
        return Response(services.estimates_compare(a, b))
