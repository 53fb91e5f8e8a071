"""Clusters' place in the API's one router (controlplane.api_urls)."""

from . import views

routes = [("clusters", views.ClusterViewSet, "cluster")]
urlpatterns: list = []
