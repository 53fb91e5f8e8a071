from django.urls import include, path
from rest_framework.routers import SimpleRouter

from .api import ClusterViewSet

app_name = "clusters-api"
router = SimpleRouter()  # no API root view: graphs.api.urls owns /api/
router.register("clusters", ClusterViewSet, basename="cluster")

urlpatterns = [path("", include(router.urls))]
