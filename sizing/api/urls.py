from django.urls import include, path
from rest_framework.routers import SimpleRouter

from . import views

app_name = "sizing-api"
router = SimpleRouter()
router.register("estimates", views.EstimateViewSet, basename="estimate")
router.register("requests", views.DeploymentRequestViewSet, basename="request")

urlpatterns = [
    path("support/", views.SupportView.as_view(), name="support"),
    path("compare/", views.CompareView.as_view(), name="compare"),
    path("", include(router.urls)),
]
