from django.urls import include, path
from rest_framework.routers import DefaultRouter

from . import views

app_name = "api"
router = DefaultRouter()
router.register("graphs", views.GraphViewSet, basename="graph")
router.register("validate", views.ValidateViewSet, basename="validate")
router.register("templates", views.TemplateViewSet, basename="template")
router.register("operations", views.OperationViewSet, basename="operation")

urlpatterns = [path("", include(router.urls))]
