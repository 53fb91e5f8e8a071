"""Benchmarks' place in the API's one router (controlplane.api_urls)."""

from django.urls import path

from availability.waiting import waiting

from . import views

routes = [
    ("benchmarks/runs", views.BenchmarkRunViewSet, "run"),
    ("benchmarks/studies", views.StudyViewSet, "study"),
    ("benchmarks/recommendations", views.RecommendationViewSet, "recommendation"),
]
urlpatterns = waiting([
    path("benchmarks/profiles/", views.ProfilesView.as_view(), name="profiles"),
    path("benchmarks/compare/", views.CompareView.as_view(), name="compare"),
    path("benchmarks/compare/report/", views.CompareReportView.as_view(), name="compare-report"),
], "Prometheus and a benchmark's files")
