from django.urls import include, path
from rest_framework.routers import SimpleRouter

from .views import RepositoryViewSet, WebhookView

app_name = "repos-api"
router = SimpleRouter()  # no API root view: graphs.api.urls owns /api/
router.register("repos", RepositoryViewSet, basename="repository")

urlpatterns = [
    path("repos/<slug:name>/webhook/", WebhookView.as_view(), name="webhook"),
    path("", include(router.urls)),
]
