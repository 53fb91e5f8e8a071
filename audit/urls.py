from django.urls import include, path
from rest_framework.routers import DefaultRouter

from . import views

router = DefaultRouter()
router.register("audit", views.AuditViewSet, basename="audit")

urlpatterns = [
    path("audit/", views.audit_list, name="audit-list"),
    path("api/", include(router.urls)),
]
