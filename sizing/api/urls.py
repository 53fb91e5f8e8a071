"""Sizing's place in the API's one router (controlplane.api_urls)."""

from django.urls import path

from . import views

routes = [
    ("sizing/estimates", views.EstimateViewSet, "estimate"),
    ("sizing/requests", views.DeploymentRequestViewSet, "request"),
]
urlpatterns = [
    path("sizing/support/", views.SupportView.as_view(), name="sizing-support"),
    path("sizing/compare/", views.CompareView.as_view(), name="sizing-compare"),
]
