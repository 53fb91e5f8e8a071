from django.urls import include, path
from rest_framework.routers import SimpleRouter

from . import views

app_name = "benchmarks-api"
router = SimpleRouter()
router.register("runs", views.BenchmarkRunViewSet, basename="run")
router.register("studies", views.StudyViewSet, basename="study")
router.register("recommendations", views.RecommendationViewSet, basename="recommendation")

urlpatterns = [
    path("profiles/", views.ProfilesView.as_view(), name="profiles"),
    path("compare/", views.CompareView.as_view(), name="compare"),
    path("compare/report/", views.CompareReportView.as_view(), name="compare-report"),
    path("", include(router.urls)),
]
