"""Graphs' place in the API's one router (controlplane.api_urls)."""

from . import views

routes = [
    ("graphs", views.GraphViewSet, "graph"),
    ("validate", views.ValidateViewSet, "validate"),
    ("templates", views.TemplateViewSet, "template"),
    ("operations", views.OperationViewSet, "operation"),
]
urlpatterns: list = []
