"""Metrics' place in the API's one router (controlplane.api_urls)."""

from django.urls import path

from availability.waiting import waiting

from . import views

routes = [("metrics/graphs", views.GraphMetricsViewSet, "graph-metrics")]
urlpatterns = waiting([
    # The Planner timeline is metrics' (it reads Prometheus), under its graph's URL.
    path("graphs/<str:name>/planner/", views.PlannerTimelineView.as_view(), name="graph-planner"),
], "Prometheus")
