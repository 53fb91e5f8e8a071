from django.urls import include, path
from rest_framework.routers import SimpleRouter

from . import views

app_name = "metrics-api"
router = SimpleRouter()
router.register("graphs", views.GraphMetricsViewSet, basename="graph-metrics")

urlpatterns = [path("", include(router.urls))]
