"""The metrics API: per-graph summaries, chart data and objectives. Reads need the viewer role,
writes the operator role (accounts.roles.RolePermission)."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from availability.waiting import waits_on
from graphs.models import Graph

from .. import charts, planner_timeline, services
from ..models import Objectives
from . import serializers as s

# 15m..10080m, 1h..168h or 1d..7d (metrics.charts.parse_window), leading zeros aside.
WINDOW_PATTERN = (r"^(1[5-9]|[2-9][0-9]|[1-9][0-9]{2}|[1-9][0-9]{3}|100[0-7][0-9]|10080)m$"
                  r"|^([1-9]|[1-9][0-9]|1[0-5][0-9]|16[0-8])h$|^[1-7]d$")
WINDOW = OpenApiParameter("window", {"type": "string", "pattern": WINDOW_PATTERN},
                          description="15m to 7d, for example 1h or 24h",
                          default=charts.DEFAULT_WINDOW)


def _window(request) -> str | None:
    """?window= as the API's schema states it (WINDOW_PATTERN), given once; pages are lenient."""
    windows = request.query_params.getlist("window")
    if len(windows) > 1 or (windows and not re.search(WINDOW_PATTERN, windows[0])):
        raise ValidationError({"window": [f"{windows[0][:40]!r} is not a window from 15m to 7d like 1h or 24h"
                                          if len(windows) == 1 else "give it once"]})
    return windows[0] if windows else None


@waits_on("Prometheus")
class GraphMetricsViewSet(viewsets.GenericViewSet):
    """Latency, load, SLO state and cost of graphs, read from Prometheus. When Prometheus does
    not answer, the response still comes at once, with ``state``/``error`` saying why."""

    lookup_field = "name"
    lookup_value_regex = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    serializer_class = s.SummarySerializer

    def get_queryset(self):
        return Graph.objects.select_related("head").order_by("name")

    @extend_schema(responses=s.SummarySerializer(many=True))
    def list(self, request):
        """Every applied graph, now (the last five minutes): one Prometheus query per page."""
        page = self.paginate_queryset(self.get_queryset().filter(deployment__isnull=False))
        rows = charts.graph_summaries(page)["rows"]
        return self.get_paginated_response([rows[graph.pk] for graph in page])

    @extend_schema(responses=s.SummarySerializer)
    def retrieve(self, request, name=None):
        graph = self.get_object()
        return Response(charts.graph_summaries([graph])["rows"][graph.pk])

    @extend_schema(parameters=[WINDOW], responses=s.ChartSerializer)
    @action(detail=True, methods=["get"])
    def chart(self, request, name=None):
        """TTFT and ITL p50/p90/p99, request rate, output tokens/s, in-flight and goodput over
        a window, with the graph's applies and scale changes as markers."""
        graph = self.get_object()
        _window(request)
        try:
            return Response(charts.chart_data(graph, request.query_params.get("window")))
        except charts.WindowError as exc:
            raise ValidationError({"window": [str(exc)]}) from exc

    @extend_schema(responses=s.GpuUsageSerializer)
    @action(detail=True, methods=["get"])
    def gpus(self, request, name=None):
        """GPU memory in use and utilisation per pod: DCGM exporter series in Prometheus on
        Kubernetes, NVML readings of each worker's processes on the local runtime."""
        from graphs.models import Deployment

        from ..gpus import gpu_usage

        graph = self.get_object()
        data = gpu_usage(graph, Deployment.objects.filter(graph=graph).first())
        data["pods"] = [{"pod": name, **row} for name, row in sorted(data["pods"].items())]
        return Response(data)

    @extend_schema(methods=["GET"], responses=s.ObjectivesSerializer)
    @extend_schema(methods=["PUT", "PATCH"], request=s.ObjectivesSerializer, responses=s.ObjectivesSerializer)
    @action(detail=True, methods=["get", "put", "patch"], serializer_class=s.ObjectivesSerializer)
    def objectives(self, request, name=None):
        """SLO targets (ms) and GPU-hour price. PUT sets all three (null clears one); PATCH
        changes the fields given."""
        graph = self.get_object()
        current = Objectives.objects.filter(graph=graph).select_related("updated_by").first()
        if request.method == "GET":
            return Response(s.ObjectivesSerializer(current or Objectives(graph=graph)).data)
        data = s.ObjectivesSerializer(current, data=request.data, partial=request.method == "PATCH")
        data.is_valid(raise_exception=True)
        values = {field: data.validated_data.get(field, getattr(current, field, None) if current else None)
                  for field in ("ttft_ms", "itl_ms", "gpu_hour_price")}
        if request.method == "PUT":
            values = {field: data.validated_data.get(field) for field in values}
        try:
            saved = services.objectives_set(graph=graph, user=request.user, via="api", **values)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from exc
        return Response(s.ObjectivesSerializer(saved).data)


class PlannerTimelineView(generics.GenericAPIView):
    """``GET /api/graphs/<name>/planner/``: the Planner timeline of one graph."""

    lookup_field = "name"
    queryset = Graph.objects.select_related("head")

    @extend_schema(parameters=[WINDOW], responses={200: OpenApiTypes.OBJECT}, operation_id="graphs_planner_retrieve")
    def get(self, request, name=None):
        """The Planner timeline: load, replicas per pool (desired and ready), each decision with
        its reason, TTFT/ITL against the targets, the Planner's estimates, and its health."""
        graph = self.get_object()
        try:
            return Response(planner_timeline.timeline_data(graph, _window(request)))
        except charts.WindowError as exc:
            raise ValidationError({"window": str(exc)}) from None
