"""Metrics' place in the API's one router (controlplane.api_urls)."""

from django.urls import path

from . import views

routes = [("metrics/graphs", views.GraphMetricsViewSet, "graph-metrics")]
urlpatterns = [
    # The Planner timeline is metrics' (it reads Prometheus), under its graph's URL.
    path("graphs/<str:name>/planner/", views.PlannerTimelineView.as_view(), name="graph-planner"),
]
