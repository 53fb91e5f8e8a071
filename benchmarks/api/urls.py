"""Benchmarks' place in the API's one router (controlplane.api_urls)."""

from django.urls import path

from . import views

routes = [
    ("benchmarks/runs", views.BenchmarkRunViewSet, "run"),
    ("benchmarks/studies", views.StudyViewSet, "study"),
    ("benchmarks/recommendations", views.RecommendationViewSet, "recommendation"),
]
urlpatterns = [
    path("benchmarks/profiles/", views.ProfilesView.as_view(), name="profiles"),
    path("benchmarks/compare/", views.CompareView.as_view(), name="compare"),
    path("benchmarks/compare/report/", views.CompareReportView.as_view(), name="compare-report"),
]
