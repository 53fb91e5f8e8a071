"""Repositories' place in the API's one router (controlplane.api_urls)."""

from django.urls import path

from .views import RepositoryViewSet, WebhookView

routes = [("repos", RepositoryViewSet, "repository")]
urlpatterns = [
    path("repos/<slug:name>/webhook/", WebhookView.as_view(), name="repos-webhook"),
]
